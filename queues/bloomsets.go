package queues

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/bits-and-blooms/bloom/v3"
)

// A "sets" generation (bloom_kind sets) is not a Bloom filter: it keeps a
// 32-bit fingerprint of each item in one of B small Redis sets, the
// generation's buckets. bloom_add.lua adds an item with one SADD of three
// arguments, which answers whether the fingerprint was new, instead of
// reading and writing a blocked generation's words with BITFIELD (a read
// and a write per word, and the write's four arguments again in the AOF:
// ~10k Redis instructions a word, docs/warrior-api.md "Backfeed (s43)").
// A bucket stays below Redis's set-max-intset-entries (512), so Redis
// keeps it as an intset, 4 bytes per member.
//
// An item is a false positive when another item of its bucket has its
// fingerprint: with f items in a bucket that is f/2^32, so the bucket's
// fill at capacity is what sets the rate (setsBucketFill).

// BloomKindBlocked and BloomKindSets are bloom_kind's values: the kind of filter
// generation a project starts from now on.
const (
	BloomKindBlocked = "blocked"
	BloomKindSets    = "sets"
)

// setsMaxFill is the most items a bucket holds on average when its
// generation is full. Buckets fill unevenly (Poisson: at a mean of 320
// one in a million buckets passes ~410), and all must stay under Redis's
// set-max-intset-entries (512) to stay intsets; a bucket that passes it
// turns into a hashtable, correct but ~10x the memory. 320 gives a
// false-positive rate of at most 320/2^32 = 7.5e-8 for an item tested
// against a full generation. Fuller buckets save little memory: a key
// costs ~70 bytes besides its members (38 bits per item at 244-400 items a
// bucket, measured over 1M items).
const setsMaxFill = 320

// setsMinFill is the least: a fuller filter's rate below
// setsMinFill/2^32 (~7.5e-9) would take a key per few items.
const setsMinFill = 32

// setsGenerationCost is a sets generation's cost in bloomScriptBudget's
// units: an item's SISMEMBER (or its SADD in the newest generation) costs
// Redis ~5-8k instructions against a blocked word's ~10k at
// blockedWordCost 8; a new item in one sets generation costs 27.4k in
// all, against 80.5k for the default blocked shape (callgrind,
// docs/warrior-api.md "Backfeed (s44)"). 2 lets a call take 204 items of
// a single sets generation, which held Redis 435 µs a call side by side
// with the blocked shape's 376 µs for 64.
const setsGenerationCost = 2

// newSetsShape sizes a sets generation for capacity items at
// false-positive rate fp: enough buckets that a bucket holds fp*2^32
// items at most (and setsMaxFill), refusing a rate its 32-bit
// fingerprints cannot reach without a key per few items.
func newSetsShape(capacity int, fp float64) (bloomShape, error) {
	fill := math.Min(setsMaxFill, math.Floor(fp*(1<<32)))
	if fill < setsMinFill {
		return bloomShape{}, fmt.Errorf("bloom_kind sets reaches false-positive rates down to %.2g (32-bit fingerprints in sets of at least %d); %g needs bloom_kind blocked",
			setsMinFill/float64(1<<32), setsMinFill, fp)
	}
	buckets := uint64(math.Ceil(float64(capacity) / fill))
	return bloomShape{capacity: capacity, buckets: buckets}, nil
}

// setsHash is an item's fingerprint for every sets generation: its 128-bit
// murmur3 hash (bits-and-blooms/bloom/v3, as every frontend computes it),
// whose first half picks the bucket (setsBucket) and whose second half's
// low 32 bits are the member, as a signed decimal so Redis stores it as an
// intset entry of 4 bytes. The member is the same in every generation; the
// bucket depends on the generation's bucket count.
func setsHash(item string) (high uint64, member string) {
	h := bloom.Locations([]byte(item), 2)
	return h[0], strconv.FormatInt(int64(int32(uint32(h[1]))), 10)
}

// setsBucket is the bucket (0 to buckets-1) of an item whose setsHash
// first half is high.
func setsBucket(high, buckets uint64) uint64 {
	bucket, _ := bits.Mul64(high, buckets)
	return bucket
}
