package localredis_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/localredis"
)

// TestTwoStartersAtOnceExactlyOneWins: before, the check was a pidfile
// read, and two hoards started together both started a redis-server on one
// data dir (5 of 5 trials). With the flock exactly one wins, every time.
func TestTwoStartersAtOnceExactlyOneWins(t *testing.T) {
	requireRedisServer(t)
	for trial := range 3 {
		dataDir := t.TempDir()
		const starters = 4
		servers := make([]*localredis.Server, starters)
		errs := make([]error, starters)
		var ready, wg sync.WaitGroup
		ready.Add(1)
		for i := range servers {
			servers[i] = localredis.New(localredis.Config{DataDir: dataDir, LockWait: 200 * time.Millisecond, Logger: testLogger()})
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready.Wait()
				errs[i] = servers[i].Start(t.Context())
			}()
		}
		ready.Done()
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				require.NoError(t, clientFor(t, servers[i]).Ping(t.Context()).Err())
			} else {
				require.Contains(t, err.Error(), "in use by another hoard", "trial %d", trial)
			}
		}
		require.Equal(t, 1, won, "trial %d: exactly one starter wins", trial)
		for _, s := range servers {
			require.NoError(t, s.Stop())
		}
		// Once the winner stopped (and its redis-server exited), the dir is free.
		again := startServer(t, localredis.Config{DataDir: dataDir})
		require.NoError(t, again.Stop())
	}
}

// TestRedisServerInheritsTheDataDirLock: the redis-server child holds the
// data dir's redis lock, and not the owner lock, so a hoard killed with
// SIGKILL frees the owner lock at once for the next hoard, which finds the
// redis-server by its lock (and adopts it, or waits while it exits).
func TestRedisServerInheritsTheDataDirLock(t *testing.T) {
	requireRedisServer(t)
	dataDir := t.TempDir()
	server := startServer(t, localredis.Config{DataDir: dataDir})
	pid := server.PID()
	require.Positive(t, pid)
	holds := func(name string) bool {
		fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		require.NoError(t, err)
		lock, err := filepath.EvalSymlinks(filepath.Join(dataDir, name))
		require.NoError(t, err)
		for _, fd := range fds {
			target, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
			if err == nil && target == lock {
				return true
			}
		}
		return false
	}
	require.True(t, holds("redis.lock"), "redis-server %d holds redis.lock open", pid)
	require.False(t, holds("hoard.lock"), "redis-server %d does not hold the owner lock", pid)
	content, err := os.ReadFile(filepath.Join(dataDir, "redis.pid"))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(pid), strings.TrimSpace(string(content)))
}
