package main

import (
	"context"
	"crypto/sha1"
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

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"
)

// TestReaperSurvivesKilledPlugins: a real `hoard serve` runs the real
// BitTorrent plugin binary with the reaper on, over uploads whose initial
// notices are all due. While its workers take the steps, the plugin
// process is killed with SIGKILL twice (hoard restarts it each time). In
// the end every upload has had its initial notice exactly once (its state
// row records one), the step items are all done and none is waiting or
// out, and the queue counted each done once: nothing lost, nothing done
// twice.
func TestReaperSurvivesKilledPlugins(t *testing.T) {
	var client *redis.Client
	for _, b := range redistest.Backends() {
		if c, ok := b.Client.(*redis.Client); ok {
			client = c
			// From an empty Redis: the plugin discovers every registered
			// torrent, other tests' included.
			require.NoError(t, redistest.Flush(t.Context(), b))
		}
	}
	if client == nil {
		t.Skip("by design: needs the single redis-server backend")
	}
	ctx := context.Background()
	dir := t.TempDir()
	hoard, plugin := filepath.Join(dir, "hoard"), filepath.Join(dir, "hoard-bittorrent")
	for out, pkg := range map[string]string{hoard: ".", plugin: "../hoard-bittorrent"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Stderr = os.Stderr
		require.NoError(t, build.Run(), "go build %s", pkg)
	}

	// Uploads never seeded, created past the 8 h grace, by 100 uploaders;
	// names and project unique to this run (the Redis outlives it).
	const uploads = 2000
	run := time.Now().UnixNano()
	project := fmt.Sprintf("bt-reaper-kill-%d", run%1_000_000)
	store, err := swarm.New(client, swarm.Config{Private: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	hashes := make([]bittorrent.InfoHash, uploads)
	for i := range hashes {
		hashes[i] = sha1.Sum(fmt.Appendf(nil, "kill-%d-%d", run, i))
		require.NoError(t, store.Register(ctx, hashes[i], swarm.Registration{ID: fmt.Sprintf("k%d", i),
			Uploader: fmt.Sprintf("ku%d", i%100), Created: time.Now().Add(-9 * time.Hour)}))
	}
	_ = store.Stop()

	port, err := localredis.FreeLoopbackPort()
	require.NoError(t, err)
	trackerPort, err := localredis.FreeLoopbackPort()
	require.NoError(t, err)
	dataDir := t.TempDir()
	settings := fmt.Sprintf(`bittorrent={"mode":"private","http":"127.0.0.1:%d","udp4":"","udp6":"",
		"reaper":{"enabled":true,"period":"2s","reclaim_ttl":"3s","max_workers":2,"project":%q,
		"max_total":%d,"max_per_user":%d}}`, trackerPort, project, uploads, uploads)
	cmd := exec.Command(hoard, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--data-dir", dataDir, "--projects-file", "/nonexistent",
		"--plugin", "bittorrent="+plugin, "--plugin-settings", settings)
	cmd.Env = append(os.Environ(), "HOARD_REDIS_URL=redis://"+client.Options().Addr, "HOARD_ADMIN_TOKEN=kill-token")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

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
		// Kill while steps are being worked: some done, some not yet.
		before := counts().Done
		require.Eventually(t, func() bool {
			c := counts()
			return c.Done > before && c.Done < uploads
		}, 120*time.Second, 2*time.Millisecond, "kill %d: the workers are taking steps", kill+1)
		pid = pidFromFile(t, pidFile, pid)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		t.Logf("kill %d: plugin %d killed at %+v", kill+1, pid, counts())
	}
	pidFromFile(t, pidFile, pid) // restarted

	require.Eventually(t, func() bool {
		c := counts()
		return c.Done >= uploads && c.Todo == 0 && c.Out == 0
	}, 180*time.Second, 50*time.Millisecond, "every step is done and none waits or is out")
	c := counts()
	require.EqualValues(t, uploads, c.Done, "each step done once, none lost: %+v", c)
	for i, hash := range hashes {
		state, err := client.HMGet(ctx, swarm.ReaperKey(hash), "notify", "initial_at").Result()
		require.NoError(t, err)
		require.Equal(t, "initial", state[0], "upload %d", i)
		require.NotNil(t, state[1], "upload %d", i)
	}
	stats, err := client.HGetAll(ctx, queues.StatsKey(project)).Result()
	require.NoError(t, err)
	t.Logf("after 2 plugin kills: %d uploads notified once; queue stats %v", uploads, stats)
}
