package swarm_test

import (
	"os"
	"testing"

	"github.com/hoardproject/hoard/internal/redistest"
)

// TestMain runs every store test on a real redis-server and on a real
// 3-node Redis Cluster (see internal/redistest). Started with
// HOARD_SWARM_FRONTEND_URL set, the test binary is instead a frontend
// process for TestNothingDriftsUnderMixedLoad to SIGKILL.
func TestMain(m *testing.M) {
	if url := os.Getenv(frontendProcessEnv); url != "" {
		os.Exit(runFrontendProcess(url))
	}
	redistest.RunMain(m)
}
