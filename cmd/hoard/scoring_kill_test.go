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
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"
)

// TestScoringSurvivesKilledWorkers: a real `hoard serve` runs the real
// BitTorrent plugin binary with scoring on, over registered torrents with
// no peers. While its workers score the first cycle, the plugin process
// (the workers' process) is killed with SIGKILL twice, and hoard restarts
// it. In the end every torrent has been scored exactly once in that cycle
// (round 1, score 1.0 x 0.5, one history entry), the score items are all
// done once and none is waiting or out: no torrent stranded at a score a
// dead worker left (btstat set 0 while processing), none applied twice.
func TestScoringSurvivesKilledWorkers(t *testing.T) {
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

	// Registered torrents; names and project unique to this run (the Redis
	// outlives it).
	const uploads = 3000
	run := time.Now().UnixNano()
	project := fmt.Sprintf("bt-scoring-kill-%d", run%1_000_000)
	store, err := swarm.New(client, swarm.Config{Private: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	hashes := make([]bittorrent.InfoHash, uploads)
	for i := range hashes {
		hashes[i] = sha1.Sum(fmt.Appendf(nil, "score-kill-%d-%d", run, i))
		require.NoError(t, store.Register(ctx, hashes[i], swarm.Registration{ID: fmt.Sprintf("s%d", i)}))
	}
	_ = store.Stop()

	port, err := localredis.FreeLoopbackPort()
	require.NoError(t, err)
	trackerPort, err := localredis.FreeLoopbackPort()
	require.NoError(t, err)
	dataDir := t.TempDir()
	settings := fmt.Sprintf(`bittorrent={"mode":"private","http":"127.0.0.1:%d","udp4":"","udp6":"",
		"scoring":{"enabled":true,"period":"24h","reclaim_ttl":"3s","max_workers":4,"project":%q}}`, trackerPort, project)
	cmd := exec.Command(hoard, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--data-dir", dataDir, "--projects-file", "/nonexistent",
		"--plugin", "bittorrent="+plugin, "--plugin-settings", settings, "--plugin-event-retry", "2s")
	cmd.Env = append(os.Environ(), "HOARD_REDIS_URL=redis://"+client.Options().Addr, "HOARD_ADMIN_TOKEN=score-kill-token")
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
		}, 120*time.Second, 2*time.Millisecond, "kill %d: the workers are scoring", kill+1)
		pid = pidFromFile(t, pidFile, pid)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		t.Logf("kill %d: plugin %d killed at %+v", kill+1, pid, counts())
	}
	pidFromFile(t, pidFile, pid) // restarted

	require.Eventually(t, func() bool {
		c := counts()
		return c.Done >= uploads && c.Todo == 0 && c.Out == 0
	}, 180*time.Second, 50*time.Millisecond, "every torrent is scored and no item waits or is out")
	c := counts()
	require.EqualValues(t, uploads, c.Done, "each torrent's item done once, none lost: %+v", c)
	// A done's result is applied by the plugin's OnItemDone, from the
	// project's event log: events a killed plugin had read come back after
	// --plugin-event-retry.
	require.Eventually(t, func() bool {
		pipe := client.Pipeline()
		rounds := make([]*redis.SliceCmd, len(hashes))
		for i, hash := range hashes {
			rounds[i] = pipe.HMGet(ctx, scoring.ScoreKey(hash), "round")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return false
		}
		for _, r := range rounds {
			if r.Val()[0] != "1" {
				return false
			}
		}
		return true
	}, 120*time.Second, 100*time.Millisecond, "every torrent's round is applied")
	for i, hash := range hashes {
		record, err := client.HMGet(ctx, scoring.ScoreKey(hash), "round", "score").Result()
		require.NoError(t, err)
		require.Equal(t, "1", record[0], "torrent %d: round 1, once", i)
		require.Equal(t, "0.5", record[1], "torrent %d: no peers, x0.5 once", i)
		history, err := client.LLen(ctx, scoring.HistoryKey(hash)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, history, "torrent %d: one round in its history", i)
	}
	stats, err := client.HGetAll(ctx, queues.StatsKey(project)).Result()
	require.NoError(t, err)
	t.Logf("after 2 plugin kills: %d torrents scored once; queue stats %v", uploads, stats)
}
