package scoring_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/announcer/opentrackertest"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func swarmDueKey(hash bittorrent.InfoHash) string {
	return btstore.DueKey(int(hash[0]) % btstore.DueShards)
}

// BenchmarkScoreOneTorrent is one torrent's whole step on the single
// redis-server: count its 20-peer swarm (what a worker does), then apply
// the result (what OnItemDone does: two scripts). The queue's claim and
// done are not included: see BenchmarkScoringThroughThePool.
func BenchmarkScoreOneTorrent(b *testing.B) {
	backend := redistest.Backends()[0]
	require.NoError(b, redistest.Flush(context.Background(), backend))
	f := newFixture(b, backend, false, "")
	ctx := context.Background()
	const torrents = 1000
	bases := make([]int64, torrents) // each record's rounds count from its base
	for i := range torrents {
		hash := infoHash(fmt.Sprint("bench", i))
		f.announce(hash, i*20, 20)
		_, err := f.scorer.Track(ctx, hash)
		require.NoError(b, err)
		bases[i] = f.record(hash).RoundBase
	}
	b.ResetTimer()
	for i := range b.N {
		hash := infoHash(fmt.Sprint("bench", i%torrents))
		item := scoring.ItemName(hash, bases[i%torrents]+int64(i/torrents+1))
		raw, err := f.scorer.Process(ctx, item)
		require.NoError(b, err)
		r, err := scoring.ParseResult(raw)
		require.NoError(b, err)
		_, err = f.scorer.Apply(ctx, item, r)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "torrents/s")
}

// BenchmarkScoreOneTorrentExternal is one torrent's whole step with one
// external tracker (Debian's opentracker on 127.0.0.1, 20 fake peers per
// torrent) and an empty own swarm: count the swarm, announce to the
// tracker (UDP: connect, announce, stopped; HTTP: announce, stopped),
// look up and stage the reply's IPs, then apply. One torrent at a time,
// as one worker does.
func BenchmarkScoreOneTorrentExternal(b *testing.B) {
	const torrents = 200
	hashes := make([][20]byte, torrents)
	for i := range hashes {
		hashes[i] = infoHash(fmt.Sprint("external", i))
	}
	ot := opentrackertest.Start(b, hashes)
	for i, hash := range hashes {
		ot.Announce(b, hash, i*20, 20)
	}
	for _, proto := range []string{"udp", "http"} {
		b.Run(proto, func(b *testing.B) {
			backend := redistest.Backends()[0]
			ctx := context.Background()
			require.NoError(b, redistest.Flush(ctx, backend))
			f := newFixture(b, backend, false, `{"tracker_timeout":"5s"}`)
			url := ot.UDPURL()
			if proto == "http" {
				url = ot.HTTPURL()
			}
			bases := make([]int64, torrents)
			for i, hash := range hashes {
				require.NoError(b, f.store.Register(ctx, hash, swarm.Registration{ID: "1"}))
				_, err := f.scorer.Track(ctx, hash)
				require.NoError(b, err)
				bases[i] = f.record(hash).RoundBase
				_, _, err = f.scorer.SetTrackers(ctx, hash, []scoring.Tracker{{URL: url}})
				require.NoError(b, err)
			}
			b.ResetTimer()
			for i := range b.N {
				item := scoring.ItemName(hashes[i%torrents], bases[i%torrents]+int64(i/torrents+1))
				raw, err := f.scorer.Process(ctx, item)
				require.NoError(b, err)
				r, err := scoring.ParseResult(raw)
				require.NoError(b, err)
				require.Empty(b, r.Trackers[0].Error)
				require.Equal(b, int64(20), r.Trackers[0].Peers)
				_, err = f.scorer.Apply(ctx, item, r)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "torrents/s")
		})
	}
}

// BenchmarkScoringThroughThePool: b.N torrents queued in the real engine,
// scored by a pool of up to 8 workers (claim, count, done, apply), scaled
// every 10 ms.
func BenchmarkScoringThroughThePool(b *testing.B) {
	backend := redistest.Backends()[0]
	require.NoError(b, redistest.Flush(context.Background(), backend))
	f := newFixture(b, backend, false, "")
	ctx := context.Background()
	for i := range b.N {
		f.announce(infoHash(fmt.Sprint("pool", i)), i, 1)
	}
	host, _ := newEngineHostB(b, f)
	_, err := f.scorer.Discover(ctx)
	require.NoError(b, err)
	_, err = f.scorer.Round(ctx, epoch, func(items []plugins.ScoredItem) error {
		_, err := host.EnqueueScored(ctx, project, items)
		return err
	})
	require.NoError(b, err)
	b.ResetTimer()
	pool := scoring.NewPool(scoring.PoolConfig{Host: host, Project: project,
		Process: func(ctx context.Context, item string) (json.RawMessage, error) { return f.scorer.Process(ctx, item) },
		Max:     8, Poll: poll, Logger: quiet})
	pool.Start(ctx)
	// Scale as Run would, at a short interval so the pool reaches its
	// maximum early in the run.
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for pool.Done() < int64(b.N) {
		<-ticker.C
		_, err := pool.Scale(ctx)
		require.NoError(b, err)
	}
	b.StopTimer()
	pool.Stop()
	require.Equal(b, int64(b.N), f.scorer.Applied())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "torrents/s")
}

// BenchmarkQueueACycle is the "score" job's work for 100,000 scored
// torrents on the single redis-server: discovery finding every one
// indexed, then one item per torrent into the real engine's
// score-ordered queue. b.N cycles; the first queues, the rest rescore.
func BenchmarkQueueACycle(b *testing.B) {
	backend := redistest.Backends()[0]
	ctx := context.Background()
	require.NoError(b, redistest.Flush(ctx, backend))
	f := newFixture(b, backend, false, "")
	host, _ := newEngineHostB(b, f)
	const torrents = 100_000
	pipe := backend.Client.Pipeline()
	for i := range torrents {
		hash := infoHash(fmt.Sprint("cycle", i))
		pipe.HSet(ctx, btstore.TorrentKey(hash), "created", 1)
		pipe.ZAdd(ctx, swarmDueKey(hash), redis.Z{Score: 1, Member: hexOf(hash)})
		if pipe.Len() >= 2000 {
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(b, err)
	n, err := f.scorer.Discover(ctx)
	require.NoError(b, err)
	require.Equal(b, torrents, n)
	b.ResetTimer()
	for range b.N {
		_, err := f.scorer.Discover(ctx)
		require.NoError(b, err)
		queued, err := f.scorer.Round(ctx, epoch, func(items []plugins.ScoredItem) error {
			_, err := host.EnqueueScored(ctx, project, items)
			return err
		})
		require.NoError(b, err)
		require.Equal(b, torrents, queued)
	}
	b.ReportMetric(float64(b.N*torrents)/b.Elapsed().Seconds(), "torrents/s")
}
