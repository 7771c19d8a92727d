package btloadgen

import (
	"math/bits"
	"time"
)

// histogram records durations in log-linear buckets: 32 per power of two,
// so quantiles are within about 3% at any scale, in fixed memory.
type histogram struct {
	counts [32 + 59*32]uint64
	total  uint64
	maxNS  uint64
}

const subBuckets = 32

func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	shift := bits.Len64(ns) - 6 // keep the top 6 bits: 32..63
	return subBuckets + shift*subBuckets + int(ns>>shift) - subBuckets
}

// bucketValue is a representative (middle) value of bucket i.
func bucketValue(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	shift := (i - subBuckets) / subBuckets
	mantissa := uint64((i-subBuckets)%subBuckets + subBuckets)
	return mantissa<<shift + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	ns := uint64(max(d, 0))
	h.counts[bucketOf(ns)]++
	h.total++
	h.maxNS = max(h.maxNS, ns)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.maxNS = max(h.maxNS, o.maxNS)
}

// quantile returns the q-quantile (0..1), 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketValue(i), h.maxNS))
		}
	}
	return time.Duration(h.maxNS)
}

func (h *histogram) max() time.Duration { return time.Duration(h.maxNS) }
