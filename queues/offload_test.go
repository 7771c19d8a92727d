package queues_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

func offloader(tb bundle, t *testing.T) *queues.Offloader {
	return &queues.Offloader{Engine: tb.engine, Dir: t.TempDir(), Node: "node-a", Logger: quietLogger}
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	return files
}

func redisQueueLen(t *testing.T, tb bundle, q queues.Queue) int64 {
	t.Helper()
	n, err := tb.rdb.LLen(tb.ctx, queues.QueueKey(tb.slug, q)).Result()
	require.NoError(t, err)
	return n
}

// claimEverything claims and completes every item, running offload passes
// between claims, and returns how often each item was handed out.
func claimEverything(t *testing.T, tb bundle, o *queues.Offloader) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range 10_000 {
		got := claimSome(t, tb, "alice", 100)
		if len(got) == 0 {
			require.NoError(t, o.RunOnce(tb.ctx))
			if got = claimSome(t, tb, "alice", 100); len(got) == 0 {
				return seen
			}
		}
		for _, item := range got {
			seen[item]++
		}
		_, err := tb.done("alice", got...)
		require.NoError(t, err)
	}
	t.Fatal("the queue never drained")
	return nil
}

// claimSome claims up to n items; none when the queue is empty.
func claimSome(t *testing.T, tb bundle, downloader string, n int) []string {
	t.Helper()
	res, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: downloader, IP: "127.0.0.1", Count: n})
	if queues.CodeOf(err) == queues.CodeNoItem {
		return nil
	}
	require.NoError(t, err)
	items := make([]string, len(res.Items))
	for i, it := range res.Items {
		items[i] = it.Name
	}
	return items
}

func TestOffloadBoundsTheQueueInRedisAndRefillsEveryItem(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(4000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		items := names("url:", 20_000)
		tb.enqueue(t, todo, items...)
		require.NoError(t, o.RunOnce(tb.ctx))

		require.LessOrEqual(t, redisQueueLen(t, tb, queues.QueueTodo), int64(4000), "the tail went to disk")
		c := tb.counts(t)
		require.EqualValues(t, 20_000, c.Todo, "offloaded items still count as waiting")
		require.EqualValues(t, 20_000-redisQueueLen(t, tb, queues.QueueTodo), c.Offloaded)
		files := segmentFiles(t, o.Dir)
		require.Len(t, files, int(c.Offloaded/1000))
		segments, err := o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		for _, seg := range segments {
			require.Equal(t, queues.SegmentDisk, seg.State)
			require.Equal(t, "node-a", seg.Node)
		}

		// Exported: everything, in Redis and on disk.
		var out bytes.Buffer
		n, err := o.ExportQueue(tb.ctx, tb.slug, queues.QueueTodo, &out)
		require.NoError(t, err)
		require.EqualValues(t, 20_000, n)
		exported := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		sort.Strings(exported)
		want := append([]string{}, items...)
		sort.Strings(want)
		require.Equal(t, want, exported)

		// Claims drain Redis, refills bring the segments back: every item
		// is handed out exactly once, and no file is left.
		seen := claimEverything(t, tb, o)
		require.Len(t, seen, 20_000)
		for item, times := range seen {
			require.Equal(t, 1, times, item)
		}
		require.Empty(t, segmentFiles(t, o.Dir))
		segments, err = o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Empty(t, segments)
		require.Equal(t, queues.Counts{Done: 20_000}, tb.counts(t))
	})
}

func TestOffloadedSegmentsFollowLimitGroupsAndMoves(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("post:", 5000)...)
		require.NoError(t, o.RunOnce(tb.ctx))
		require.EqualValues(t, 5000, tb.counts(t).Todo)

		moved, err := o.MoveSegments(tb.ctx, tb.slug, queues.QueueTodo, queues.QueueSecondary)
		require.NoError(t, err)
		require.Positive(t, moved)
		c := tb.counts(t)
		require.EqualValues(t, 5000-moved, c.Todo)
		require.EqualValues(t, moved, c.Secondary)

		// Groups set while items are on disk route them on refill.
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "posts", Type: "post", RatePerMinute: 1000}})
		require.NoError(t, err)
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{OffloadAbove: ptr(0)})
		require.NoError(t, err)
		require.NoError(t, o.RunOnce(tb.ctx))
		c = tb.counts(t)
		require.Zero(t, c.Offloaded, "offloading off: every segment comes back")
		require.EqualValues(t, moved, c.Secondary)
		n, err := tb.rdb.LLen(tb.ctx, queues.GroupQueueKey(tb.slug, queues.QueueSecondary, "posts")).Result()
		require.NoError(t, err)
		require.Equal(t, moved, n, "refilled items went to their group's sub-queue")
	})
}

func TestStoppedOffloadPutsItemsBackAndItsFileIsCleanedUp(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("u:", 3000)...)
		// The disk fails: a file stands where the segment directory goes.
		require.NoError(t, os.MkdirAll(filepath.Join(o.Dir, "segments"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(o.Dir, "segments", tb.slug), []byte("x"), 0o644))
		require.Error(t, o.RunOnce(tb.ctx))
		segments, err := o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Len(t, segments, 1)
		require.Equal(t, queues.SegmentStaging, segments[0].State)
		require.EqualValues(t, 3000, tb.counts(t).Todo, "staged items still count")

		// Within the protection window the stage is left alone.
		require.NoError(t, os.Remove(filepath.Join(o.Dir, "segments", tb.slug)))
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{OffloadAbove: ptr(0)})
		require.NoError(t, err)
		require.NoError(t, o.RunOnce(tb.ctx))
		segments, err = o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Len(t, segments, 1)

		// A half-written file of that segment, and a stray file.
		dir := filepath.Join(o.Dir, "segments", tb.slug)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		half := filepath.Join(dir, segments[0].ID+".gz")
		require.NoError(t, os.WriteFile(half, []byte("\x1f\x8b partial"), 0o644))
		old := tb.clock.Now().Add(-2 * time.Hour)
		require.NoError(t, os.Chtimes(half, old, old))

		// Staged items are in no index: meanwhile one is queued again, one
		// is imported as out and one as done. Their staged copies must not
		// go back (a claim of a new project does not look for duplicates).
		staged, err := tb.rdb.LRange(tb.ctx, queues.StagingKey(tb.slug, segments[0].ID), 0, 2).Result()
		require.NoError(t, err)
		require.Len(t, staged, 3)
		require.Equal(t, 1, tb.enqueueResult(t, todo, staged[0]).Queued)
		_, err = tb.engine.ImportClaims(tb.ctx, tb.slug, []queues.ImportedClaim{{Item: staged[1], Downloader: "bobby", ClaimedAt: tb.clock.Now()}})
		require.NoError(t, err)
		_, err = tb.engine.ImportDone(tb.ctx, tb.slug, []string{staged[2]})
		require.NoError(t, err)

		tb.clock.Advance(2 * time.Hour)
		require.NoError(t, o.RunOnce(tb.ctx))
		segments, err = o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Empty(t, segments, "the stale stage was put back")
		require.EqualValues(t, 2998, redisQueueLen(t, tb, queues.QueueTodo), "without the copies that found a place meanwhile")
		require.Equal(t, queues.Counts{Todo: 2998, Out: 1, Done: 1, OldestClaimAgeSeconds: 7200}, tb.counts(t))
		assertPlaces(t, tb, map[string]string{staged[0]: "todo", staged[1]: "out", staged[2]: "done"})
		checkIndexesAgree(t, tb)
		require.NoFileExists(t, half, "the unreferenced, stale file is an orphan")
	})
}

func TestOrphanCleanupKeepsReferencedAndFreshFiles(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("u:", 4000)...)
		require.NoError(t, o.RunOnce(tb.ctx))
		live := segmentFiles(t, o.Dir)
		require.NotEmpty(t, live)
		dir := filepath.Dir(live[0])
		fresh := filepath.Join(dir, "999999999998.gz")
		stale := filepath.Join(dir, "999999999999.gz")
		for _, p := range []string{fresh, stale} {
			require.NoError(t, os.WriteFile(p, []byte("orphan"), 0o644))
		}
		// Timestamps of interest are the offloader clock's times.
		now := tb.clock.Now()
		require.NoError(t, os.Chtimes(fresh, now, now))
		old := now.Add(-3 * time.Hour)
		for _, p := range append([]string{stale}, live...) {
			require.NoError(t, os.Chtimes(p, old, old))
		}
		removed, err := o.CleanupOrphans(tb.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, removed)
		require.NoFileExists(t, stale)
		require.FileExists(t, fresh, "unreferenced but of recent interest")
		for _, p := range live {
			require.FileExists(t, p, "referenced, however old")
		}
	})
}

// TestOrphanCleanupRacesOffloadAndRefill runs orphan cleanup as fast as it
// can beside two offloaders, refills, claims and a writer of leftovers
// named like the next segment. One race by default; HOARD_TEST_LONG=1 (make
// test-long, CI) runs 40 per backend: each race commits 15-20 segments
// under cleanup, so about 1,400 in all. (It was 100 per backend, 4.6 s
// each under -race at load 15: most of CI's longest package.)
// Staged segments get a long window of their own, so none is put back
// mid-write: every segment is live while cleanup runs, and each race
// requires that segments were committed and refilled, and that every item
// was handed out exactly once.
func TestOrphanCleanupRacesOffloadAndRefill(t *testing.T) {
	races := 1
	if os.Getenv("HOARD_TEST_LONG") != "" {
		races = 40
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for race := range races {
			t.Run(fmt.Sprintf("race%d", race), func(t *testing.T) { orphanCleanupRace(t, b, fmt.Sprintf("race%d", race)) })
		}
	})
}

func orphanCleanupRace(t *testing.T, b redistest.Backend, slug string) {
	{
		ctx := context.Background()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quietLogger})
		_, err := engine.CreateProject(ctx, slug, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		require.NoError(t, err)
		tb := bundle{ctx: ctx, engine: engine, rdb: b.Client, slug: slug}
		dir := t.TempDir()
		newWorker := func() *queues.Offloader {
			return &queues.Offloader{Engine: engine, Dir: dir, Node: "shared", Protection: time.Millisecond,
				StagedWindow: time.Hour, Logger: quietLogger}
		}
		workers := []*queues.Offloader{newWorker(), newWorker()}
		cleaner := newWorker()
		const total = 30_000
		var wg sync.WaitGroup
		var stop atomic.Bool
		wg.Add(1)
		go func() { // the cleanup, as fast as it can
			defer wg.Done()
			for !stop.Load() {
				_, _ = cleaner.CleanupOrphans(ctx)
			}
		}()
		var junk atomic.Int64
		wg.Add(1)
		go func() { // leftovers of crashed writes, named like the next segments
			defer wg.Done()
			for !stop.Load() {
				seq, _ := b.Client.HGet(ctx, queues.OffloadKey(slug), "seq").Int64()
				segDir := filepath.Join(dir, "segments", slug)
				path := filepath.Join(segDir, fmt.Sprintf("%012d.gz", seq+1))
				// Created only where no file is: a leftover is there before
				// a segment is written, never written over a live one.
				if os.MkdirAll(segDir, 0o755) == nil {
					tmp := filepath.Join(segDir, "junk")
					if os.WriteFile(tmp, []byte("junk"), 0o644) == nil {
						old := time.Now().Add(-time.Hour)
						_ = os.Chtimes(tmp, old, old)
						if os.Link(tmp, path) == nil {
							junk.Add(1)
						}
						_ = os.Remove(tmp)
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					_ = w.RunOnce(ctx)
				}
			}()
		}
		activity := func() (committed, refilled int64) {
			for _, w := range workers {
				a := w.Activity()
				committed += a.Committed
				refilled += a.Refilled
			}
			return committed, refilled
		}
		// Enqueue in waves while claiming, so offload and refill both run;
		// keep claiming until both have (or the items run out).
		seen := map[string]int{}
		claimed := 0
		claim := func() int {
			got := claimSome(t, tb, "bob", 100)
			for _, item := range got {
				seen[item]++
			}
			claimed += len(got)
			if len(got) > 0 {
				_, err := tb.done("bob", got...)
				require.NoError(t, err)
			}
			return len(got)
		}
		for wave := range 6 {
			tb.enqueue(t, todo, names("w"+string(rune('a'+wave))+":", total/6)...)
			for range 20 {
				claim()
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for committed, refilled := activity(); (committed == 0 || refilled == 0) && time.Now().Before(deadline); committed, refilled = activity() {
			if claim() == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		stop.Store(true)
		wg.Wait()
		committed, refilled := activity()
		removed := cleaner.Activity().OrphansRemoved
		t.Logf("during the race: %d segments committed, %d refilled, %d items claimed; %d junk files planted, %d orphans removed",
			committed, refilled, claimed, junk.Load(), removed)
		require.Positive(t, committed, "segments were written while cleanup ran")
		require.Positive(t, refilled, "segments were refilled while cleanup ran")
		for _, w := range workers {
			require.Zero(t, w.Activity().Recovered, "no staged segment was put back mid-write")
		}

		rest := claimEverything(t, tb, workers[0])
		for item, n := range rest {
			seen[item] += n
		}
		require.Len(t, seen, total, "no item lost")
		for item, n := range seen {
			require.Equal(t, 1, n, "item %s handed out %d times", item, n)
		}
		_, err = workers[0].CleanupOrphans(ctx) // the junk written last
		require.NoError(t, err)
		require.Empty(t, segmentFiles(t, dir))
		require.Equal(t, queues.Counts{Done: total}, tb.counts(t))
	}
}

func TestDoneCountModeKeepsNoDoneSet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{DoneMode: ptr(queues.DoneCount), RecentDone: ptr(1000)})
		items := names("i:", 1500)
		tb.enqueue(t, todo, items...)
		for range 15 {
			got := tb.claim(t, "alice", 100)
			res, err := tb.done("alice", got...)
			require.NoError(t, err)
			require.Equal(t, 100, res.New)
		}
		card, err := tb.rdb.SCard(tb.ctx, queues.DoneKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, card, "no done set")
		recent, err := tb.rdb.ZCard(tb.ctx, queues.RecentDoneKey(tb.slug)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1000, recent, "trimmed to recent_done")
		require.EqualValues(t, 1500, tb.counts(t).Done)

		// A repeated done of a recent item is OK and counts once.
		res, err := tb.done("alice", items[1499])
		require.NoError(t, err)
		require.Equal(t, 0, res.New)
		require.EqualValues(t, 1500, tb.counts(t).Done)
		// One older than the window is accepted as a stale repeat that
		// counts nothing (seesaw retries a refused done forever).
		res, err = tb.done("alice", items[0])
		require.NoError(t, err)
		require.Equal(t, queues.DoneResult{Duplicates: 1}, res)
		require.EqualValues(t, 1500, tb.counts(t).Done)
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["dones_stale"])
	})
}

func TestDoneArchiveModeWritesExportableFilesAndDrainsOldDoneSet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		items := names("a:", 2500)
		tb.enqueue(t, todo, items...)
		for range 5 { // 500 done while done items are kept
			_, err := tb.done("alice", tb.claim(t, "alice", 100)...)
			require.NoError(t, err)
		}
		_, err := tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{DoneMode: ptr(queues.DoneArchive)})
		require.NoError(t, err)
		for range 20 {
			_, err := tb.done("alice", tb.claim(t, "alice", 100)...)
			require.NoError(t, err)
		}
		require.NoError(t, o.RunOnce(tb.ctx))
		require.NoError(t, o.FlushArchive(tb.ctx, tb.slug))
		card, err := tb.rdb.SCard(tb.ctx, queues.DoneKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, card, "the old done set was drained into the archive")
		waiting, err := tb.rdb.LLen(tb.ctx, queues.DoneArchiveKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, waiting)
		require.EqualValues(t, 2500, tb.counts(t).Done)
		require.Len(t, segmentFiles(t, filepath.Join(o.Dir, "archive")), 3)

		var out bytes.Buffer
		n, err := o.ExportArchive(tb.ctx, tb.slug, &out)
		require.NoError(t, err)
		require.EqualValues(t, 2500, n)
		exported := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		sort.Strings(exported)
		want := append([]string{}, items...)
		sort.Strings(want)
		require.Equal(t, want, exported)

		// Archive files need no record each: Redis keeps a per-frontend
		// count, not an entry per file.
		records, err := tb.rdb.HLen(tb.ctx, queues.SegmentsKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, records, "no segment record per archive file")
		archived, err := tb.rdb.HGet(tb.ctx, queues.OffloadKey(tb.slug), "archive:node-a").Int64()
		require.NoError(t, err)
		require.EqualValues(t, 2500, archived)

		// Cleanup never removes a finished archive file however old; a
		// stale temporary file nobody references goes.
		archiveDir := filepath.Join(o.Dir, "archive", tb.slug)
		leftover := filepath.Join(archiveDir, "999999999999.gz.tmp")
		require.NoError(t, os.WriteFile(leftover, []byte("half"), 0o644))
		tb.clock.Advance(48 * time.Hour)
		for _, p := range segmentFiles(t, o.Dir) {
			old := tb.clock.Now().Add(-24 * time.Hour)
			require.NoError(t, os.Chtimes(p, old, old))
		}
		removed, err := o.CleanupOrphans(tb.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, removed)
		require.NoFileExists(t, leftover)
		require.Len(t, segmentFiles(t, archiveDir), 3)

		// Another frontend's archive files make an export here incomplete.
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.OffloadKey(tb.slug), "archive:node-b", 10).Err())
		_, err = o.ExportArchive(tb.ctx, tb.slug, &out)
		require.ErrorContains(t, err, `frontend "node-b"`)
	})
}

func writeGzip(t *testing.T, path string, items ...string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	zw := gzip.NewWriter(f)
	for _, item := range items {
		_, err := zw.Write([]byte(item + "\n"))
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
}

// An archive file committed but not yet under its final name (a crash
// between the two) is finished by the next pass, and exported meanwhile;
// records of archive files from before they needed none are dropped.
func TestCommittedArchiveFileIsFinishedByTheNextPass(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{DoneMode: ptr(queues.DoneArchive)})
		o := offloader(tb, t)
		dir := filepath.Join(o.Dir, "archive", tb.slug)
		created := strconv.FormatInt(tb.clock.Now().UnixMilli(), 10)
		writeGzip(t, filepath.Join(dir, "000000000001.gz"), "old:1", "old:2")
		writeGzip(t, filepath.Join(dir, "000000000002.gz.tmp"), "new:1", "new:2", "new:3")
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.SegmentsKey(tb.slug),
			"000000000001", "archived done 2 node-a "+created+" done_archive",
			"000000000002", "archived done 3 node-a "+created+" done_archive").Err())

		var out bytes.Buffer
		n, err := o.ExportArchive(tb.ctx, tb.slug, &out)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)

		require.NoError(t, o.RunOnce(tb.ctx))
		require.FileExists(t, filepath.Join(dir, "000000000002.gz"))
		require.NoFileExists(t, filepath.Join(dir, "000000000002.gz.tmp"))
		records, err := tb.rdb.HLen(tb.ctx, queues.SegmentsKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, records)
		archived, err := tb.rdb.HGet(tb.ctx, queues.OffloadKey(tb.slug), "archive:node-a").Int64()
		require.NoError(t, err)
		require.EqualValues(t, 5, archived)

		out.Reset()
		n, err = o.ExportArchive(tb.ctx, tb.slug, &out)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
		require.Equal(t, "old:1\nold:2\nnew:1\nnew:2\nnew:3\n", out.String())

		// The offload seq starts over (here it was never set, as after a
		// Redis that lost it): new archive files never take a finished
		// one's id.
		tb.enqueue(t, todo, "late:1", "late:2")
		_, err = tb.done("alice", tb.claim(t, "alice", 2)...)
		require.NoError(t, err)
		require.NoError(t, o.FlushArchive(tb.ctx, tb.slug))
		require.FileExists(t, filepath.Join(dir, "000000000003.gz"))
		out.Reset()
		n, err = o.ExportArchive(tb.ctx, tb.slug, &out)
		require.NoError(t, err)
		require.EqualValues(t, 7, n)
		require.True(t, strings.HasPrefix(out.String(), "old:1\nold:2\nnew:1\nnew:2\nnew:3\n"), out.String())
	})
}

func claimN(t *testing.T, tb bundle, who string, n int) []string {
	t.Helper()
	var all []string
	for len(all) < n {
		got := claimSome(t, tb, who, 100)
		if len(got) == 0 {
			break
		}
		all = append(all, got...)
	}
	return all
}

// Released items wait in todo:redo, which is never offloaded: a late done
// takes them out of the list by name.
func TestReleasedItemsStayInRedisAndAreDoneOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000), DoneMode: ptr(queues.DoneCount)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("r:", 3000)...)
		got := claimN(t, tb, "alice", 3000)
		_, err := tb.engine.Release(tb.ctx, tb.slug, got, "")
		require.NoError(t, err)
		require.NoError(t, o.RunOnce(tb.ctx))
		require.Zero(t, tb.counts(t).Offloaded)
		for i := 0; i < len(got); i += 100 {
			_, err := tb.done("alice", got[i:i+100]...)
			require.NoError(t, err)
		}
		require.Equal(t, queues.Counts{Done: 3000}, tb.counts(t))
		require.Empty(t, claimEverything(t, tb, o), "no done item is handed out again")
	})
}

// A frontend that comes back under another name still refills the
// segments whose files are in its data directory.
func TestRenamedFrontendRefillsItsFiles(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("n:", 5000)...)
		require.NoError(t, o.RunOnce(tb.ctx))
		restarted := &queues.Offloader{Engine: tb.engine, Dir: o.Dir, Node: "node-a-2", Logger: quietLogger}
		require.Len(t, claimEverything(t, tb, restarted), 5000)
	})
}

// A lost segment file is reported, and every other segment and queue is
// still refilled.
func TestOneLostSegmentDoesNotBlockTheOthers(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("t:", 3000)...)
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, names("s:", 3000)...)
		require.NoError(t, o.RunOnce(tb.ctx))
		segs, err := o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		for _, s := range segs {
			if s.Queue == "todo" {
				require.NoError(t, os.Remove(filepath.Join(o.Dir, "segments", tb.slug, s.ID+".gz")))
			}
		}
		for len(claimSome(t, tb, "alice", 100)) > 0 {
		}
		require.Error(t, o.RunOnce(tb.ctx), "the lost file is reported")
		segs, err = o.Segments(tb.ctx, tb.slug)
		require.NoError(t, err)
		for _, s := range segs {
			require.NotEqual(t, string(queues.QueueSecondary), s.Queue, "secondary's segments came back")
		}
	})
}

// An export includes items staged on their way to disk.
func TestExportIncludesStagedItems(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("e:", 3000)...)
		require.NoError(t, os.MkdirAll(filepath.Join(o.Dir, "segments"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(o.Dir, "segments", tb.slug), []byte("x"), 0o644))
		require.Error(t, o.RunOnce(tb.ctx)) // the segment stays staged
		var out bytes.Buffer
		n, err := o.ExportQueue(tb.ctx, tb.slug, queues.QueueTodo, &out)
		require.NoError(t, err)
		require.EqualValues(t, 3000, n)
	})
}

func offloadSeq(t *testing.T, tb bundle) int64 {
	t.Helper()
	seq, err := tb.rdb.HGet(tb.ctx, queues.OffloadKey(tb.slug), "seq").Int64()
	require.NoError(t, err)
	return seq
}

func listLen(t *testing.T, tb bundle, key string) int64 {
	t.Helper()
	n, err := tb.rdb.LLen(tb.ctx, key).Result()
	require.NoError(t, err)
	return n
}

// A rate-limited group's sub-queue holding most of offload_above must not
// make refill and offload bounce a segment of the plain queue between Redis
// and disk on every pass.
func TestRefillAndOffloadDoNotPingPongBesideAStuckGroup(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "posts", Type: "post", RatePerMinute: 1}})
		require.NoError(t, err)
		tb.enqueue(t, todo, names("post:", 900)...)
		tb.enqueue(t, todo, names("user:", 3200)...)
		require.NoError(t, o.RunOnce(tb.ctx))
		written := offloadSeq(t, tb)
		require.Positive(t, written)
		for range 5 {
			require.NoError(t, o.RunOnce(tb.ctx))
		}
		require.Equal(t, written, offloadSeq(t, tb), "no segment written again while nothing is claimed")
		require.LessOrEqual(t, tb.counts(t).Todo-tb.counts(t).Offloaded, int64(2000))

		// Draining the plain queue brings every user item back once, and
		// nothing goes to disk again.
		seen := claimEverything(t, tb, o)
		users := 0
		for item, n := range seen {
			require.Equal(t, 1, n, item)
			if strings.HasPrefix(item, "user:") {
				users++
			}
		}
		require.Equal(t, 3200, users)
		require.Equal(t, written, offloadSeq(t, tb), "refills fit within offload_above: no segment written again")
	})
}

// An empty plain queue is refilled even when a stuck group's sub-queue
// holds so much that the refill passes offload_above; the next pass moves
// the group's excess to disk, not the refilled items.
func TestDryPlainQueueIsRefilledBesideAFullGroup(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{OffloadAbove: ptr(2000), OffloadSegment: ptr(1000)})
		o := offloader(tb, t)
		tb.enqueue(t, todo, names("user:", 3000)...)
		require.NoError(t, o.RunOnce(tb.ctx)) // 2000 stay, 1000 on disk
		require.EqualValues(t, 1000, tb.counts(t).Offloaded)
		require.Len(t, claimN(t, tb, "alice", 2000), 2000)

		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "posts", Type: "post", RatePerMinute: 1}})
		require.NoError(t, err)
		tb.enqueue(t, todo, names("post:", 1900)...)
		plain := queues.QueueKey(tb.slug, queues.QueueTodo)
		group := queues.GroupQueueKey(tb.slug, queues.QueueTodo, "posts")
		require.NoError(t, o.RunOnce(tb.ctx))
		require.EqualValues(t, 1000, listLen(t, tb, plain), "the dry plain queue was refilled")
		for range 3 {
			require.NoError(t, o.RunOnce(tb.ctx))
		}
		require.EqualValues(t, 1000, listLen(t, tb, plain), "the refilled items stay in Redis")
		require.EqualValues(t, 1000, listLen(t, tb, group), "the group's excess went to disk")
		c := tb.counts(t)
		require.EqualValues(t, 900, c.Offloaded)
		require.EqualValues(t, 2900, c.Todo)
		got := claimN(t, tb, "bob", 2000) // until none: the group serves one a minute
		users := 0
		for _, item := range got {
			if strings.HasPrefix(item, "user:") {
				users++
			}
		}
		require.Equal(t, 1000, users)
	})
}
