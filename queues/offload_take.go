package queues

// Taking: moving the tail of a queue into a segment file on disk.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
			[]string{source, staging, SegmentsKey(slug), OffloadKey(slug), QueuedKey(slug)},
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
	fps, err := o.writeSegment(ctx, tmp, staging, taken)
	if err != nil {
		// The items stay staged; recoverStaged puts them back once the
		// segment is older than the staged-segment window.
		return 0, fmt.Errorf("segment %s: %w", id, err)
	}
	// Touch: this segment is of interest right now.
	now := o.Engine.clock.Now()
	_ = os.Chtimes(tmp, now, now)
	archive := queue == "done"
	state, written := SegmentDisk, final
	var index []byte
	if archive {
		// An archive file takes its final name only once committed, so a
		// file under that name never needs a record.
		state, written = SegmentArchived, tmp
		err = syncDir(filepath.Dir(tmp))
	} else {
		// Still staged: were the commit lost, the file is an orphan.
		err = publishFile(tmp, final)
		index = buildSegmentIndex(fps)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("segment %s: %w", id, err)
	}
	ok, err := o.Engine.runScriptInt(ctx, "queues.offload", offloadCommitScript,
		[]string{staging, SegmentsKey(slug), SegmentIndexKey(slug, id)}, id, state, taken, index)
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
