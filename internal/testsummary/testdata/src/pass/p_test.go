package pass

import "testing"

func TestOne(t *testing.T) {}
func TestSubs(t *testing.T) {
	for _, n := range []string{"single", "cluster"} {
		t.Run(n, func(t *testing.T) { t.Parallel(); t.Log("hello") })
	}
}
