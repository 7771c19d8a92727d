package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// MinPasskeyLen is the shortest passkey AddUser registers and an announce
// may carry: Gazelle sites issue 32 characters, and with 62 symbols a
// guesser needs about 2^190 tries, so misses are not worth a lookup.
// Passkeys are at most maxNameLen characters.
const MinPasskeyLen = 32

// validPasskey says a passkey is one AddUser would register.
func validPasskey(passkey string) bool {
	return len(passkey) >= MinPasskeyLen && validName(passkey)
}

// passkeyRule is what a client or the admin API reads about a bad passkey.
var passkeyRule = fmt.Sprintf("%d-%d characters of A-Z a-z 0-9 _ -", MinPasskeyLen, maxNameLen)

// errMalformedPasskey refuses an announce or scrape whose passkey could
// never have been registered, without a lookup.
var errMalformedPasskey = &bittorrent.ClientError{Reason: "malformed passkey: a passkey is " + passkeyRule}

// userForPasskey resolves a passkey or refuses it with a ClientError:
// bittorrent.ErrUnknownPasskey when it is well formed and unknown, so the
// listeners can count misses per address.
func (s *Store) userForPasskey(ctx context.Context, passkey string) (string, error) {
	if passkey == "" {
		return "", &bittorrent.ClientError{Reason: "a passkey is required"}
	}
	if !validPasskey(passkey) {
		return "", errMalformedPasskey
	}
	userID, err := s.passkeys.lookup(ctx, s, passkey)
	if err != nil {
		return "", err
	}
	if userID == "" {
		return "", bittorrent.ErrUnknownPasskey
	}
	return userID, nil
}

// Bounds of the passkey cache, per generation (see generations): known
// passkeys, which a site has a bounded number of, and misses, which
// anyone can make up.
const (
	maxCachedPasskeys = 100_000
	maxCachedMisses   = 16_384
)

// passkeyCache is a frontend's copy of passkey lookups. Known passkeys
// and misses are kept apart, so a flood of made-up passkeys only turns
// over the misses and never evicts a user's passkey; each side is bounded
// by two generations, so reaching the bound drops the older half, never
// the whole cache. A stale entry is refreshed by the one caller that
// finds it stale while others keep using it, so a hot passkey never
// waits on Redis.
type passkeyCache struct {
	mu     sync.Mutex
	known  generations[*passkeyEntry]
	misses generations[*passkeyEntry]
}

func newPasskeyCache(known, misses int) passkeyCache {
	return passkeyCache{known: generations[*passkeyEntry]{limit: known}, misses: generations[*passkeyEntry]{limit: misses}}
}

type passkeyEntry struct {
	userID     string // "" when the passkey is unknown
	loadedAt   time.Time
	refreshing bool
}

func (c *passkeyCache) get(passkey string) *passkeyEntry {
	if e, ok := c.known.get(passkey); ok {
		return e
	}
	e, _ := c.misses.get(passkey)
	return e
}

func (c *passkeyCache) lookup(ctx context.Context, s *Store, passkey string) (string, error) {
	now := s.clock.Now()
	c.mu.Lock()
	entry := c.get(passkey)
	fresh := entry != nil && !now.Before(entry.loadedAt) && now.Sub(entry.loadedAt) <= s.cfg.CacheTTL
	if entry != nil && (fresh || entry.refreshing) {
		userID := entry.userID
		c.mu.Unlock()
		return userID, nil
	}
	if entry != nil {
		entry.refreshing = true
	}
	c.mu.Unlock()

	userID, err := s.rdb.Get(ctx, btstore.PasskeyKey(passkey)).Result()
	if errors.Is(err, redis.Nil) {
		userID, err = "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if entry != nil {
			// Keep answering from the old copy while Redis is unreachable.
			entry.refreshing = false
			return entry.userID, nil
		}
		return "", fmt.Errorf("swarm: passkey lookup: %w", err)
	}
	loaded := &passkeyEntry{userID: userID, loadedAt: now}
	if userID != "" {
		c.misses.delete(passkey)
		c.known.put(passkey, loaded)
	} else {
		c.known.delete(passkey)
		c.misses.put(passkey, loaded)
	}
	return userID, nil
}

func (c *passkeyCache) invalidate(passkey string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known.delete(passkey)
	c.misses.delete(passkey)
}

// clear drops every entry (hints may have been missed).
func (c *passkeyCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known = generations[*passkeyEntry]{limit: c.known.limit}
	c.misses = generations[*passkeyEntry]{limit: c.misses.limit}
}

// sizes are the cached known passkeys and misses (tests).
func (c *passkeyCache) sizes() (known, misses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known.len(), c.misses.len()
}

// generations is a map bounded to 2 x limit entries without an LRU's
// per-hit bookkeeping: new entries go into the current generation, and
// when it is full it becomes the old one, dropping the previous old one.
// A hit in the old generation moves the entry back to the current one,
// so entries in use survive turnovers. Not safe for concurrent use.
type generations[V any] struct {
	limit    int // per generation
	cur, old map[string]V
}

func (g *generations[V]) get(key string) (V, bool) {
	if v, ok := g.cur[key]; ok {
		return v, true
	}
	v, ok := g.old[key]
	if ok {
		delete(g.old, key)
		g.put(key, v)
	}
	return v, ok
}

func (g *generations[V]) put(key string, v V) {
	if _, ok := g.cur[key]; !ok && len(g.cur) >= g.limit {
		g.old, g.cur = g.cur, nil
	}
	if g.cur == nil {
		g.cur = make(map[string]V)
	}
	g.cur[key] = v
}

func (g *generations[V]) delete(key string) {
	delete(g.cur, key)
	delete(g.old, key)
}

func (g *generations[V]) len() int { return len(g.cur) + len(g.old) }
