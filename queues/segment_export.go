package queues

// Moving and exporting segments and queues for operators.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

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
