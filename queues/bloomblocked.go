package queues

import (
	"math"
	"math/bits"
	"strconv"
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
)

// A blocked generation puts each item's bits in a few 32-bit words instead
// of k places across the whole string: the item picks `words` words of the
// generation independently, and sets `k` distinct bits in each. bloom_add.lua
// then reads an item's words with one BITFIELD_RO for the whole batch and
// writes each changed word once, so an item costs a few BITFIELD operations
// instead of the ~20 single-bit operations of a classic generation at 1e-6
// (one argument list per bit, each 0.7-1 µs inside Redis). The price is
// memory: a word holds the bits of several items, so it fills unevenly, and
// reaching the same false-positive rate takes more bits per item (43 at
// 1e-6 with 3 words, against 28.8 for a classic filter; see
// docs/warrior-api.md).

// blockedWordBits is the width of a blocked generation's words: BITFIELD
// i32 values, which Redis's Lua (numbers are doubles, bit ops 32-bit)
// reads and ORs exactly.
const blockedWordBits = 32

// blockedMaxMemory is how much more memory than a classic filter of the
// same rate a blocked shape may take before it spends another word per item,
// when the project leaves bloom_words automatic. A word costs Redis about 8k
// instructions per new item (its read and write in the batch's BITFIELDs,
// its reference, its AOF bytes: 84.0k per new item with 3 words, 64.7k
// with 2, callgrind, docs/warrior-api.md), but the filter stays after its
// items are done, and Redis's memory is what a large project runs out of:
// at the default 1e-6 the automatic choice stays three words (1.47x a
// classic filter's bits, 5.3 bytes per item) over two (2.30x, 8.3 bytes);
// a project that would rather pay memory than CPU sets bloom_words 2.
const blockedMaxMemory = 1.5

// blockedWordChoices are the words per item a blocked shape may use: fewer
// cost less per item, more take less memory at a given rate. bloom_words
// names one of them, or 0 for the automatic choice.
var blockedWordChoices = []uint{2, 3, 4}

// MinBloomWords and MaxBloomWords bound the bloom_words setting (0 =
// automatic).
const (
	MinBloomWords = 2
	MaxBloomWords = 4
)

// blockedFalsePositive is the false-positive rate of a blocked generation
// of `total` words holding n items, each setting k distinct bits in each of
// `per` words chosen independently. A word is chosen by j other items, j
// Poisson with mean n*per/total; given j, the chance that k given distinct
// bits are all set is, by inclusion-exclusion over the bits left clear,
// sum_i (-1)^i C(k,i) (C(32-i,k)/C(32,k))^j. An item is a false positive
// when all its words say so.
func blockedFalsePositive(n float64, total uint64, per, k uint) float64 {
	lambda := n * float64(per) / float64(total)
	if lambda > 50 {
		// Words this crowded are nearly full (and exp(-lambda) heads for
		// underflow): no use as a filter.
		return 1
	}
	// clear[i]: the chance one item leaves i given bits all clear.
	clear := make([]float64, k+1)
	binom := make([]float64, k+1)
	for i := uint(0); i <= k; i++ {
		clear[i] = math.Exp(lchoose(blockedWordBits-i, k) - lchoose(blockedWordBits, k))
		binom[i] = math.Exp(lchoose(k, i))
	}
	word := 0.0
	weight := math.Exp(-lambda) // Poisson(j = 0)
	for j := 0; ; j++ {
		if j > 0 {
			weight *= lambda / float64(j)
		}
		if j > 0 {
			all := 0.0
			for i := uint(0); i <= k; i++ {
				term := binom[i] * math.Pow(clear[i], float64(j))
				if i%2 == 1 {
					term = -term
				}
				all += term
			}
			word += weight * max(0, all)
		}
		if float64(j) > lambda && weight < 1e-20 {
			break
		}
	}
	return math.Pow(word, float64(per))
}

func lchoose(n, r uint) float64 {
	if r > n {
		return math.Inf(-1)
	}
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(r + 1))
	c, _ := math.Lgamma(float64(n - r + 1))
	return a - b - c
}

// blockedShapeFor returns the smallest blocked shape (in bits) with `per`
// words per item that holds capacity items at false-positive rate fp.
func blockedShapeFor(capacity int, fp float64, per uint) bloomShape {
	best := bloomShape{}
	for k := uint(1); k <= 16; k++ {
		// The fewest words at which this k reaches fp: fp falls as words grow.
		lo, hi := uint64(1), uint64(1)
		for blockedFalsePositive(float64(capacity), hi, per, k) > fp {
			lo = hi + 1
			hi *= 2
			if hi > 1<<40 {
				break
			}
		}
		if hi > 1<<40 {
			continue
		}
		for lo < hi {
			mid := lo + (hi-lo)/2
			if blockedFalsePositive(float64(capacity), mid, per, k) <= fp {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if m := hi * blockedWordBits; best.m == 0 || m < uint64(best.m) {
			best = bloomShape{m: uint(m), k: k, capacity: capacity, words: per}
		}
	}
	return best
}

var blockedShapes sync.Map // blockedKey -> bloomShape

type blockedKey struct {
	capacity int
	fp       float64
	words    uint
}

// newBlockedShape sizes a blocked generation for capacity items at rate fp
// with `words` words per item, or, with words 0, the fewest words per item
// whose memory is within blockedMaxMemory of a classic filter's and whose
// string Redis can hold; failing that, the smallest. Computed once per
// (capacity, fp, words).
func newBlockedShape(capacity int, fp float64, words uint) bloomShape {
	key := blockedKey{capacity, fp, words}
	if shape, ok := blockedShapes.Load(key); ok {
		return shape.(bloomShape)
	}
	if words > 0 {
		shape := blockedShapeFor(capacity, fp, words)
		blockedShapes.Store(key, shape)
		return shape
	}
	classic, _ := BloomParameters(capacity, fp)
	var chosen bloomShape
	for _, per := range blockedWordChoices {
		shape := blockedShapeFor(capacity, fp, per)
		if shape.m == 0 {
			continue
		}
		if chosen.m == 0 || shape.m < chosen.m {
			chosen = shape
		}
		if float64(shape.m) <= blockedMaxMemory*float64(classic) && uint64(shape.m) <= MaxBloomGenerationBits {
			chosen = shape
			break
		}
	}
	blockedShapes.Store(key, chosen)
	return chosen
}

// blockedWords calls fn with each of an item's words in a blocked
// generation: the word's index (in units of i32) and the mask of its k bits.
// The words and bits come from a splitmix64 stream seeded by the item's
// 128-bit murmur3 hash (bits-and-blooms/bloom/v3), so every frontend
// computes the same.
func blockedWords(item string, s bloomShape, fn func(word uint64, mask uint32)) {
	h := bloom.Locations([]byte(item), 2)
	state := h[0] ^ bits.RotateLeft64(h[1], 31)
	next := func() uint64 {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	total := uint64(s.m) / blockedWordBits
	for range s.words {
		word, _ := bits.Mul64(next(), total)
		var mask uint32
		for set := uint(0); set < s.k; {
			r := next()
			for chunk := 0; chunk < 12 && set < s.k; chunk++ {
				bit := uint32(1) << (r & 31)
				r >>= 5
				if mask&bit == 0 {
					mask |= bit
					set++
				}
			}
		}
		fn(word, mask)
	}
}

// blockedBatch collects one blocked generation's words for a batch: each
// distinct word once, in first-seen order, so bloom_add.lua reads them with
// one BITFIELD_RO whose reply it indexes directly, and an item names its
// words by their place in that list instead of by offset strings Lua
// would hash, and its masks as bytes instead of decimal text Lua would
// parse (tonumber costs two strtod calls; string.byte none).
type blockedBatch struct {
	shape bloomShape
	index map[uint64]int
	words []uint64
}

func newBlockedBatch(shape bloomShape, items int) *blockedBatch {
	return &blockedBatch{shape: shape, index: make(map[uint64]int, items*int(shape.words)), words: make([]uint64, 0, items*int(shape.words))}
}

// blockedWordRef is the size of an item's reference to one word in
// bloom_add.lua's argument: the word's 1-based place in the batch's list
// (2 bytes, big-endian: a batch has at most MaxBloomBatch items of at most
// 8 words), then its mask (4 bytes, big-endian).
const blockedWordRef = 6

// item returns an item's argument: blockedWordRef bytes for each of its words.
func (b *blockedBatch) item(item string) string {
	ref := make([]byte, 0, blockedWordRef*int(b.shape.words))
	blockedWords(item, b.shape, func(word uint64, mask uint32) {
		place, ok := b.index[word]
		if !ok {
			b.words = append(b.words, word)
			place = len(b.words)
			b.index[word] = place
		}
		ref = append(ref, byte(place>>8), byte(place), byte(mask>>24), byte(mask>>16), byte(mask>>8), byte(mask))
	})
	return string(ref)
}

// appendWords appends the batch's word list as bloom_add.lua reads it: the
// count, then each word's BITFIELD offset. (The script adds each GET's
// "GET" and "i32": an argument costs Redis ~900 instructions to parse and
// hand to Lua, a table entry built in Lua a tenth of that.)
func (b *blockedBatch) appendWords(args []any) []any {
	args = append(args, len(b.words))
	for _, word := range b.words {
		args = append(args, "#"+strconv.FormatUint(word, 10))
	}
	return args
}
