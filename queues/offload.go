package queues

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	// indexed: "<slug>/<id>" of this frontend's segments known to have an
	// index (indexSegments checks each once).
	indexed map[string]bool

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
	errs = append(errs, o.indexSegments(ctx, slug, segments))
	o.forgetIndexed(slug, segments)
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
