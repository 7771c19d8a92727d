package queues_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/queues"
)

func TestImportedDoneAndClaimsInEveryMode(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "here")
		require.Equal(t, []string{"here"}, tb.claim(t, "alice", 1))
		res, err := tb.engine.ImportDone(tb.ctx, tb.slug, []string{"old-1", "old-2", "old-1", "here"})
		require.NoError(t, err)
		require.Equal(t, queues.ImportResult{Imported: 2, Skipped: 2}, res, "a repeat and an item out here are skipped")
		claims, err := tb.engine.ImportClaims(tb.ctx, tb.slug, []queues.ImportedClaim{
			{Item: "was-out", Downloader: "bobby", IP: "10.0.0.1", ClaimedAt: tb.clock.Now().Add(-time.Minute)},
			{Item: "old-1", Downloader: "bobby", ClaimedAt: tb.clock.Now()},
		})
		require.NoError(t, err)
		require.Equal(t, queues.ImportResult{Imported: 1, Skipped: 1}, claims, "a done item is not claimed again")
		c := tb.counts(t)
		require.EqualValues(t, 2, c.Out)
		require.EqualValues(t, 2, c.Done)
		done, err := tb.done("bobby", "was-out")
		require.NoError(t, err)
		require.Equal(t, 1, done.New)
		again, err := tb.done("carol", "old-2")
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{Duplicates: 1}, again)
		require.EqualValues(t, 3, tb.counts(t).Done)
	})
}

func TestImportRefusesBadInputAndChangesNothing(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		now := tb.clock.Now()
		for _, bad := range [][]queues.ImportedClaim{
			{{Item: "x", Downloader: "b", ClaimedAt: now}},                    // downloader too short
			{{Item: "x", Downloader: "bobby"}},                                // no claim time
			{{Item: "x", Downloader: "bobby", ClaimedAt: now.Add(time.Hour)}}, // in the future
			{{Item: "", Downloader: "bobby", ClaimedAt: now}},
		} {
			_, err := tb.engine.ImportClaims(tb.ctx, tb.slug, bad)
			requireCode(t, err, queues.CodeInvalid)
		}
		_, err := tb.engine.ImportDone(tb.ctx, tb.slug, []string{"ok", "bad\x00item"})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.ImportDone(tb.ctx, "no-such-project", []string{"x"})
		requireCode(t, err, queues.CodeProjectNotFound)
		err = tb.engine.ImportDownloaders(tb.ctx, tb.slug, map[string]queues.ImportedDownloader{"bobby": {Bytes: -1}}, nil)
		requireCode(t, err, queues.CodeInvalid)
		require.Equal(t, queues.Counts{}, tb.counts(t))
	})
}
