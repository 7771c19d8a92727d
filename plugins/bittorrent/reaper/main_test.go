package reaper_test

import (
	"testing"

	"github.com/hoardproject/hoard/internal/redistest"
)

// TestMain runs every reaper test on a real redis-server and on a real
// 3-node Redis Cluster (see internal/redistest).
func TestMain(m *testing.M) { redistest.RunMain(m) }
