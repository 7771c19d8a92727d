package queues_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/queues"
)

var scoredQueue = queues.Target{Queue: queues.QueueScored}

func (tb bundle) enqueueScored(t *testing.T, scores map[string]float64) queues.ScoredResult {
	t.Helper()
	items := make([]queues.QueueItem, 0, len(scores))
	for name, score := range scores {
		items = append(items, queues.QueueItem{Name: name, Score: score})
	}
	res, err := tb.engine.EnqueueScored(tb.ctx, tb.slug, items)
	require.NoError(t, err)
	return res
}

func TestScoredQueueServesHighestFirstBeforeFIFO(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "fifo-1", "fifo-2")
		res := tb.enqueueScored(t, map[string]float64{"low": 0.01, "high": 1.2, "mid": 0.8, "neg": -3})
		require.Equal(t, queues.ScoredResult{Queued: 4, Length: 4}, res)
		c := tb.counts(t)
		require.EqualValues(t, 4, c.Scored)
		require.EqualValues(t, 6, c.TodoTotal())

		require.Equal(t, []string{"high", "mid"}, tb.claim(t, "alice", 2))
		require.Equal(t, []string{"low", "neg", "fifo-1"}, tb.claim(t, "alice", 3))
		_, err := tb.done("alice", "high", "mid", "low", "neg", "fifo-1")
		require.NoError(t, err)

		// Done and out items are not queued again; a waiting one is rescored.
		tb.enqueue(t, todo, "w")
		res = tb.enqueueScored(t, map[string]float64{"high": 5, "fifo-2": 1, "new": 0.5})
		require.Equal(t, queues.ScoredResult{Queued: 2, Skipped: 1, Length: 2}, res, "high is done")
		res = tb.enqueueScored(t, map[string]float64{"new": 7})
		require.Equal(t, queues.ScoredResult{Rescored: 1, Length: 2}, res)
		require.Equal(t, []string{"new", "fifo-2", "w"}, tb.claim(t, "bob", 3))
		res = tb.enqueueScored(t, map[string]float64{"new": 9})
		require.Equal(t, queues.ScoredResult{Skipped: 1}, res, "new is out")

		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 5, stats.Counters["items_done"])
	})
}

func TestScoredQueueRefusesBadInput(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		for _, items := range [][]queues.QueueItem{
			{{Name: "x", Score: math.NaN()}},
			{{Name: "x", Score: math.Inf(1)}},
			{{Name: "ok", Score: 1}, {Name: "", Score: 1}},
			{{Name: "x", Score: 1, Extras: []byte(`{"a":1}`)}},
		} {
			_, err := tb.engine.EnqueueScored(tb.ctx, tb.slug, items)
			requireCode(t, err, queues.CodeInvalid)
		}
		_, err := tb.engine.EnqueueScored(tb.ctx, "no-such-project", []queues.QueueItem{{Name: "x"}})
		requireCode(t, err, queues.CodeProjectNotFound)
		require.Zero(t, tb.counts(t).Scored, "nothing was queued")

		// The generic Enqueue reaches the scored queue too.
		res, err := tb.engine.Enqueue(tb.ctx, tb.slug, scoredQueue, []queues.QueueItem{{Name: "a", Score: 2}, {Name: "b", Score: 3}})
		require.NoError(t, err)
		require.Equal(t, 2, res.Queued)
		require.Equal(t, []string{"b", "a"}, tb.claim(t, "alice", 5))
	})
}

// TestScoredQueueUnderLoadConservesItems: many ties, a FIFO queue behind
// it, every item served once and in non-increasing score order.
func TestScoredQueueUnderLoadConservesItems(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		scores := map[string]float64{}
		for i := range 300 {
			scores[fmt.Sprintf("s:%03d", i)] = float64(i % 17)
		}
		tb.enqueueScored(t, scores)
		tb.enqueue(t, todo, names("f:", 50)...)
		seen := map[string]bool{}
		last := math.Inf(1)
		for {
			got, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", IP: "127.0.0.1", Count: 7})
			if queues.CodeOf(err) == queues.CodeNoItem {
				break
			}
			require.NoError(t, err)
			var batch []string
			for _, it := range got.Items {
				require.False(t, seen[it.Name], "%s served twice", it.Name)
				seen[it.Name] = true
				batch = append(batch, it.Name)
				if s, ok := scores[it.Name]; ok {
					require.LessOrEqual(t, s, last, "scores never go up")
					last = s
				}
			}
			_, err = tb.done("alice", batch...)
			require.NoError(t, err)
		}
		require.Len(t, seen, 350)
		c := tb.counts(t)
		require.EqualValues(t, 350, c.Done)
		require.Zero(t, c.TodoTotal())
	})
}
