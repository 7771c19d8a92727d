package queues

// Refilling: bringing segments back into their queue, and putting back
// the items of offloads that stopped before their commit.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

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
		keys := []string{ConfigKey(slug), SegmentsKey(slug), OffloadKey(slug), ClaimsKey(slug), DoneKey(slug), RecentDoneKey(slug),
			FailedKey(slug), QueuedKey(slug), StatsKey(slug), SegmentIndexKey(slug, seg.ID), QueueKey(slug, Queue(seg.Queue))}
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, Queue(seg.Queue), g.Name))
		}
		args := make([]any, 0, 5+2*len(items))
		args = append(args, seg.ID, state.version, state.filtersVersion, 0, seg.Queue)
		filtered := 0
		for _, item := range items {
			if state.filtered(item) {
				filtered++
				continue
			}
			args = append(args, item, groupFor(state.groups, item)+2)
		}
		args[3] = filtered
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
			[]string{StagingKey(slug, seg.ID), SegmentsKey(slug), OffloadKey(slug), target, QueuedKey(slug),
				ClaimsKey(slug), DoneKey(slug), RecentDoneKey(slug), FailedKey(slug)}, seg.ID, end)
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
