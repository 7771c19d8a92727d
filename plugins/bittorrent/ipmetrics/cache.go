package ipmetrics

import (
	"net/netip"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// pairCache remembers the (IP, torrent) pairs, and the IPs alone (a zero
// torrent), this frontend registered recently, so their repeats (a client
// announces every interval) cost no script. It is LRU-ish: two
// generations of at most size/2 entries; a hit in the old one moves to
// the new one, and when the new one is full the old one is dropped. Only
// the batcher goroutine uses it, so it has no lock.
//
// It is only a shortcut: a pair it forgot is registered again, which the
// script's markers make a no-op. An entry is trusted for ttl at most, less
// than the window, so it never hides a marker that expired.
type pairCache struct {
	half     int
	ttl      time.Duration
	cur, old map[pairKey]int64 // -> registered at (unix ns)
}

type pairKey struct {
	ip   [16]byte
	hash bittorrent.InfoHash
}

func newPairCache(size int, ttl time.Duration) *pairCache {
	half := size / 2
	return &pairCache{half: half, ttl: ttl, cur: make(map[pairKey]int64, half), old: map[pairKey]int64{}}
}

func keyOf(ip netip.Addr, hash bittorrent.InfoHash) pairKey {
	return pairKey{ip: ip.As16(), hash: hash}
}

// fresh tells whether the pair was registered less than ttl before now.
func (c *pairCache) fresh(ip netip.Addr, hash bittorrent.InfoHash, now time.Time) bool {
	if c.half == 0 {
		return false
	}
	k := keyOf(ip, hash)
	at, ok := c.cur[k]
	if !ok {
		if at, ok = c.old[k]; ok {
			delete(c.old, k)
			c.put(k, at)
		}
	}
	return ok && now.UnixNano()-at < int64(c.ttl)
}

func (c *pairCache) add(ip netip.Addr, hash bittorrent.InfoHash, now time.Time) {
	if c.half == 0 {
		return
	}
	c.put(keyOf(ip, hash), now.UnixNano())
}

func (c *pairCache) put(k pairKey, at int64) {
	if _, ok := c.cur[k]; !ok && len(c.cur) >= c.half {
		c.old, c.cur = c.cur, make(map[pairKey]int64, c.half)
	}
	c.cur[k] = at
}

func (c *pairCache) forget(ip netip.Addr, hash bittorrent.InfoHash) {
	k := keyOf(ip, hash)
	delete(c.cur, k)
	delete(c.old, k)
}

func (c *pairCache) len() int { return len(c.cur) + len(c.old) }
