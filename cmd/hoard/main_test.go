package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
)

// TestMain gives the CLI tests a real redis-server and a real 3-node
// Redis Cluster (see internal/redistest), and removes the binaries the
// tests built afterwards.
func TestMain(m *testing.M) { redistest.RunMain(m, removeBuiltBinaries) }

// The binaries the tests run as real processes (hoard serve and its
// plugins) are built once for the package: a link each time took most of
// the tests that run them.
var built struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string // package -> binary
}

// builtBinary builds pkg (relative to this directory, as go build takes
// it, without the race detector: the processes under test, not the test)
// the first time a test asks, and returns its path.
func builtBinary(t *testing.T, pkg string) string {
	t.Helper()
	built.mu.Lock()
	defer built.mu.Unlock()
	if bin, ok := built.bins[pkg]; ok {
		return bin
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "hoard-cmd-test-bin-")
		require.NoError(t, err)
		built.dir, built.bins = dir, map[string]string{}
	}
	bin := filepath.Join(built.dir, filepath.Base(filepath.Clean(pkg)))
	if pkg == "." {
		bin = filepath.Join(built.dir, "hoard")
	}
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Stderr = os.Stderr
	require.NoError(t, build.Run(), "go build %s", pkg)
	built.bins[pkg] = bin
	return bin
}

func removeBuiltBinaries() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
