package main

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"crypto/sha1"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	client := emptySingleRedis(t)
	ctx := context.Background()

	// Uploads never seeded, created past the 8 h grace, by 100 uploaders.
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

	counts := killPluginWhileItWorks(t, client, project, uploads, fmt.Sprintf(
		`"reaper":{"enabled":true,"period":"2s","reclaim_ttl":"3s","max_workers":2,"project":%q,"max_total":%d,"max_per_user":%d}`,
		project, uploads, uploads))
	c := counts()
	require.EqualValues(t, uploads, c.Done, "each step done once, none lost: %+v", c)
	for i, hash := range hashes {
		state, err := client.HMGet(ctx, btstore.ReaperKey(hash), "notify", "initial_at").Result()
		require.NoError(t, err)
		require.Equal(t, "initial", state[0], "upload %d", i)
		require.NotNil(t, state[1], "upload %d", i)
	}
	stats, err := client.HGetAll(ctx, queues.StatsKey(project)).Result()
	require.NoError(t, err)
	t.Logf("after 2 plugin kills: %d uploads notified once; queue stats %v", uploads, stats)
}
