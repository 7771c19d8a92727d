package queues_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// keysTagged lists every key carrying slug's hash tag, on every master.
func keysTagged(t *testing.T, ctx context.Context, rdb redis.UniversalClient, slug string) []string {
	t.Helper()
	pattern := "hoard:{" + slug + "}:*"
	var keys []string
	scan := func(node redis.Cmdable) {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		require.NoError(t, iter.Err())
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(ctx, func(_ context.Context, master *redis.Client) error {
			scan(master)
			return nil
		}))
	} else {
		scan(rdb)
	}
	sort.Strings(keys)
	return keys
}

// TestDeleteProjectRemovesEverythingItHas: a project with offloaded
// segments, archived completions, a Bloom filter, stats and claims out is
// refused without force (nothing changes), then deleted with it: no key of
// its hash tag and none of its files remain, its dones get "no project",
// the other project is untouched, and the name can be used again.
func TestDeleteProjectRemovesEverythingItHas(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		secret := "gone_secret_1"
		tb := setupProject(t, b, "gone", queues.SettingsPatch{
			OffloadAbove: ptr(2000), OffloadSegment: ptr(1000), DoneMode: ptr(queues.DoneArchive),
			BackfeedSecret: &secret,
		})
		kept := setupProject(t, b, "kept", queues.SettingsPatch{})
		kept.enqueue(t, queues.Target{}, "k1", "k2")
		keptKeys := keysTagged(t, tb.ctx, tb.rdb, "kept")
		dir := t.TempDir()
		offloader := &queues.Offloader{Engine: tb.engine, Dir: dir, Node: "n1", Logger: quietLogger}

		names := make([]string, 5000)
		for i := range names {
			names[i] = "user:" + string(rune('a'+i%26)) + time.Duration(i).String()
		}
		tb.enqueue(t, queues.Target{}, names...)
		_, err := tb.engine.Backfeed(tb.ctx, tb.slug, secret, []string{"bf:1", "bf:2"})
		require.NoError(t, err)
		claimed := tb.claim(t, "alice", 10)
		_, err = tb.done("alice", claimed[:4]...)
		require.NoError(t, err)
		require.NoError(t, offloader.RunOnce(tb.ctx))
		require.NoError(t, offloader.FlushArchive(tb.ctx, tb.slug))
		require.NoError(t, tb.engine.RecordChange(tb.ctx, tb.slug, queues.ChangeEntry{By: "test", What: "something"}))
		segmentFiles, _ := filepath.Glob(filepath.Join(dir, "segments", "gone", "*.gz"))
		archiveFiles, _ := filepath.Glob(filepath.Join(dir, "archive", "gone", "*.gz"))
		require.NotEmpty(t, segmentFiles, "the test needs offloaded segments")
		require.NotEmpty(t, archiveFiles, "the test needs archive files")
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "segments", "kept"), 0o755))
		keptFile := filepath.Join(dir, "segments", "kept", "000000000001.gz")
		require.NoError(t, os.WriteFile(keptFile, []byte("x"), 0o600))

		// Refused with claims out: it says how many, and nothing changes.
		before := keysTagged(t, tb.ctx, tb.rdb, tb.slug)
		countsBefore, err := tb.engine.Counts(tb.ctx, tb.slug)
		require.NoError(t, err)
		_, err = tb.engine.DeleteProject(tb.ctx, tb.slug, false)
		require.Equal(t, queues.CodeClaimsOut, queues.CodeOf(err))
		require.ErrorContains(t, err, "has 6 item(s) out")
		require.Equal(t, before, keysTagged(t, tb.ctx, tb.rdb, tb.slug))
		countsAfter, err := tb.engine.Counts(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, countsBefore, countsAfter)

		// Bad input changes nothing either.
		_, err = tb.engine.DeleteProject(tb.ctx, "nosuch", true)
		require.Equal(t, queues.CodeProjectNotFound, queues.CodeOf(err))
		_, err = tb.engine.DeleteProject(tb.ctx, "{bad}", true)
		require.Equal(t, queues.CodeInvalid, queues.CodeOf(err))

		result, err := tb.engine.DeleteProject(tb.ctx, tb.slug, true)
		require.NoError(t, err)
		require.Equal(t, int64(6), result.ClaimsOut)
		require.Equal(t, len(before), result.Keys)
		require.Empty(t, keysTagged(t, tb.ctx, tb.rdb, tb.slug))
		files, err := offloader.RemoveProjectFiles(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Equal(t, len(segmentFiles)+len(archiveFiles), files)
		require.NoDirExists(t, filepath.Join(dir, "segments", "gone"))
		require.NoDirExists(t, filepath.Join(dir, "archive", "gone"))
		require.FileExists(t, keptFile)

		slugs, err := tb.engine.Projects(tb.ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"kept"}, slugs)
		_, err = tb.done("alice", claimed[5])
		require.Equal(t, queues.CodeProjectNotFound, queues.CodeOf(err))
		_, err = tb.engine.DeleteProject(tb.ctx, tb.slug, true)
		require.Equal(t, queues.CodeProjectNotFound, queues.CodeOf(err), "a second deletion finds nothing")
		require.Equal(t, keptKeys, keysTagged(t, tb.ctx, tb.rdb, "kept"))
		keptCounts, err := kept.engine.Counts(tb.ctx, "kept")
		require.NoError(t, err)
		require.Equal(t, int64(2), keptCounts.Todo)

		_, err = tb.engine.CreateProject(tb.ctx, tb.slug, queues.SettingsPatch{})
		require.NoError(t, err)
		fresh, err := tb.engine.Counts(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Zero(t, fresh.TodoTotal())
		require.Zero(t, fresh.Out)
	})
}

// TestDeleteProjectFinishesADeletionCutShort: a deletion that stopped
// after removing the config (the slug still listed, keys left) is
// finished by running it again.
func TestDeleteProjectFinishesADeletionCutShort(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, queues.Target{}, "a", "b")
		require.NoError(t, tb.rdb.Del(tb.ctx, queues.ConfigKey(tb.slug)).Err())
		require.NotEmpty(t, keysTagged(t, tb.ctx, tb.rdb, tb.slug))
		_, err := tb.engine.DeleteProject(tb.ctx, tb.slug, false)
		require.NoError(t, err)
		require.Empty(t, keysTagged(t, tb.ctx, tb.rdb, tb.slug))
		slugs, err := tb.engine.Projects(tb.ctx)
		require.NoError(t, err)
		require.Empty(t, slugs)
	})
}

// TestAllChangesMergesEveryLog: the global log and each project's, newest
// first, each entry naming its project.
func TestAllChangesMergesEveryLog(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		_, err := tb.engine.CreateProject(tb.ctx, "other", queues.SettingsPatch{})
		require.NoError(t, err)
		record := func(slug, what string) {
			tb.clock.Advance(time.Second)
			require.NoError(t, tb.engine.RecordChange(tb.ctx, slug, queues.ChangeEntry{By: "op", What: what}))
		}
		record("", "blocked")
		record(tb.slug, "settings changed")
		record("other", "items queued")
		require.NoError(t, tb.engine.RecordChange(tb.ctx, "", queues.ChangeEntry{By: "op", What: "project deleted", Project: "old"}))
		all, err := tb.engine.AllChanges(tb.ctx, 10)
		require.NoError(t, err)
		var got []string
		for _, c := range all {
			got = append(got, c.Project+":"+c.What)
		}
		require.Equal(t, []string{"old:project deleted", "other:items queued", "proj:settings changed", ":blocked"}, got)
		two, err := tb.engine.AllChanges(tb.ctx, 2)
		require.NoError(t, err)
		require.Len(t, two, 2)
	})
}
