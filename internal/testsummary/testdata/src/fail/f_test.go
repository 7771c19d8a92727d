package fail

import "testing"

func TestGood(t *testing.T) {}
func TestBad(t *testing.T) {
	t.Run("single", func(t *testing.T) {})
	t.Run("cluster", func(t *testing.T) { t.Log("about to fail"); t.Fatalf("want 3, got %d\nsecond line", 4) })
}
