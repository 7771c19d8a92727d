package queues_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestCountersSurviveAFailedFlush: counts a flush could not write stay
// buffered, a version set meanwhile wins over the one that failed, and
// the next flush writes each count once.
func TestCountersSurviveAFailedFlush(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "a", "b")
		tb.claim(t, "alice", 2)
		_, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Version: "1", Items: []string{"a"}, Bytes: map[string]int64{"data": 10}})
		require.NoError(t, err)

		failed, cancel := context.WithCancel(tb.ctx)
		cancel()
		require.Error(t, tb.engine.FlushCounters(failed))
		_, err = tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Version: "2", Items: []string{"b"}, Bytes: map[string]int64{"data": 5}})
		require.NoError(t, err)
		require.NoError(t, tb.engine.FlushCounters(tb.ctx))
		require.NoError(t, tb.engine.FlushCounters(tb.ctx), "an empty buffer flushes nothing")

		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 2, stats.Counters["items_done"])
		require.EqualValues(t, 15, stats.Counters["bytes_done"])
		require.EqualValues(t, 1, stats.Counters["requests"])
		require.EqualValues(t, 2, stats.Counters["items_served"])
		require.Equal(t, []queues.DownloaderStats{{Name: "alice", Bytes: 15, Items: 2, Version: "2"}}, stats.Downloaders)
		require.EqualValues(t, 15, stats.DomainBytes["data"])
	})
}
