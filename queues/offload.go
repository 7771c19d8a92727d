package queues

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The offloader keeps Redis memory bounded. Per project (settings
// offload_above, offload_segment, done_mode) it:
//
//   - moves items off a shared queue (the queue and its limit groups'
//     sub-queues together) that grew past offload_above to gzip segment
//     files under Dir/segments/<slug>/, in three steps that each leave
//     every item in one place: offload_take.lua moves the items to a
//     staging list and records the segment; the file is written and
//     synced; offload_commit.lua drops the staged copy;
//   - refills the oldest segment it owns (refill.lua queues the items and
//     forgets the segment in one step; the file is deleted after) when the
//     list it goes back to holds fewer than a quarter of offload_above AND
//     the queue's total stays within offload_above, or when that list is
//     empty (see refillQueue);
//   - puts back the items of segments left staged by a crash, once they are
//     older than the staged-segment window (offload_abort.lua);
//   - drains done items into archive files under Dir/archive/<slug>/
//     (done_mode archive), or empties an old done set (count and archive).
//     An archive file is written under a temporary name, committed, moved
//     to its final name, and then its record is dropped: a file under a
//     final archive name is always a committed one and needs no record, so
//     the segments hash does not grow with the archive;
//   - removes orphaned files: segment files and temporary files that no
//     segment record references AND whose timestamp of interest (the
//     file's mtime, touched whenever offload or refill works with it) is
//     older than the protection window. Finished archive files are never
//     considered.
//
// Claims never touch disk: they pop lists in Redis, and the offloader works
// beside them. Segment files live on the frontend that wrote them (its
// Node); each frontend refills only its own.

// Segment states, as segment records name them.
const (
	// SegmentStaging: the items are in the staging list; the file is
	// being written.
	SegmentStaging = "staging"
	// SegmentDisk: a queue's segment, in its file, waiting to be refilled.
	SegmentDisk = "disk"
	// SegmentArchived: an archive file, committed and being moved to its
	// final name; the record is dropped once it is there.
	SegmentArchived = "archived"
)

// Segment is one segment record.
type Segment struct {
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Queue   string    `json:"queue"` // a shared queue, or "done" for the archive
	Count   int64     `json:"count"`
	Node    string    `json:"node"`
	Created time.Time `json:"created"`
	Source  string    `json:"source"` // the list it was taken from
}

func parseSegment(id, record string) (Segment, error) {
	f := strings.Fields(record)
	if len(f) != 6 {
		return Segment{}, fmt.Errorf("segment %s: bad record %q", id, record)
	}
	count, err1 := strconv.ParseInt(f[2], 10, 64)
	created, err2 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil {
		return Segment{}, fmt.Errorf("segment %s: bad record %q", id, record)
	}
	return Segment{ID: id, State: f[0], Queue: f[1], Count: count, Node: f[3], Created: time.UnixMilli(created), Source: f[5]}, nil
}

// Segment and archive files are named <id>.gz, and written as
// <id>.gz.tmp first.
var (
	segmentFileName = regexp.MustCompile(`^(\d{12})\.gz$`)
	tmpFileName     = regexp.MustCompile(`^(\d{12})\.gz\.tmp$`)
)

const tmpSuffix = ".tmp"

// Offloader runs the offload, refill, archive and orphan cleanup passes of
// one frontend.
type Offloader struct {
	Engine *Engine
	// Dir is HOARD_DATA_DIR: segments go to Dir/segments/<slug>/, archives
	// to Dir/archive/<slug>/.
	Dir string
	// Node names this frontend in segment records (no spaces).
	Node string
	// Interval between passes (default 1s). A pass keeps going while a
	// queue is over its limit, so a fast enqueue is followed closely.
	Interval time.Duration
	// Protection is the orphan protection window (default 1h): an
	// unreferenced file younger than this is kept.
	Protection time.Duration
	// StagedWindow is how long a staged segment is left to the frontend
	// writing it before its items are put back (default: Protection).
	StagedWindow time.Duration
	Logger       *slog.Logger

	mu       sync.Mutex
	cancel   context.CancelFunc
	done     chan struct{}
	archived map[string]time.Time // slug -> last archive write

	committed, refilled, recovered, orphansRemoved atomic.Int64
}

// OffloadActivity counts what one Offloader did since it was made.
type OffloadActivity struct {
	// Committed counts segment and archive files written and committed.
	Committed int64
	// Refilled counts segments brought back into Redis.
	Refilled int64
	// Recovered counts staged segments whose items were put back.
	Recovered int64
	// OrphansRemoved counts orphaned files removed.
	OrphansRemoved int64
}

// Activity reports what this Offloader did so far.
func (o *Offloader) Activity() OffloadActivity {
	return OffloadActivity{
		Committed: o.committed.Load(), Refilled: o.refilled.Load(),
		Recovered: o.recovered.Load(), OrphansRemoved: o.orphansRemoved.Load(),
	}
}

// Defaults for an Offloader.
const (
	DefaultOffloadInterval  = time.Second
	DefaultOrphanProtection = time.Hour
	archiveFlushInterval    = time.Minute
	maxSegmentsPerPass      = 64
	doneDrainBatch          = 10_000
	segmentReadBatch        = 10_000
)

func (o *Offloader) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

func (o *Offloader) protection() time.Duration {
	if o.Protection > 0 {
		return o.Protection
	}
	return DefaultOrphanProtection
}

func (o *Offloader) stagedWindow() time.Duration {
	if o.StagedWindow > 0 {
		return o.StagedWindow
	}
	return o.protection()
}

func (o *Offloader) node() string {
	if o.Node != "" {
		return o.Node
	}
	return "local"
}

// loadNodeID returns the node name kept in dir/node-id, creating a random
// one the first time, so a frontend keeps its name (and refills its own
// segments) across restarts even when its hostname changes.
func loadNodeID(dir string) (string, error) {
	path := filepath.Join(dir, "node-id")
	if raw, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(raw)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := "node-" + hex.EncodeToString(b[:])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	return id, nil
}

// ValidateNode checks a node name for segment records.
func ValidateNode(node string) error {
	if node == "" || len(node) > 128 || strings.ContainsAny(node, " \t\r\n") {
		return fmt.Errorf("node name %q must be 1-128 characters without spaces", node)
	}
	return nil
}

// Start runs passes every Interval until Stop.
func (o *Offloader) Start(ctx context.Context) error {
	if o.Dir == "" {
		return errors.New("offloader needs a data directory")
	}
	if o.Node == "" {
		node, err := loadNodeID(o.Dir)
		if err != nil {
			return err
		}
		o.Node = node
	}
	if err := ValidateNode(o.node()); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cancel != nil {
		return errors.New("offloader already started")
	}
	ctx, o.cancel = context.WithCancel(ctx)
	o.done = make(chan struct{})
	interval := o.Interval
	if interval <= 0 {
		interval = DefaultOffloadInterval
	}
	go func() {
		defer close(o.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			if err := o.RunOnce(ctx); err != nil && ctx.Err() == nil {
				o.logger().Warn("offload pass failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return nil
}

// Stop ends the passes and waits for the current one. Safe to call twice.
func (o *Offloader) Stop() {
	o.mu.Lock()
	cancel, done := o.cancel, o.done
	o.cancel = nil
	o.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// RunOnce makes one pass over every project.
func (o *Offloader) RunOnce(ctx context.Context) error {
	slugs, err := o.Engine.Projects(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, slug := range slugs {
		if err := o.runProject(ctx, slug); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", slug, err))
		}
	}
	if _, err := o.CleanupOrphans(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o *Offloader) runProject(ctx context.Context, slug string) error {
	project, err := o.Engine.Project(ctx, slug)
	if err != nil {
		var qe *Error
		if errors.As(err, &qe) && qe.Code == CodeProjectNotFound {
			return nil // deleted meanwhile
		}
		return err
	}
	if err := o.recoverStaged(ctx, slug); err != nil {
		return err
	}
	// One step's failure does not stop the others: a lost segment file
	// must not keep every other queue from being offloaded or refilled.
	var errs []error
	if project.DoneMode != DoneKeep {
		errs = append(errs, o.drainDone(ctx, slug))
	}
	if project.DoneMode == DoneArchive {
		errs = append(errs, o.archiveDone(ctx, slug, project.OffloadSegment, false))
	}
	segments, err := o.Segments(ctx, slug)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, o.finishArchives(ctx, slug, segments))
	for _, q := range SharedQueues {
		// todo:redo is never offloaded: it holds released items, which a
		// late done takes out of the list by name (done.lua), so they must
		// stay in Redis. It is small (released claims only).
		if project.OffloadAbove > 0 && q != QueueRedo {
			_, err := o.offloadQueue(ctx, slug, q, project.OffloadAbove, project.OffloadSegment)
			errs = append(errs, err)
		}
		// Refill even with offloading now off, so nothing stays on disk.
		_, err := o.refillQueue(ctx, slug, q, project.OffloadAbove, segments)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// queueLists returns the list keys of a shared queue (the queue and its
// known limit groups' sub-queues) with their lengths.
func (o *Offloader) queueLists(ctx context.Context, slug string, q Queue) ([]string, []int64, error) {
	known, err := o.Engine.rdb.SMembers(ctx, GroupsKnownKey(slug)).Result()
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(known)
	keys := []string{QueueKey(slug, q)}
	for _, g := range known {
		keys = append(keys, GroupQueueKey(slug, q, g))
	}
	pipe := o.Engine.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.LLen(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, err
	}
	lens := make([]int64, len(keys))
	for i, c := range cmds {
		lens[i] = c.Val()
	}
	return keys, lens, nil
}

// newSegmentID proposes the next segment id. It is only a proposal:
// offload_take.lua records it and raises seq to it in one step, and refuses
// it (-1) when seq has moved past it meanwhile (another offloader, or an
// orphan cleanup that found a file of that id unreferenced).
func (o *Offloader) newSegmentID(ctx context.Context, slug string) (string, error) {
	seq, err := o.Engine.rdb.HGet(ctx, OffloadKey(slug), "seq").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	return fmt.Sprintf("%012d", seq+1), nil
}

// newArchiveID hands out an id for an archive file. Finished archive files
// have no record, so were Redis to lose seq, a new id could name one of
// them: then seq is first moved past every archive file's id.
func (o *Offloader) newArchiveID(ctx context.Context, slug string) (string, error) {
	id, err := o.newSegmentID(ctx, slug)
	if err != nil {
		return "", err
	}
	dir := o.segmentDir(slug, true)
	if _, err := os.Stat(filepath.Join(dir, id+".gz")); err != nil {
		return id, nil
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	seq, _ := strconv.ParseInt(id, 10, 64)
	var highest int64
	for _, file := range files {
		if m := segmentFileName.FindStringSubmatch(file.Name()); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			highest = max(highest, n)
		}
	}
	o.logger().Warn("archive file ids were reused (did Redis lose the project's offload seq?): moving seq past them", "project", slug, "seq", seq, "highest", highest)
	if err := o.Engine.rdb.HIncrBy(ctx, OffloadKey(slug), "seq", highest-seq+1).Err(); err != nil {
		return "", err
	}
	return o.newSegmentID(ctx, slug)
}

func (o *Offloader) segmentDir(slug string, archive bool) string {
	if archive {
		return filepath.Join(o.Dir, "archive", slug)
	}
	return filepath.Join(o.Dir, "segments", slug)
}

func (o *Offloader) segmentPath(slug string, seg Segment) string {
	return filepath.Join(o.segmentDir(slug, seg.Queue == "done"), seg.ID+".gz")
}

// offloadQueue moves segments off a shared queue while more than above of
// its items are in Redis, down to above minus one segment.
//
// Every list keeps one segment's worth of items: segments are taken from
// the list with the most items beyond that, and never below it. A list
// refilled because it ran dry (refillQueue) therefore keeps its items,
// and what goes to disk instead is the excess of the lists that are not
// being drained (a rate-limited group's sub-queue holding many items).
// Without this, a refill into a dry list beside a full one would be
// offloaded again by the next pass, and back, forever. The cost: with
// several lists each holding about a segment, Redis may hold up to one
// segment per list (the queue and its limit groups) rather than above;
// above is at least two segments, so the plain queue alone never passes it.
func (o *Offloader) offloadQueue(ctx context.Context, slug string, q Queue, above, segment int) (int64, error) {
	var moved int64
	for range maxSegmentsPerPass {
		keys, lens, err := o.queueLists(ctx, slug, q)
		if err != nil {
			return moved, err
		}
		var total, excess int64
		from := -1
		for i, l := range lens {
			total += l
			if e := l - min(l, int64(segment)); e > excess {
				from, excess = i, e
			}
		}
		if total <= int64(above) || from < 0 {
			return moved, nil
		}
		want := min(int64(segment), total-int64(above-segment), excess)
		n, err := o.offloadOnce(ctx, slug, string(q), keys[from], "tail", want, lens[from]-want)
		if err != nil || n == 0 {
			return moved, err
		}
		moved += n
	}
	return moved, nil
}

// offloadOnce takes up to want items off source (keeping keep), writes them
// to a new segment file and commits it. It returns the items moved.
func (o *Offloader) offloadOnce(ctx context.Context, slug, queue, source, end string, want, keep int64) (int64, error) {
	newID := o.newSegmentID
	if queue == "done" {
		newID = o.newArchiveID
	}
	var id, staging string
	var taken int64
	// A proposal is refused when seq moved past it; a few retries cover a
	// concurrent offloader or cleanup, and the next pass covers the rest.
	for range 4 {
		var err error
		if id, err = newID(ctx, slug); err != nil {
			return 0, err
		}
		staging = StagingKey(slug, id)
		taken, err = o.Engine.runScriptInt(ctx, "queues.offload", offloadTakeScript,
			[]string{source, staging, SegmentsKey(slug), OffloadKey(slug)},
			id, end, want, keep, queue, o.node(), o.Engine.nowMillis(), strings.TrimPrefix(source, projectPrefix(slug)))
		if err != nil {
			return 0, err
		}
		if taken != -1 {
			break
		}
	}
	if taken <= 0 {
		return 0, nil
	}
	seg := Segment{ID: id, Queue: queue, Node: o.node(), Source: strings.TrimPrefix(source, projectPrefix(slug))}
	seg.Count = taken
	final := o.segmentPath(slug, seg)
	tmp := final + tmpSuffix
	if err := o.writeSegment(ctx, tmp, staging, taken); err != nil {
		// The items stay staged; recoverStaged puts them back once the
		// segment is older than the staged-segment window.
		return 0, fmt.Errorf("segment %s: %w", id, err)
	}
	// Touch: this segment is of interest right now.
	now := o.Engine.clock.Now()
	_ = os.Chtimes(tmp, now, now)
	archive := queue == "done"
	state, written := SegmentDisk, final
	var err error
	if archive {
		// An archive file takes its final name only once committed, so a
		// file under that name never needs a record.
		state, written = SegmentArchived, tmp
		err = syncDir(filepath.Dir(tmp))
	} else {
		// Still staged: were the commit lost, the file is an orphan.
		err = publishFile(tmp, final)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("segment %s: %w", id, err)
	}
	ok, err := o.Engine.runScriptInt(ctx, "queues.offload", offloadCommitScript,
		[]string{staging, SegmentsKey(slug)}, id, state, taken)
	if err != nil {
		return 0, err
	}
	if ok != 1 {
		// Aborted as stale meanwhile: the items are back in Redis.
		_ = os.Remove(written)
		return 0, fmt.Errorf("segment %s was no longer staged when its file was ready (reply %d)", id, ok)
	}
	if archive {
		if err := o.finishArchive(ctx, slug, seg); err != nil {
			// Committed: a later pass finishes it.
			o.committed.Add(1)
			return taken, err
		}
	}
	o.committed.Add(1)
	return taken, nil
}

// publishFile moves a synced file to its final name, durably.
func publishFile(tmp, final string) error {
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(filepath.Dir(final))
}

// ownsArchive says whether this frontend holds a committed archive
// segment's file: it wrote it, or the file is in this data directory.
func (o *Offloader) ownsArchive(slug string, seg Segment) bool {
	if seg.Node == o.node() {
		return true
	}
	final := o.segmentPath(slug, seg)
	for _, path := range []string{final, final + tmpSuffix} {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

// finishArchive moves a committed archive file to its final name, unless
// it is there already, and drops its record (archive_finish.lua).
func (o *Offloader) finishArchive(ctx context.Context, slug string, seg Segment) error {
	final := o.segmentPath(slug, seg)
	if _, err := os.Stat(final); errors.Is(err, fs.ErrNotExist) {
		if err := publishFile(final+tmpSuffix, final); err != nil {
			return fmt.Errorf("archive segment %s (%d completions): %w", seg.ID, seg.Count, err)
		}
	} else if err != nil {
		return err
	}
	_, err := o.Engine.runScriptInt(ctx, "queues.finishArchive", archiveFinishScript,
		[]string{SegmentsKey(slug), OffloadKey(slug)}, seg.ID, o.node())
	return err
}

// finishArchives finishes the committed archive segments this frontend
// holds: those a crash or an error stopped between commit and rename, and
// records of archive files written before archive files needed none.
func (o *Offloader) finishArchives(ctx context.Context, slug string, segments []Segment) error {
	var errs []error
	for _, seg := range segments {
		if seg.State != SegmentArchived || seg.Queue != "done" || !o.ownsArchive(slug, seg) {
			continue
		}
		if err := o.finishArchive(ctx, slug, seg); err != nil {
			o.logger().Error("archive file not finished", "project", slug, "segment", seg.ID, "items", seg.Count, "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeSegment writes the staged items to a gzip file, one per line, and
// syncs it (the caller syncs the directory). The segment's id was just
// handed out, so a file already under that name is a stale leftover (of a
// crash, or of a Redis that lost its seq) and is replaced.
func (o *Offloader) writeSegment(ctx context.Context, path, staging string, count int64) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	buffered := bufio.NewWriterSize(file, 256<<10)
	zw, err := gzip.NewWriterLevel(buffered, gzip.BestSpeed)
	if err != nil {
		return err
	}
	var written int64
	for start := int64(0); start < count; start += segmentReadBatch {
		items, err := o.Engine.rdb.LRange(ctx, staging, start, min(start+segmentReadBatch, count)-1).Result()
		if err != nil {
			return err
		}
		for _, item := range items {
			if _, err := io.WriteString(zw, item); err != nil {
				return err
			}
			if _, err := zw.Write([]byte{'\n'}); err != nil {
				return err
			}
			written++
		}
	}
	if written != count {
		return fmt.Errorf("staged %d items but read %d", count, written)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := buffered.Flush(); err != nil {
		return err
	}
	return file.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readSegment reads a segment file's items.
func readSegment(path string) ([]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(file, 256<<10))
	if err != nil {
		return nil, err
	}
	var items []string
	scanner := bufio.NewScanner(zr)
	scanner.Buffer(make([]byte, 64<<10), MaxItemBytes+2)
	for scanner.Scan() {
		items = append(items, scanner.Text())
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	return items, zr.Close()
}

// Segments lists a project's segment records, oldest first.
func (o *Offloader) Segments(ctx context.Context, slug string) ([]Segment, error) {
	if ValidateSlug(slug) != nil {
		return nil, errorf("queues.Segments", CodeProjectNotFound, "no project %q", slug)
	}
	records, err := o.Engine.rdb.HGetAll(ctx, SegmentsKey(slug)).Result()
	if err != nil {
		return nil, unavailable("queues.Segments", err)
	}
	segments := make([]Segment, 0, len(records))
	for id, record := range records {
		seg, err := parseSegment(id, record)
		if err != nil {
			o.logger().Error("damaged segment record", "project", slug, "err", err)
			continue
		}
		segments = append(segments, seg)
	}
	slices.SortFunc(segments, func(a, b Segment) int { return strings.Compare(a.ID, b.ID) })
	return segments, nil
}

// ownsFile says whether this frontend can refill a segment: it wrote it,
// or its file is in this data directory (a frontend that came back under
// another name, or frontends sharing one directory).
func (o *Offloader) ownsFile(slug string, seg Segment) bool {
	if seg.Node == o.node() {
		return true
	}
	_, err := os.Stat(o.segmentPath(slug, seg))
	return err == nil
}

// refillQueue brings this node's segments of q back, oldest first (all of
// them when offloading is off). A segment comes back when the list it goes
// back to (its source if that is one of q's lists still, else the plain
// queue) runs low, fewer than a quarter of above items, and the queue's
// total in Redis (every list of q) stays within above with the segment
// added; so offloadQueue never has reason to take it straight back.
//
// A list that is empty is refilled regardless of the total: its claims
// must not starve because another list of the queue (a rate-limited
// group's sub-queue, say) holds most of the budget. The next offload then
// moves that other list's excess to disk, not the refilled items (every
// list keeps a segment's worth; see offloadQueue).
//
// A segment that can't be refilled is reported and skipped, so the others
// still come back.
func (o *Offloader) refillQueue(ctx context.Context, slug string, q Queue, above int, segments []Segment) (int64, error) {
	var refilled int64
	var errs []error
	// The lists' lengths are read once, and again only after a refill
	// changed them: a queue with hundreds of segments on disk costs one
	// read per pass, not two round trips per segment.
	var keys []string
	var lens []int64
	for _, seg := range segments {
		if seg.State != SegmentDisk || seg.Queue != string(q) || !o.ownsFile(slug, seg) {
			continue
		}
		if above > 0 {
			if keys == nil {
				var err error
				if keys, lens, err = o.queueLists(ctx, slug, q); err != nil {
					return refilled, err
				}
			}
			var total int64
			length := lens[0]
			for i, k := range keys {
				total += lens[i]
				if k == ListKey(slug, seg.Source) {
					length = lens[i]
				}
			}
			fits := length < int64(above/4) && total+seg.Count <= int64(above)
			if !fits && length > 0 {
				continue
			}
		}
		n, err := o.refillSegment(ctx, slug, seg)
		keys = nil // re-read: the refill (or a failed one) may have changed them
		if err != nil {
			o.logger().Error("segment not refilled", "project", slug, "segment", seg.ID, "items", seg.Count, "err", err)
			errs = append(errs, err)
			continue
		}
		refilled += n
	}
	return refilled, errors.Join(errs...)
}

func (o *Offloader) refillSegment(ctx context.Context, slug string, seg Segment) (int64, error) {
	const op = "queues.refill"
	path := o.segmentPath(slug, seg)
	now := o.Engine.clock.Now()
	_ = os.Chtimes(path, now, now) // of interest: about to be read
	items, err := readSegment(path)
	if err != nil {
		return 0, fmt.Errorf("segment %s (%d items of %s) can't be read from %s: %w", seg.ID, seg.Count, seg.Queue, path, err)
	}
	if int64(len(items)) != seg.Count {
		return 0, fmt.Errorf("segment %s: file %s holds %d items, the record says %d", seg.ID, path, len(items), seg.Count)
	}
	code, _, err := o.Engine.runWithGroups(ctx, op, slug, refillScript, func(state *groupState) ([]string, []any) {
		keys := []string{ConfigKey(slug), SegmentsKey(slug), OffloadKey(slug), QueueKey(slug, Queue(seg.Queue))}
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, Queue(seg.Queue), g.Name))
		}
		args := make([]any, 0, 3+2*len(items))
		args = append(args, seg.ID, state.version, seg.Queue)
		for _, item := range items {
			args = append(args, item, groupFor(state.groups, item)+2)
		}
		return keys, args
	})
	switch {
	case err != nil:
		return 0, err
	case code == codeMoved:
		// Moved to another queue since it was listed: the next pass
		// refills it there.
		return 0, nil
	case code < 0:
		return 0, fmt.Errorf("segment %s: refill refused (%d)", seg.ID, code)
	}
	// Queued (or already gone): the file is no longer referenced.
	_ = os.Remove(path)
	if code > 0 {
		o.refilled.Add(1)
	}
	return code, nil
}

// recoverStaged puts back the items of staged segments older than the
// staged-segment window: their offload stopped before the file was
// committed.
func (o *Offloader) recoverStaged(ctx context.Context, slug string) error {
	segments, err := o.Segments(ctx, slug)
	if err != nil {
		return err
	}
	cutoff := o.Engine.clock.Now().Add(-o.stagedWindow())
	for _, seg := range segments {
		if seg.State != SegmentStaging || !seg.Created.Before(cutoff) {
			continue
		}
		target := ListKey(slug, seg.Source)
		end := "tail"
		if seg.Queue == "done" {
			end = "head"
		} else if name, ok := strings.CutPrefix(seg.Source, seg.Queue+":g:"); ok {
			known, err := o.Engine.rdb.SIsMember(ctx, GroupsKnownKey(slug), name).Result()
			if err != nil {
				return err
			}
			if !known {
				target = QueueKey(slug, Queue(seg.Queue))
			}
		}
		n, err := o.Engine.runScriptInt(ctx, "queues.recoverStaged", offloadAbortScript,
			[]string{StagingKey(slug, seg.ID), SegmentsKey(slug), OffloadKey(slug), target}, seg.ID, end)
		if err != nil {
			return err
		}
		if n >= 0 {
			o.recovered.Add(1)
			o.logger().Warn("put back the items of a segment whose offload stopped", "project", slug, "segment", seg.ID, "items", n, "node", seg.Node)
		}
	}
	return nil
}

// drainDone empties a done set the project no longer keeps.
func (o *Offloader) drainDone(ctx context.Context, slug string) error {
	for range maxSegmentsPerPass {
		n, err := o.Engine.runScriptInt(ctx, "queues.drainDone", doneDrainScript,
			[]string{ConfigKey(slug), DoneKey(slug), StatsKey(slug), DoneArchiveKey(slug)}, doneDrainBatch)
		if err != nil || n == 0 {
			return err
		}
	}
	return nil
}

// archiveDone writes waiting completions to archive files: full segments
// at once, a partial one at most once a minute (or when flush is set).
func (o *Offloader) archiveDone(ctx context.Context, slug string, segment int, flush bool) error {
	for range maxSegmentsPerPass {
		waiting, err := o.Engine.rdb.LLen(ctx, DoneArchiveKey(slug)).Result()
		if err != nil || waiting == 0 {
			return err
		}
		o.mu.Lock()
		last, seen := o.archived[slug]
		if !seen {
			if o.archived == nil {
				o.archived = map[string]time.Time{}
			}
			o.archived[slug] = o.Engine.clock.Now()
		}
		o.mu.Unlock()
		due := flush || (seen && o.Engine.clock.Now().Sub(last) >= archiveFlushInterval)
		if waiting < int64(segment) && !due {
			return nil
		}
		if _, err := o.offloadOnce(ctx, slug, "done", DoneArchiveKey(slug), "head", int64(segment), 0); err != nil {
			return err
		}
		o.mu.Lock()
		o.archived[slug] = o.Engine.clock.Now()
		o.mu.Unlock()
	}
	return nil
}

// FlushArchive writes every waiting completion of a project to archive
// files now.
func (o *Offloader) FlushArchive(ctx context.Context, slug string) error {
	project, err := o.Engine.Project(ctx, slug)
	if err != nil {
		return err
	}
	return o.archiveDone(ctx, slug, project.OffloadSegment, true)
}

// CleanupOrphans removes segment files and temporary files that no
// segment record references and whose timestamp of interest (mtime) is
// older than the protection window. A finished archive file (<id>.gz under
// archive/) is never an orphan: it has no record by design. It takes no
// lock: offload records a segment before writing its file and refill reads
// a file before forgetting it, so an unreferenced file is never needed
// again; the window keeps anything being worked on right now.
func (o *Offloader) CleanupOrphans(ctx context.Context) (int, error) {
	removed := 0
	cutoff := o.Engine.clock.Now().Add(-o.protection())
	for _, kind := range []string{"segments", "archive"} {
		projects, err := os.ReadDir(filepath.Join(o.Dir, kind))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, err
		}
		for _, project := range projects {
			slug := project.Name()
			if !project.IsDir() || ValidateSlug(slug) != nil {
				continue
			}
			n, err := o.cleanupDir(ctx, slug, filepath.Join(o.Dir, kind, slug), kind == "archive", cutoff)
			removed += n
			o.orphansRemoved.Add(int64(n))
			if err != nil {
				return removed, err
			}
		}
	}
	return removed, nil
}

// orphanCheckBatch bounds the existence checks sent in one pipeline.
const orphanCheckBatch = 1000

// cleanupDir removes the orphans of one project directory, checking the
// candidates' records in pipelines rather than one round trip each.
func (o *Offloader) cleanupDir(ctx context.Context, slug, dir string, archive bool, cutoff time.Time) (int, error) {
	files, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	type candidate struct{ path, id string }
	var candidates []candidate
	for _, file := range files {
		if file.IsDir() {
			continue
		}
		// Only files named like segments are ours to remove.
		m := tmpFileName.FindStringSubmatch(file.Name())
		if m == nil && !archive {
			m = segmentFileName.FindStringSubmatch(file.Name())
		}
		if m == nil {
			continue
		}
		info, err := file.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue // gone already, or of recent interest
		}
		candidates = append(candidates, candidate{filepath.Join(dir, file.Name()), m[1]})
	}
	removed := 0
	for start := 0; start < len(candidates); start += orphanCheckBatch {
		batch := candidates[start:min(start+orphanCheckBatch, len(candidates))]
		ids := make([]string, len(batch))
		for i, c := range batch {
			ids[i] = c.id
		}
		orphans, err := o.unreferencedIDs(ctx, slug, ids)
		if err != nil {
			return removed, err
		}
		for _, c := range batch {
			if !orphans[c.id] {
				continue
			}
			// By name is safe: orphan_check raised seq past c.id, so no
			// offload can record that id and rename a live file here.
			if err := os.Remove(c.path); err == nil {
				removed++
				o.logger().Info("removed orphaned segment file", "path", c.path)
			}
		}
	}
	return removed, nil
}

// unreferencedIDs returns which of ids have no segment record, and makes
// sure none of them can get one later (orphan_check.lua).
func (o *Offloader) unreferencedIDs(ctx context.Context, slug string, ids []string) (map[string]bool, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	reply, err := o.Engine.runScript(ctx, "queues.CleanupOrphans", orphanCheckScript, []string{SegmentsKey(slug), OffloadKey(slug)}, args...)
	if err != nil {
		return nil, err
	}
	list, _ := reply.([]any)
	orphans := make(map[string]bool, len(list))
	for _, id := range list {
		orphans[replyString(id)] = true
	}
	return orphans, nil
}

// MoveSegments moves this project's on-disk segments of one shared queue to
// another; the items follow when the segments are refilled. It returns the
// items moved.
func (o *Offloader) MoveSegments(ctx context.Context, slug string, from, to Queue) (int64, error) {
	segments, err := o.Segments(ctx, slug)
	if err != nil {
		return 0, err
	}
	var moved int64
	for _, seg := range segments {
		if seg.State != SegmentDisk || seg.Queue != string(from) {
			continue
		}
		n, err := o.Engine.runScriptInt(ctx, "queues.MoveSegments", segmentMoveScript,
			[]string{SegmentsKey(slug), OffloadKey(slug)}, seg.ID, string(to))
		if err != nil {
			return moved, err
		}
		moved += n
	}
	return moved, nil
}

// ExportQueue writes every item of a shared queue, one per line: those in
// Redis (the queue and its groups' sub-queues) and those in this node's
// segment files. Items claimed or refilled while it runs may be missed or
// written twice; pause the project for an exact copy.
func (o *Offloader) ExportQueue(ctx context.Context, slug string, q Queue, w io.Writer) (int64, error) {
	if _, err := o.Engine.Project(ctx, slug); err != nil {
		return 0, err
	}
	keys, _, err := o.queueLists(ctx, slug, q)
	if err != nil {
		return 0, unavailable("queues.ExportQueue", err)
	}
	var n int64
	for _, key := range keys {
		for start := int64(0); ; start += segmentReadBatch {
			items, err := o.Engine.rdb.LRange(ctx, key, start, start+segmentReadBatch-1).Result()
			if err != nil {
				return n, unavailable("queues.ExportQueue", err)
			}
			for _, item := range items {
				if _, err := io.WriteString(w, item+"\n"); err != nil {
					return n, err
				}
				n++
			}
			if len(items) < segmentReadBatch {
				break
			}
		}
	}
	m, err := o.exportSegments(ctx, slug, string(q), w)
	return n + m, err
}

// ExportArchive writes every archived completion of a project, one per
// line: those in this frontend's archive files, those on their way there,
// then those waiting to be archived. It refuses when another frontend's
// data directory holds archive files: export there too, or the copy would
// be incomplete.
func (o *Offloader) ExportArchive(ctx context.Context, slug string, w io.Writer) (int64, error) {
	const op = "queues.ExportArchive"
	if _, err := o.Engine.Project(ctx, slug); err != nil {
		return 0, err
	}
	counters, err := o.Engine.rdb.HGetAll(ctx, OffloadKey(slug)).Result()
	if err != nil {
		return 0, unavailable(op, err)
	}
	var elsewhere []string
	for field, value := range counters {
		node, ok := strings.CutPrefix(field, "archive:")
		if n, _ := strconv.ParseInt(value, 10, 64); ok && node != o.node() && n > 0 {
			elsewhere = append(elsewhere, fmt.Sprintf("%q (%d)", node, n))
		}
	}
	if len(elsewhere) > 0 {
		slices.Sort(elsewhere)
		return 0, errorf(op, CodeUnavailable, "archive files are also on frontend %s; export there, or this one would be incomplete",
			strings.Join(elsewhere, ", "))
	}
	segments, err := o.Segments(ctx, slug)
	if err != nil {
		return 0, err
	}
	var n int64
	read := map[string]bool{} // archive files read from their record
	for _, seg := range segments {
		if seg.Queue != "done" {
			continue
		}
		var items []string
		switch seg.State {
		case SegmentStaging:
			// On their way to disk: still in Redis, in the staging list.
			if items, err = o.Engine.rdb.LRange(ctx, StagingKey(slug, seg.ID), 0, -1).Result(); err != nil {
				return n, unavailable(op, err)
			}
		case SegmentArchived:
			if !o.ownsArchive(slug, seg) {
				return n, errorf(op, CodeUnavailable,
					"archive file %s (%d completions) is on frontend %q; export there, or this one would be incomplete", seg.ID, seg.Count, seg.Node)
			}
			if items, err = o.readArchive(slug, seg); err != nil {
				return n, fmt.Errorf("archive file %s: %w", seg.ID, err)
			}
			read[seg.ID] = true
		}
		m, err := writeItems(w, items)
		if n += m; err != nil {
			return n, err
		}
	}
	dir := o.segmentDir(slug, true)
	files, err := os.ReadDir(dir) // sorted by name, so by id
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	for _, file := range files {
		m := segmentFileName.FindStringSubmatch(file.Name())
		if m == nil || file.IsDir() || read[m[1]] {
			continue
		}
		items, err := readSegment(filepath.Join(dir, file.Name()))
		if err != nil {
			return n, fmt.Errorf("archive file %s: %w", file.Name(), err)
		}
		written, err := writeItems(w, items)
		if n += written; err != nil {
			return n, err
		}
	}
	for start := int64(0); ; start += segmentReadBatch {
		items, err := o.Engine.rdb.LRange(ctx, DoneArchiveKey(slug), start, start+segmentReadBatch-1).Result()
		if err != nil {
			return n, unavailable(op, err)
		}
		written, err := writeItems(w, items)
		if n += written; err != nil {
			return n, err
		}
		if len(items) < segmentReadBatch {
			return n, nil
		}
	}
}

// readArchive reads a committed archive file under whichever name it has
// (it may be moved to its final name while we look).
func (o *Offloader) readArchive(slug string, seg Segment) ([]string, error) {
	final := o.segmentPath(slug, seg)
	var err error
	for _, path := range []string{final, final + tmpSuffix, final} {
		var items []string
		if items, err = readSegment(path); !errors.Is(err, fs.ErrNotExist) {
			return items, err
		}
	}
	return nil, err
}

func writeItems(w io.Writer, items []string) (int64, error) {
	var n int64
	for _, item := range items {
		if _, err := io.WriteString(w, item+"\n"); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// exportSegments writes the items of a queue's segments: those staged
// (still in Redis) and those in this frontend's files.
func (o *Offloader) exportSegments(ctx context.Context, slug, queue string, w io.Writer) (int64, error) {
	segments, err := o.Segments(ctx, slug)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, seg := range segments {
		if seg.Queue != queue {
			continue
		}
		var items []string
		if seg.State == SegmentStaging {
			// On their way to disk: still in Redis, in the staging list.
			if items, err = o.Engine.rdb.LRange(ctx, StagingKey(slug, seg.ID), 0, -1).Result(); err != nil {
				return n, unavailable("queues.export", err)
			}
		} else {
			if !o.ownsFile(slug, seg) {
				return n, errorf("queues.export", CodeUnavailable,
					"segment %s (%d items) is on frontend %q; export there, or it would be incomplete", seg.ID, seg.Count, seg.Node)
			}
			path := o.segmentPath(slug, seg)
			now := o.Engine.clock.Now()
			_ = os.Chtimes(path, now, now) // of interest while it is read
			items, err = readSegment(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue // refilled meanwhile: its items were in Redis
			}
			if err != nil {
				return n, fmt.Errorf("segment %s: %w", seg.ID, err)
			}
		}
		m, err := writeItems(w, items)
		if n += m; err != nil {
			return n, err
		}
	}
	return n, nil
}
