package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// emptySingleRedis is the single redis-server backend, flushed: the
// BitTorrent plugin discovers every registered torrent, other tests'
// included. A test without it skips, by design. These tests stay serial
// (not redistest.Parallel): they require each item done exactly once
// across plugin kills, and load lengthens every step they time. (At load
// 20-25 the scoring one once counted 3,053 dones for 3,000 items: a kill
// during the score tick made the host run the cycle again, which queued a
// second round of the torrents already applied; Round now keeps a cycle's
// rounds, scoring.TestACycleRunAgainQueuesTheSameItems.)
func emptySingleRedis(t *testing.T) *redis.Client {
	t.Helper()
	for _, b := range redistest.Require(t) {
		if c, ok := b.Client.(*redis.Client); ok {
			require.NoError(t, redistest.Flush(t.Context(), b))
			return c
		}
	}
	t.Skip("by design: needs the single redis-server backend")
	return nil
}

// killPluginWhileItWorks runs the real `hoard serve` with the real
// hoard-bittorrent binary and pluginSettings (its "http" address is
// filled in), waits until the plugin's workers have done some but not
// all of project's items, SIGKILLs the plugin process, and does that
// twice (hoard restarts it each time). It returns once all items are
// done and none waits or is out, with a reader of the project's counts.
func killPluginWhileItWorks(t *testing.T, client *redis.Client, project string, items int, pluginSettings string, serveArgs ...string) func() queues.Counts {
	t.Helper()
	hoard, plugin := buildBinaries(t)
	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	trackerPort, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	dataDir := t.TempDir()
	settings := fmt.Sprintf(`bittorrent={"mode":"private","http":"127.0.0.1:%d","udp4":"","udp6":"",%s}`, trackerPort, pluginSettings)
	args := append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--data-dir", dataDir, "--projects-file", "/nonexistent",
		"--plugin", "bittorrent=" + plugin, "--plugin-settings", settings}, serveArgs...)
	cmd := exec.Command(hoard, args...)
	cmd.Env = append(os.Environ(), "HOARD_REDIS_URL=redis://"+client.Options().Addr, "HOARD_ADMIN_TOKEN=kill-token")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ctx := context.Background()
	engine := queues.NewEngine(client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
	counts := func() queues.Counts {
		c, err := engine.Counts(ctx, project)
		if err != nil {
			return queues.Counts{}
		}
		return c
	}
	pidFile := filepath.Join(dataDir, "plugins", "bittorrent.pid")
	pid := 0
	for kill := range 2 {
		before := counts().Done
		require.Eventually(t, func() bool {
			c := counts()
			return c.Done > before && c.Done < int64(items)
		}, 120*time.Second, 2*time.Millisecond, "kill %d: the workers are taking items", kill+1)
		pid = pidFromFile(t, pidFile, pid)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		t.Logf("kill %d: plugin %d killed at %+v", kill+1, pid, counts())
	}
	pidFromFile(t, pidFile, pid) // restarted
	require.Eventually(t, func() bool {
		c := counts()
		return c.Done >= int64(items) && c.Todo == 0 && c.Scored == 0 && c.Out == 0
	}, 180*time.Second, 50*time.Millisecond, "every item is done and none waits or is out")
	return counts
}
