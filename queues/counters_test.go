package queues_test

import (
	"context"
	"encoding/json"
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

// TestCompletionsArePublishedInBatches: a frontend's dones reach live
// viewers as one message per project and interval, entries in order.
func TestCompletionsArePublishedInBatches(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		sub := tb.rdb.Subscribe(tb.ctx, queues.EventsChannel)
		defer sub.Close()
		_, err := sub.Receive(tb.ctx)
		require.NoError(t, err)
		tb.enqueue(t, todo, "a", "b")
		tb.claim(t, "alice", 2)
		_, err = tb.done("alice", "a")
		require.NoError(t, err)
		_, err = tb.done("alice", "b", "b")
		require.NoError(t, err)
		tb.engine.PublishCompletions(tb.ctx)
		msg, err := sub.ReceiveMessage(tb.ctx)
		require.NoError(t, err)
		var got struct {
			Project string `json:"project"`
			Entries []struct {
				Items []string `json:"items"`
				By    string   `json:"by"`
			} `json:"entries"`
		}
		require.NoError(t, json.Unmarshal([]byte(msg.Payload), &got), msg.Payload)
		require.Equal(t, tb.slug, got.Project)
		require.Len(t, got.Entries, 2)
		require.Equal(t, []string{"a"}, got.Entries[0].Items)
		require.Equal(t, []string{"b"}, got.Entries[1].Items, "a repeated item is logged once")
		require.Equal(t, "alice", got.Entries[1].By)
	})
}
