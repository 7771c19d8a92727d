package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// seedUniversalTracker writes a universal-tracker project's state under
// prefix, in its own layout (lib/tracker/transactions.rb): SETs for the
// queues and done, out as a ZSET of unix seconds, claims as "<ip> <nick>".
func seedUniversalTracker(t *testing.T, ctx context.Context, rdb *redis.Client, prefix string, claimedAt time.Time) {
	t.Helper()
	for i := range 1200 {
		require.NoError(t, rdb.SAdd(ctx, prefix+"todo", fmt.Sprintf("user:todo-%04d", i)).Err())
	}
	require.NoError(t, rdb.SAdd(ctx, prefix+"todo:secondary", "user:second-1", "user:second-2").Err())
	require.NoError(t, rdb.SAdd(ctx, prefix+"todo:redo", "user:redo-1").Err())
	require.NoError(t, rdb.SAdd(ctx, prefix+"todo:d:alice", "user:for-alice").Err())
	for i := range 30 {
		item := fmt.Sprintf("user:out-%02d", i)
		require.NoError(t, rdb.ZAdd(ctx, prefix+"out", redis.Z{Score: float64(claimedAt.Unix()), Member: item}).Err())
		require.NoError(t, rdb.HSet(ctx, prefix+"claims", item, "10.0.0.7 bobby").Err())
	}
	// A claim whose record is gone is left out, not guessed.
	require.NoError(t, rdb.ZAdd(ctx, prefix+"out", redis.Z{Score: float64(claimedAt.Unix()), Member: "user:out-orphan"}).Err())
	for i := range 2500 {
		require.NoError(t, rdb.SAdd(ctx, prefix+"done", fmt.Sprintf("user:done-%04d", i)).Err())
	}
	require.NoError(t, rdb.HSet(ctx, prefix+"downloader_bytes", "alice", 5_000_000, "bobby", 123).Err())
	require.NoError(t, rdb.HSet(ctx, prefix+"downloader_count", "alice", 2400, "bobby", 100).Err())
	require.NoError(t, rdb.HSet(ctx, prefix+"downloader_version", "alice", "20240101.01").Err())
	require.NoError(t, rdb.HSet(ctx, prefix+"domain_bytes", "data", 5_000_123).Err())
}

// TestImportUniversalTrackerState: a universal-tracker project's todo,
// claims, done and leaderboard come over in one command, the claimant's
// late done completes an imported claim, and a second run changes nothing.
func TestImportUniversalTrackerState(t *testing.T) {
	var src *redis.Client
	for _, b := range redistest.Require(t) {
		if c, ok := b.Client.(*redis.Client); ok {
			src = c
		}
	}
	if src == nil {
		t.Skip("by design: the source stands in for a universal-tracker on a single redis-server")
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		clock := queues.NewFakeClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet, Clock: clock})
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()

		prefix := "ut-" + b.Name + ":"
		claimedAt := clock.Now().Add(-time.Hour)
		seedUniversalTracker(t, ctx, src, prefix, claimedAt)
		// Items hoard refuses (control characters) are left out and
		// counted, not a refused batch that stops the import.
		require.NoError(t, src.SAdd(ctx, prefix+"todo", "user:\x1b[31mred").Err())
		require.NoError(t, src.SAdd(ctx, prefix+"done", "user:bell\x07").Err())
		from := "redis://" + src.Options().Addr

		_, err = runCLI(t, ts.URL, "queue", "import-universal", "moved", "--from", from, "--prefix", prefix)
		require.ErrorContains(t, err, "must exist first")
		_, err = engine.CreateProject(ctx, "moved", queues.SettingsPatch{ReclaimTTL: ptrTo(queues.Duration(6 * time.Hour))})
		require.NoError(t, err)
		_, err = runCLI(t, ts.URL, "queue", "import-universal", "moved")
		require.ErrorContains(t, err, "--from is required")

		out, err := runCLI(t, ts.URL, "queue", "import-universal", "moved", "--from", from, "--prefix", prefix, "--batch", "500")
		require.NoError(t, err, out)
		require.Contains(t, out, "1204 waiting items queued (0 already here, 0 dropped by filters), 30 claims (0 already here), 2500 done (0 already here), 2 downloaders' totals; 3 unreadable")

		c, err := engine.Counts(ctx, "moved")
		require.NoError(t, err)
		require.EqualValues(t, 1200, c.Todo)
		require.EqualValues(t, 2, c.Secondary)
		require.EqualValues(t, 1, c.Redo)
		require.EqualValues(t, 1, c.Reserved)
		require.EqualValues(t, 30, c.Out)
		require.EqualValues(t, 2500, c.Done)
		require.InDelta(t, time.Hour.Seconds(), c.OldestClaimAgeSeconds, 1, "claims keep their claim time")

		// The claimant's warrior finishes an imported item against hoard.
		res, err := engine.Done(ctx, queues.DoneRequest{Project: "moved", Downloader: "bobby", Items: []string{"user:out-03"}})
		require.NoError(t, err)
		require.Equal(t, 1, res.New)
		// A stranger cannot; a done repeated from the old tracker counts once.
		_, err = engine.Done(ctx, queues.DoneRequest{Project: "moved", Downloader: "carol", Items: []string{"user:out-04"}})
		require.Equal(t, queues.CodeNotClaimant, queues.CodeOf(err))
		res, err = engine.Done(ctx, queues.DoneRequest{Project: "moved", Downloader: "alice", Items: []string{"user:done-0007"}})
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{Duplicates: 1}, res)
		// Imported claims fall due after the TTL counted from their claim
		// time there: 6 h after an hour-old claim is 5 h from now.
		c, err = engine.Counts(ctx, "moved")
		require.NoError(t, err)
		require.Zero(t, c.Reclaimable)
		clock.Advance(5*time.Hour + time.Minute)
		c, err = engine.Counts(ctx, "moved")
		require.NoError(t, err)
		require.EqualValues(t, 29, c.Reclaimable)

		stats, err := engine.Stats(ctx, "moved")
		require.NoError(t, err)
		require.EqualValues(t, 2501, stats.Counters["items_done"])
		bytesBy, err := b.Client.HGetAll(ctx, queues.DownloaderBytesKey("moved")).Result()
		require.NoError(t, err)
		require.Equal(t, "5000000", bytesBy["alice"])

		// Run again: nothing new (waiting items are queued again only where
		// they were not yet served; done and claims are recognised).
		out, err = runCLI(t, ts.URL, "queue", "import-universal", "moved", "--from", from, "--prefix", prefix)
		require.NoError(t, err, out)
		require.Contains(t, out, "0 claims (30 already here), 0 done (2500 already here)")

		// Into a project with a filter: the waiting items it matches are
		// dropped and counted (100 todo items and both secondary ones).
		_, err = engine.CreateProject(ctx, "sieved", queues.SettingsPatch{})
		require.NoError(t, err)
		require.NoError(t, engine.AddFilter(ctx, "sieved", queues.Filter{Name: "some", Regex: `^user:(second-|todo-00)`}))
		out, err = runCLI(t, ts.URL, "queue", "import-universal", "sieved", "--from", from, "--prefix", prefix)
		require.NoError(t, err, out)
		require.Contains(t, out, "1102 waiting items queued (0 already here, 102 dropped by filters)")
		c, err = engine.Counts(ctx, "sieved")
		require.NoError(t, err)
		require.EqualValues(t, 1100, c.Todo)
		require.Zero(t, c.Secondary)
		stats, err = engine.Stats(ctx, "sieved")
		require.NoError(t, err)
		require.EqualValues(t, 102, stats.Counters["items_filtered"])
	})
}

func ptrTo[T any](v T) *T { return &v }
