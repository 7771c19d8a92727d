package swarm

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// TestFailedTotalsWritesWaitForTheNextFlush: a flush whose totals write
// fails (here the key holds a string) says so and keeps exactly those
// writes, and the next flush writes them once; the writes that succeeded
// are not repeated.
func TestFailedTotalsWritesWaitForTheNextFlush(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, err := New(b.Client, Config{Private: true, Logger: slog.New(slog.DiscardHandler), Watch: WatchConfig{LedgerEntries: 5}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		require.NoError(t, b.Client.Set(ctx, btstore.UserStatsKey("bad"), "not a hash", 0).Err())
		// addTotalsLocked takes the totals' stored form (raw, then the
		// credited differences: transfer.stored), field by field.
		s.pending.mu.Lock()
		s.pending.addTotalsLocked("good", transfer{10, 20, 10, 0})
		s.pending.addTotalsLocked("bad", transfer{1, 2, 3, 4})
		s.pending.mu.Unlock()

		err = s.Flush(ctx)
		require.ErrorContains(t, err, "4 of 7 writes failed") // the 4 totals of "bad" of 7 totals
		require.Equal(t, map[string]string{"uploaded": "10", "downloaded": "20", "up_extra": "10"},
			b.Client.HGetAll(ctx, btstore.UserStatsKey("good")).Val())
		s.pending.mu.Lock()
		require.Equal(t, map[string]*transfer{"bad": {1, 2, 3, 4}}, s.pending.totals)
		s.pending.mu.Unlock()

		require.NoError(t, b.Client.Del(ctx, btstore.UserStatsKey("bad")).Err())
		require.NoError(t, s.Flush(ctx))
		require.Equal(t, map[string]string{"uploaded": "1", "downloaded": "2", "up_extra": "3", "down_extra": "4"},
			b.Client.HGetAll(ctx, btstore.UserStatsKey("bad")).Val())
		require.Equal(t, "10", b.Client.HGet(ctx, btstore.UserStatsKey("good"), "uploaded").Val(), "written once")
	})
}
