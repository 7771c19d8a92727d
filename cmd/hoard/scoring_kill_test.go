package main

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"crypto/sha1"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
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
	client := emptySingleRedis(t)
	ctx := context.Background()

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

	counts := killPluginWhileItWorks(t, client, project, uploads, fmt.Sprintf(
		`"scoring":{"enabled":true,"period":"24h","reclaim_ttl":"3s","max_workers":4,"project":%q}`, project),
		"--plugin-event-retry", "2s")
	c := counts()
	queueStats, err := client.HGetAll(ctx, queues.StatsKey(project)).Result()
	require.NoError(t, err)
	require.EqualValues(t, uploads, c.Done, "each torrent's item done once, none lost: %+v; queue stats %v", c, queueStats)
	// A done's result is applied by the plugin's OnItemDone, from the
	// project's event log: events a killed plugin had read come back after
	// --plugin-event-retry.
	require.Eventually(t, func() bool {
		pipe := client.Pipeline()
		rounds := make([]*redis.SliceCmd, len(hashes))
		for i, hash := range hashes {
			rounds[i] = pipe.HMGet(ctx, btstore.ScoreKey(hash), "round", "round_base")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return false
		}
		for _, r := range rounds {
			if roundsApplied(r.Val()) != 1 {
				return false
			}
		}
		return true
	}, 120*time.Second, 100*time.Millisecond, "every torrent's round is applied")
	for i, hash := range hashes {
		record, err := client.HMGet(ctx, btstore.ScoreKey(hash), "round", "round_base", "score").Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, roundsApplied(record[:2]), "torrent %d: round 1, once", i)
		require.Equal(t, "0.5", record[2], "torrent %d: no peers, x0.5 once", i)
		history, err := client.LLen(ctx, btstore.ScoreHistoryKey(hash)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, history, "torrent %d: one round in its history", i)
	}
	stats, err := client.HGetAll(ctx, queues.StatsKey(project)).Result()
	require.NoError(t, err)
	t.Logf("after 2 plugin kills: %d torrents scored once; queue stats %v", uploads, stats)
}

// roundsApplied reads a score record's round and round_base: a record's
// rounds count from its base (score_track.lua).
func roundsApplied(v []any) int64 {
	round, _ := v[0].(string)
	base, _ := v[1].(string)
	r, _ := strconv.ParseInt(round, 10, 64)
	b, _ := strconv.ParseInt(base, 10, 64)
	return r - b
}
