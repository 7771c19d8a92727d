package btadmin_test

import (
	"testing"

	"github.com/hoardproject/hoard/internal/redistest"
)

// TestMain runs the API's tests on a real redis-server and a real 3-node
// Redis Cluster (see internal/redistest).
func TestMain(m *testing.M) { redistest.RunMain(m) }
