package server

import (
	"math"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// failureLimiter bounds the wrong tokens one address may try: each
// address has a bucket of FailureBurst tries that refills one try every
// FailureRefill; an address whose bucket is empty is refused (429) before
// its token is even looked at. Right tokens cost nothing, so an operator
// is only slowed after a burst of mistakes. An IPv6 /64 counts as one
// address, as one host holds a whole /64. Per frontend, in memory: a
// guesser spread over N frontends gets N buckets, still far from
// guessing a 256-bit token.
type failureLimiter struct {
	now    func() time.Time
	burst  float64
	refill time.Duration

	mu      sync.Mutex
	buckets map[netip.Prefix]*failureBucket
}

type failureBucket struct {
	tries float64
	at    time.Time
}

// Defaults of the sign-in limit.
const (
	FailureBurst  = 10
	FailureRefill = 30 * time.Second
	// maxFailureBuckets bounds the memory: past it, buckets that have
	// refilled are dropped (they are the same as no bucket).
	maxFailureBuckets = 100_000
)

func newFailureLimiter(now func() time.Time) *failureLimiter {
	return &failureLimiter{now: now, burst: FailureBurst, refill: FailureRefill, buckets: map[netip.Prefix]*failureBucket{}}
}

func failureKey(addr string) netip.Prefix {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// level refills b up to now and returns its tries.
func (l *failureLimiter) level(b *failureBucket, now time.Time) float64 {
	b.tries = math.Min(l.burst, b.tries+float64(now.Sub(b.at))/float64(l.refill))
	b.at = now
	return b.tries
}

// blocked says how long addr must wait before its next try (0: it may).
func (l *failureLimiter) blocked(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[failureKey(addr)]
	if !ok {
		return 0
	}
	if tries := l.level(b, l.now()); tries < 1 {
		return time.Duration((1 - tries) * float64(l.refill))
	}
	return 0
}

// fail takes one try from addr's bucket.
func (l *failureLimiter) fail(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key, now := failureKey(addr), l.now()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxFailureBuckets {
			for k, old := range l.buckets {
				if l.level(old, now) >= l.burst {
					delete(l.buckets, k)
				}
			}
			// Still full (a guesser on very many addresses): forget one
			// at random rather than grow without bound.
			for k := range l.buckets {
				if len(l.buckets) < maxFailureBuckets {
					break
				}
				delete(l.buckets, k)
			}
		}
		b = &failureBucket{tries: l.burst, at: now}
		l.buckets[key] = b
	}
	l.level(b, now)
	b.tries = math.Max(0, b.tries-1)
}

func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
