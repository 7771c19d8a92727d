package bittorrent

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// GuardConfig sets what one address may cost this frontend. An address is
// an IPv4 address or an IPv6 /64 (one subscriber's network: a host that
// rotates through its /64 is still one address). The limits are per
// frontend: with N frontends behind a load balancer an address may reach
// N times them.
type GuardConfig struct {
	// AnnounceRate is the sustained announces per second one address may
	// make (default 5), AnnounceBurst how many it may make at once
	// (default 500): a token bucket. A client re-announces each torrent
	// once an interval (30m), so 5/s is 9,000 torrents per address and
	// interval, and the burst lets a client start hundreds of torrents
	// at once. Negative AnnounceRate turns the limit off.
	AnnounceRate  float64
	AnnounceBurst int
	// PasskeyMisses is how many different unknown passkeys one address
	// may present per PasskeyMissWindow (default 10 per 10m) before its
	// announces and scrapes with a passkey are refused without a lookup
	// until the window ends. The same unknown passkey again does not
	// count, so a client left with a revoked passkey does not lock out the
	// others behind its address. Negative turns the limit off.
	PasskeyMisses     int
	PasskeyMissWindow time.Duration
	// MaxAddresses bounds the addresses tracked (default 131,072, about
	// 15 MB, BenchmarkGuardMemory): past it the least recently seen half
	// is forgotten, and a forgotten address starts afresh.
	MaxAddresses int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Guard defaults.
const (
	DefaultAnnounceRate      = 5
	DefaultAnnounceBurst     = 500
	DefaultPasskeyMisses     = 10
	DefaultPasskeyMissWindow = 10 * time.Minute
	DefaultGuardAddresses    = 1 << 17
)

// Refusals by the guard, as clients read them.
var (
	errRateLimited   = &ClientError{Reason: "too many announces from your address: announce less often and try again later"}
	errPasskeyMisses = &ClientError{Reason: "too many unknown passkeys from your address: try again later"}
)

// guardShards spreads addresses over locks, so the listeners' workers
// rarely wait on each other.
const guardShards = 64

// Guard limits announces and passkey misses per address, in memory and
// without a Redis round trip, for the listeners of one frontend (share
// one Guard between its HTTP and UDP listeners). It is safe for
// concurrent use.
type Guard struct {
	cfg    GuardConfig
	seed   maphash.Seed
	shards [guardShards]guardShard
}

type guardShard struct {
	mu       sync.Mutex
	limit    int // entries per generation
	cur, old map[guardAddr]*addrState
}

// guardAddr is an address as the guard keys it: 16 bytes hash and compare
// faster than a netip.Addr.
type guardAddr [16]byte

// addrState is what the guard knows of one address.
type addrState struct {
	tokens   float64
	refilled int64 // unix ns of the last refill
	// Passkey misses in the window that began at missesFrom (unix ns);
	// lastMiss is the hash of the last unknown passkey counted.
	misses     int
	missesFrom int64
	lastMiss   uint64
}

// NewGuard checks cfg and fills in its defaults.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	if cfg.AnnounceRate == 0 {
		cfg.AnnounceRate = DefaultAnnounceRate
	}
	if cfg.AnnounceBurst < 0 {
		return nil, fmt.Errorf("bittorrent guard: AnnounceBurst must not be negative, got %d", cfg.AnnounceBurst)
	}
	if cfg.AnnounceBurst == 0 {
		cfg.AnnounceBurst = DefaultAnnounceBurst
	}
	if cfg.PasskeyMisses == 0 {
		cfg.PasskeyMisses = DefaultPasskeyMisses
	}
	if cfg.PasskeyMissWindow < 0 {
		return nil, errors.New("bittorrent guard: PasskeyMissWindow must not be negative")
	}
	if cfg.PasskeyMissWindow == 0 {
		cfg.PasskeyMissWindow = DefaultPasskeyMissWindow
	}
	if cfg.MaxAddresses < 0 {
		return nil, fmt.Errorf("bittorrent guard: MaxAddresses must not be negative, got %d", cfg.MaxAddresses)
	}
	if cfg.MaxAddresses == 0 {
		cfg.MaxAddresses = DefaultGuardAddresses
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Guard{cfg: cfg, seed: maphash.MakeSeed()}
	// Two generations per shard hold MaxAddresses in all.
	perGeneration := max(1, cfg.MaxAddresses/(2*guardShards))
	for i := range g.shards {
		g.shards[i].limit = perGeneration
	}
	return g, nil
}

// Config returns the guard's configuration with defaults filled in.
func (g *Guard) Config() GuardConfig { return g.cfg }

// guardKey is the address the limits apply to: an IPv6 address's /64,
// an IPv4 address (mapped or not) as its IPv4-mapped form.
func guardKey(ip netip.Addr) guardAddr {
	key := guardAddr(ip.Unmap().As16())
	if !ip.Unmap().Is4() {
		clear(key[8:])
	}
	return key
}

func (g *Guard) shard(key guardAddr) *guardShard {
	return &g.shards[maphash.Comparable(g.seed, key)%guardShards]
}

// get returns the address's state, nil when it has none, moving it to the
// current generation (where the caller may change it in place). The
// caller holds s.mu.
func (s *guardShard) get(key guardAddr) *addrState {
	if st := s.cur[key]; st != nil {
		return st
	}
	st := s.old[key]
	if st != nil {
		delete(s.old, key)
		s.put(key, st)
	}
	return st
}

// put adds an address; when the current generation is full it becomes
// the old one and the previous old one is dropped. The caller holds s.mu.
func (s *guardShard) put(key guardAddr, st *addrState) {
	if len(s.cur) >= s.limit {
		s.old, s.cur = s.cur, nil
	}
	if s.cur == nil {
		s.cur = make(map[guardAddr]*addrState, s.limit)
	}
	s.cur[key] = st
}

// allowAnnounce takes one token of the address's bucket; false means the
// announce is refused.
func (g *Guard) allowAnnounce(ip netip.Addr) bool {
	if g == nil || g.cfg.AnnounceRate < 0 {
		return true
	}
	key := guardKey(ip)
	now := g.cfg.Now().UnixNano()
	burst := float64(g.cfg.AnnounceBurst)
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(key)
	if st == nil {
		st = &addrState{tokens: burst, refilled: now}
		s.put(key, st)
	} else if elapsed := now - st.refilled; elapsed > 0 {
		// A clock that went back refills nothing.
		st.tokens = min(burst, st.tokens+g.cfg.AnnounceRate*float64(elapsed)/float64(time.Second))
		st.refilled = now
	}
	allowed := st.tokens >= 1
	if allowed {
		st.tokens--
	}
	return allowed
}

// passkeyBlocked says the address presented too many unknown passkeys in
// its window: its requests with a passkey are refused unread.
func (g *Guard) passkeyBlocked(ip netip.Addr) bool {
	if g == nil || g.cfg.PasskeyMisses < 0 {
		return false
	}
	key := guardKey(ip)
	now := g.cfg.Now().UnixNano()
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.cur[key]
	if st == nil {
		st = s.old[key]
	}
	return st != nil && st.misses >= g.cfg.PasskeyMisses && now-st.missesFrom < int64(g.cfg.PasskeyMissWindow)
}

// passkeyMiss counts an unknown passkey the address presented, unless it
// is the one it presented last.
func (g *Guard) passkeyMiss(ip netip.Addr, passkey string) {
	if g == nil || g.cfg.PasskeyMisses < 0 {
		return
	}
	key := guardKey(ip)
	now := g.cfg.Now().UnixNano()
	h := maphash.String(g.seed, passkey)
	s := g.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(key)
	if st == nil {
		st = &addrState{tokens: float64(g.cfg.AnnounceBurst), refilled: now}
		s.put(key, st)
	}
	if st.misses == 0 || now-st.missesFrom >= int64(g.cfg.PasskeyMissWindow) || now < st.missesFrom {
		st.misses, st.missesFrom, st.lastMiss = 1, now, h
	} else if h != st.lastMiss {
		st.misses++
		st.lastMiss = h
	}
}

// tracked is how many addresses the guard holds (tests).
func (g *Guard) tracked() int {
	n := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.old)
		s.mu.Unlock()
	}
	return n
}
