package queues

// Archiving: done items of done_mode archive, written to archive files.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
