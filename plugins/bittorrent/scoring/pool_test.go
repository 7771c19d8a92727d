package scoring_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

const (
	project    = "bt-scoring"
	reclaimTTL = 10 * time.Minute
	eventually = 20 * time.Second
	poll       = 5 * time.Millisecond
)

// engineHost is the queue engine as the plugin's HostAPI, the way the host
// serves it, with the host's event delivery folded in: a Done hands its
// result to the scorer's Apply at once, as OnItemDone would.
type engineHost struct {
	plugins.HostAPI
	scorer *scoring.Scorer
}

func (h engineHost) Done(ctx context.Context, project, worker string, items []string, result json.RawMessage) (int, error) {
	n, err := h.HostAPI.Done(ctx, project, worker, items, result)
	if err != nil {
		return n, err
	}
	var r scoring.Result
	if err := json.Unmarshal(result, &r); err != nil {
		return n, err
	}
	for _, item := range items {
		if _, err := h.scorer.Apply(ctx, item, r); err != nil {
			return n, err
		}
	}
	return n, nil
}

// newEngineHost creates the scoring project the way the host does for the
// item type (score order, count mode, reclaiming on).
func newEngineHost(t *testing.T, f *fixture) (engineHost, *queues.FakeClock) {
	t.Helper()
	return newEngineHostB(t, f)
}

func newEngineHostB(tb testing.TB, f *fixture) (engineHost, *queues.FakeClock) {
	tb.Helper()
	clock := queues.NewFakeClock(epoch)
	engine := queues.NewEngine(f.b.Client, queues.Options{Clock: clock, Logger: quiet})
	q := pluginhost.EngineQueues(engine).(pluginhost.WorkQueues)
	require.NoError(tb, q.EnsureProject(context.Background(), project, plugins.ProjectSpec{ReclaimTTL: reclaimTTL, DoneMode: "count", RecentDone: 100_000}))
	return engineHost{HostAPI: q, scorer: f.scorer}, clock
}

// queueRound runs the job's work: discover, then queue every torrent's item.
func queueRound(t *testing.T, f *fixture, host plugins.HostAPI) int {
	t.Helper()
	_, err := f.scorer.Discover(t.Context())
	require.NoError(t, err)
	n, err := f.scorer.Round(t.Context(), epoch, func(items []plugins.ScoredItem) error {
		_, err := host.EnqueueScored(t.Context(), project, items)
		return err
	})
	require.NoError(t, err)
	return n
}

// TestADeadWorkersTorrentIsProcessedAgain: a worker claims a torrent's
// item and dies; the score stays where it was; once the claim expires the
// item is handed out again and processed once.
func TestADeadWorkersTorrentIsProcessedAgain(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		host, queueClock := newEngineHost(t, f)
		hash := f.tracked("dead worker")
		require.Equal(t, 1, queueRound(t, f, host))

		claimed, err := host.Claim(ctx, project, scoring.WorkerName, 10)
		require.NoError(t, err)
		require.Equal(t, []string{f.item(hash, 1)}, claimed)
		_, err = f.scorer.Process(ctx, claimed[0]) // counted, then the worker dies
		require.NoError(t, err)
		rec := f.record(hash)
		require.Equal(t, 1.0, rec.Score, "a worker that died mid-item left the score alone")
		require.Equal(t, int64(0), rec.Round)
		again, err := host.Claim(ctx, project, scoring.WorkerName, 10)
		require.NoError(t, err)
		require.Empty(t, again, "the claim holds until it expires")

		queueClock.Advance(reclaimTTL + time.Second)
		pool := scoring.NewPool(scoring.PoolConfig{Host: host, Project: project, Process: f.scorer.Process, Max: 2, Poll: poll, Logger: quiet})
		pool.Start(ctx)
		t.Cleanup(pool.Stop)
		// The worker counts its done after the host's Done returns, and the
		// round is applied within that Done: wait for both (the count read
		// right after the round was 0 once on the loaded cluster).
		require.Eventually(t, func() bool { return f.record(hash).Round == 1 && pool.Done() >= 1 }, eventually, poll)
		rec = f.record(hash)
		require.Equal(t, 1.0*0.8, rec.Score, "processed again: one peer, fewer than max")
		require.Equal(t, int64(1), pool.Done())
		counts, err := host.Counts(ctx, project)
		require.NoError(t, err)
		require.Equal(t, plugins.ProjectCounts{Done: 1}, counts)
	})
}

// TestThePoolGrowsWithTheBacklogAndShrinksWhenIdle: with 300 items and
// workers held mid-item, the backlog does not shrink, so each Scale
// doubles the pool up to its maximum (8 items in progress at once, where
// one worker would do one); released, the pool clears the backlog, every
// torrent processed exactly once, and idle it shrinks back to one.
func TestThePoolGrowsWithTheBacklogAndShrinksWhenIdle(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		host, _ := newEngineHost(t, f)
		const torrents = 300
		for i := range torrents {
			f.announce(infoHash("pool"+string(rune(i))), i, 1)
		}
		require.Equal(t, torrents, queueRound(t, f, host))

		gate := make(chan struct{})
		var inFlight, peak atomic.Int64
		var once sync.Once
		process := func(ctx context.Context, item string) (json.RawMessage, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return f.scorer.Process(ctx, item)
		}
		pool := scoring.NewPool(scoring.PoolConfig{Host: host, Project: project, Process: process, Max: 8, Poll: poll, Logger: quiet})
		pool.Start(ctx)
		t.Cleanup(func() { once.Do(func() { close(gate) }); pool.Stop() })
		require.Equal(t, 1, pool.Size())
		sizes := []int{}
		for range 5 {
			require.Eventually(t, func() bool { return inFlight.Load() == int64(pool.Size()) }, eventually, poll,
				"every worker holds an item")
			n, err := pool.Scale(ctx)
			require.NoError(t, err)
			sizes = append(sizes, n)
		}
		require.Equal(t, []int{2, 4, 8, 8, 8}, sizes, "doubling while the backlog does not shrink, capped at 8")
		require.Eventually(t, func() bool { return inFlight.Load() == 8 }, eventually, poll)
		require.Equal(t, int64(8), peak.Load())

		once.Do(func() { close(gate) })
		require.Eventually(t, func() bool {
			c, err := host.Counts(ctx, project)
			return err == nil && c.Todo == 0 && c.Out == 0 && c.Done == torrents && pool.Done() == torrents
		}, eventually, poll)
		require.Equal(t, int64(torrents), f.scorer.Applied(), "each torrent processed once")
		processed, err := f.scorer.ProcessedLastHour(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(torrents), processed)
		for want := 7; want >= 1; want-- {
			n, err := pool.Scale(ctx)
			require.NoError(t, err)
			require.Equal(t, want, n, "idle: one worker fewer per Scale")
		}
		n, err := pool.Scale(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "never below one")
	})
}
