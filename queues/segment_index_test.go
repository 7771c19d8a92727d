package queues_test

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestItemStatusFindsOffloadedItemsExactly: with most of a queue on disk,
// an item reads offloaded exactly when it is in a segment file (the files
// are the truth the test reads), todo when in Redis, and an item never
// queued reads unknown, not offloaded. A segment without an index (as
// written before indexes existed) makes its items read unknown with
// unindexed_segments, until the next offload pass indexes it. A refill
// drops the segment's index with the segment.
func TestItemStatusFindsOffloadedItemsExactly(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		items := names("url:", 8000)
		tb.enqueue(t, todo, items...)
		require.NoError(t, o.RunOnce(tb.ctx))
		segments, err := o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Len(t, segments, 6, "6000 of 8000 items on disk")

		onDisk := map[string]string{} // item -> segment id, from the files
		for _, seg := range segments {
			for _, item := range readGzipLines(t, filepath.Join(o.Dir, "segments", tb.slug, seg.ID+".gz")) {
				onDisk[item] = seg.ID
			}
		}
		require.Len(t, onDisk, 6000)
		state := func(item string) queues.ItemStatus {
			s, err := tb.engine.ItemStatus(tb.ctx, tb.slug, item)
			require.NoError(t, err)
			return s
		}
		// Every 7th item, and 500 never queued (some share a prefix and
		// length with queued ones).
		for i := 0; i < len(items); i += 7 {
			want := queues.StateTodo
			if _, ok := onDisk[items[i]]; ok {
				want = queues.StateOffloaded
			}
			require.Equal(t, queues.ItemStatus{Item: items[i], State: want}, state(items[i]))
		}
		for _, never := range names("url:x", 250) {
			require.Equal(t, queues.ItemStatus{Item: never, State: queues.StateUnknown}, state(never))
		}
		for _, never := range names("other:", 250) {
			require.Equal(t, queues.ItemStatus{Item: never, State: queues.StateUnknown}, state(never))
		}

		// A segment written before indexes existed: its items can't be
		// told from unknown ones, and the answer says so.
		old := segments[2]
		var oldItem string
		for item, id := range onDisk {
			if id == old.ID {
				oldItem = item
				break
			}
		}
		require.NoError(t, tb.rdb.Del(tb.ctx, queues.SegmentIndexKey(tb.slug, old.ID)).Err())
		require.Equal(t, queues.ItemStatus{Item: oldItem, State: queues.StateUnknown, UnindexedSegments: 1}, state(oldItem))
		require.Equal(t, queues.ItemStatus{Item: "other:x", State: queues.StateUnknown, UnindexedSegments: 1}, state("other:x"))
		// The frontend that owns the file indexes it at its next pass
		// (nothing else changes: the queue is within its bounds).
		require.NoError(t, o.RunOnce(tb.ctx))
		require.Equal(t, queues.ItemStatus{Item: oldItem, State: queues.StateOffloaded}, state(oldItem))
		require.Equal(t, queues.ItemStatus{Item: "other:x", State: queues.StateUnknown}, state("other:x"))

		// Claimed and done, every segment comes back; its index goes with it.
		claimEverything(t, tb, o)
		for _, seg := range segments {
			n, err := tb.rdb.Exists(tb.ctx, queues.SegmentIndexKey(tb.slug, seg.ID)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "segment %s refilled, its index dropped", seg.ID)
		}
		require.Equal(t, queues.StateDone, state(oldItem).State)
	})
}

// TestItemStatusOfAStagedSegment: items taken off the queue whose file is
// not committed yet (a failing disk) read offloaded, found in the staging
// list, and todo again once the stale stage is put back.
func TestItemStatusOfAStagedSegment(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		items := names("u:", 3000)
		tb.enqueue(t, todo, items...)
		require.NoError(t, os.MkdirAll(filepath.Join(o.Dir, "segments"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(o.Dir, "segments", tb.slug), []byte("x"), 0o644))
		require.Error(t, o.RunOnce(tb.ctx))
		staged, err := tb.rdb.LRange(tb.ctx, queues.StagingKey(tb.slug, "000000000001"), 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, staged, 1000)
		got, err := tb.engine.ItemStatus(tb.ctx, tb.slug, staged[500])
		require.NoError(t, err)
		require.Equal(t, queues.StateOffloaded, got.State)
		got, err = tb.engine.ItemStatus(tb.ctx, tb.slug, "u:never")
		require.NoError(t, err)
		require.Equal(t, queues.StateUnknown, got.State)

		require.NoError(t, os.Remove(filepath.Join(o.Dir, "segments", tb.slug)))
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{OffloadAbove: ptr(0)})
		require.NoError(t, err)
		tb.clock.Advance(2 * time.Hour)
		require.NoError(t, o.RunOnce(tb.ctx))
		got, err = tb.engine.ItemStatus(tb.ctx, tb.slug, staged[500])
		require.NoError(t, err)
		require.Equal(t, queues.StateTodo, got.State)
	})
}

// TestRefillAppliesFiltersAddedWhileOnDisk: a filter added while items
// wait in a segment file drops them when the segment comes back (the
// filters' sift covers Redis only), and counts them as filtered.
func TestRefillAppliesFiltersAddedWhileOnDisk(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("keep:", 2000)...)
		tb.enqueue(t, todo, names("drop:", 2000)...) // the tail: on disk
		require.NoError(t, o.RunOnce(tb.ctx))
		require.EqualValues(t, 2000, tb.counts(t).Offloaded)
		require.NoError(t, tb.engine.AddFilter(tb.ctx, tb.slug, queues.Filter{Name: "no-drop", Glob: "drop:*"}))
		before, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)

		seen := claimEverything(t, tb, o)
		require.Len(t, seen, 2000)
		for item := range seen {
			require.Contains(t, item, "keep:")
		}
		after, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 2000, after.Counters["items_filtered"]-before.Counters["items_filtered"])
		require.Equal(t, queues.Counts{Done: 2000}, tb.counts(t))
	})
}

// readGzipLines reads a segment file as the test's ground truth.
func readGzipLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}
