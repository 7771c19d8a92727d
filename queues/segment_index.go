package queues

// Segment indexes: which items an on-disk segment holds, kept in Redis so
// any frontend can answer "is this item offloaded?" without the segment
// file (which is on the disk of the frontend that wrote it).
//
// An index is one STRING per segment (SegmentIndexKey), written by
// offload_commit.lua in the step that marks the segment on disk and
// deleted by refill.lua in the step that forgets it, so it exists exactly
// while the segment's items are on disk. It holds each item's fingerprint
// (the first 8 bytes of its SHA-256, big-endian), sorted, after a fanout
// table: for the 2^b buckets of the fingerprints' top b bits, the number
// of fingerprints in that bucket or an earlier one (uint32, big-endian).
// b is chosen from the segment's item count (segmentIndexBits) so a bucket
// holds about 16 fingerprints; the header costs a quarter byte per item,
// the fingerprints 8. A look-up is two GETRANGEs per segment (the bucket's
// bounds, then the bucket), pipelined over every segment: two round trips
// and about 150 bytes per segment, whatever the segment's size.
//
// Fingerprints make "offloaded" exact but for a 64-bit collision: a never
// queued item reads offloaded with a chance of (items on disk) / 2^64 per
// look-up, about 5e-12 with 100 million items offloaded.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// segmentBucketTarget is about how many fingerprints one fanout bucket
// holds.
const segmentBucketTarget = 16

// itemFingerprint is the item's fingerprint in segment indexes.
func itemFingerprint(item string) uint64 {
	sum := sha256.Sum256([]byte(item))
	return binary.BigEndian.Uint64(sum[:8])
}

// segmentIndexBits is the fanout's b for a segment of count items: the
// smallest b (at most 16) that leaves about segmentBucketTarget
// fingerprints per bucket. It is derived from the count in the segment's
// record, so the index needs no header of its own.
func segmentIndexBits(count int64) int {
	b := 0
	for b < 16 && count>>b > segmentBucketTarget {
		b++
	}
	return b
}

// buildSegmentIndex makes a segment's index from its items' fingerprints
// (in any order; fps is sorted in place).
func buildSegmentIndex(fps []uint64) []byte {
	slices.Sort(fps)
	b := segmentIndexBits(int64(len(fps)))
	buckets := 1 << b
	out := make([]byte, 4*buckets+8*len(fps))
	next := 0
	for bucket := range buckets {
		for next < len(fps) && fingerprintBucket(fps[next], b) == bucket {
			next++
		}
		binary.BigEndian.PutUint32(out[4*bucket:], uint32(next))
	}
	body := out[4*buckets:]
	for i, fp := range fps {
		binary.BigEndian.PutUint64(body[8*i:], fp)
	}
	return out
}

func fingerprintBucket(fp uint64, bits int) int {
	if bits == 0 {
		return 0
	}
	return int(fp >> (64 - bits))
}

// offloadedLookup is what searching a project's segments found.
type offloadedLookup struct {
	found bool
	// unindexed counts the on-disk segments without an index (written
	// before indexes existed, and not yet indexed by their frontend):
	// the item may be in one of them.
	unindexed int
}

// lookUpOffloaded searches the segments of one snapshot of the segments
// hash for item: staged segments by LPOS on their staging list (bounded by
// the segment size, and staged segments are few and short-lived), on-disk
// ones by their index. stable says whether the segments hash was still the
// same afterwards; if not, an item may have moved between Redis and a
// segment meanwhile and the caller asks again.
func (e *Engine) lookUpOffloaded(ctx context.Context, slug, item string, records map[string]string) (offloadedLookup, bool, error) {
	var res offloadedLookup
	fp := itemFingerprint(item)
	type indexed struct {
		id     string
		bits   int
		count  int64
		bounds *redis.StringCmd
		bucket *redis.StringCmd
	}
	var disk []*indexed
	pipe := e.rdb.Pipeline()
	var staged []*redis.IntCmd
	ids := slices.Sorted(maps.Keys(records))
	slices.Reverse(ids) // newest first: a recent segment is the likelier answer
	for _, id := range ids {
		seg, err := parseSegment(id, records[id])
		if err != nil || seg.Queue == "done" {
			continue
		}
		switch seg.State {
		case SegmentStaging:
			staged = append(staged, pipe.LPos(ctx, StagingKey(slug, id), item, redis.LPosArgs{}))
		case SegmentDisk:
			x := &indexed{id: id, bits: segmentIndexBits(seg.Count), count: seg.Count}
			bucket := fingerprintBucket(fp, x.bits)
			from := int64(4 * (bucket - 1))
			if bucket == 0 {
				from = 0
			}
			x.bounds = pipe.GetRange(ctx, SegmentIndexKey(slug, id), from, int64(4*bucket+3))
			disk = append(disk, x)
		}
	}
	if len(staged)+len(disk) == 0 {
		return res, true, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return res, false, err
	}
	for _, c := range staged {
		if c.Err() == nil {
			res.found = true
		}
	}
	pipe = e.rdb.Pipeline()
	var asked bool
	for _, x := range disk {
		raw := []byte(x.bounds.Val())
		bucket := fingerprintBucket(fp, x.bits)
		var start, stop uint32
		switch {
		case bucket == 0 && len(raw) == 4:
			stop = binary.BigEndian.Uint32(raw)
		case bucket > 0 && len(raw) == 8:
			start, stop = binary.BigEndian.Uint32(raw), binary.BigEndian.Uint32(raw[4:])
		default:
			res.unindexed++ // no index (or a damaged one): can't say
			continue
		}
		if stop <= start || int64(stop) > x.count {
			continue // an empty bucket: not in this segment
		}
		header := int64(4 << x.bits)
		x.bucket = pipe.GetRange(ctx, SegmentIndexKey(slug, x.id), header+8*int64(start), header+8*int64(stop)-1)
		asked = true
	}
	// The snapshot check rides in the same round trip.
	after := pipe.HGetAll(ctx, SegmentsKey(slug))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return res, false, err
	}
	if asked {
		for _, x := range disk {
			if x.bucket == nil {
				continue
			}
			raw := []byte(x.bucket.Val())
			for i := 0; i+8 <= len(raw); i += 8 {
				if binary.BigEndian.Uint64(raw[i:]) == fp {
					res.found = true
				}
			}
		}
	}
	return res, maps.Equal(records, after.Val()), nil
}

// indexSegments writes the missing indexes of this frontend's on-disk
// segments (those written before indexes existed), a few per pass, each
// checked once per process. It reads each segment file whole, as a refill
// would.
func (o *Offloader) indexSegments(ctx context.Context, slug string, segments []Segment) error {
	const perPass = 4
	var errs []error
	done := 0
	for _, seg := range segments {
		if done >= perPass {
			break
		}
		if seg.State != SegmentDisk || seg.Queue == "done" || !o.ownsFile(slug, seg) {
			continue
		}
		key := slug + "/" + seg.ID
		o.mu.Lock()
		checked := o.indexed[key]
		o.mu.Unlock()
		if checked {
			continue
		}
		n, err := o.Engine.rdb.Exists(ctx, SegmentIndexKey(slug, seg.ID)).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			done++
			if err := o.indexSegment(ctx, slug, seg); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		o.mu.Lock()
		if o.indexed == nil {
			o.indexed = map[string]bool{}
		}
		o.indexed[key] = true
		o.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (o *Offloader) indexSegment(ctx context.Context, slug string, seg Segment) error {
	items, err := readSegment(o.segmentPath(slug, seg))
	if err != nil {
		return err
	}
	if int64(len(items)) != seg.Count {
		return errors.New("segment " + seg.ID + ": the file's item count differs from its record; not indexed")
	}
	fps := make([]uint64, len(items))
	for i, item := range items {
		fps[i] = itemFingerprint(item)
	}
	_, err = o.Engine.runScriptInt(ctx, "queues.indexSegment", segmentIndexScript,
		[]string{SegmentsKey(slug), SegmentIndexKey(slug, seg.ID)}, seg.ID, seg.Count, buildSegmentIndex(fps))
	return err
}

// forgetIndexed drops what indexSegments remembers of a project's
// segments that are gone, so the memo stays as small as the segments.
func (o *Offloader) forgetIndexed(slug string, segments []Segment) {
	live := make(map[string]bool, len(segments))
	for _, seg := range segments {
		live[slug+"/"+seg.ID] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for key := range o.indexed {
		if strings.HasPrefix(key, slug+"/") && !live[key] {
			delete(o.indexed, key)
		}
	}
}
