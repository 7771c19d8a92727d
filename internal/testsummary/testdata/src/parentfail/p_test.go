package parentfail

import "testing"

func TestParentFailsItself(t *testing.T) {
	t.Run("single", func(t *testing.T) {})
	t.Run("cluster", func(t *testing.T) { t.Skip("by design: only the cluster backend is a cluster") })
	t.Fatal("the parent's own check failed")
}
