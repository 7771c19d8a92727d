package queues

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
)

// globalBlockRefresh bounds how long a frontend serves a nickname or IP
// after it was blocked server-wide.
const globalBlockRefresh = 2 * time.Second

// globalBlockCache is a frontend's copy of the server-wide block list. The
// list lives in one global key, outside every project's slot, so the claim
// script cannot read it; the frontend looks the downloader and IP up here
// and passes the entry in. Block lists are small, so a full reload every
// few seconds costs little and needs no pub/sub.
type globalBlockCache struct {
	mu         sync.Mutex
	entries    map[string]string
	loadedAt   time.Time
	refreshing bool
}

// lookup answers from the cached list. When the copy is stale, one caller
// reloads it while the others keep answering from the old copy, so claims
// never queue up behind the reload. Only the very first load waits.
func (c *globalBlockCache) lookup(ctx context.Context, e *Engine, downloader, ip string) (string, error) {
	now := e.clock.Now()
	c.mu.Lock()
	stale := c.entries == nil || now.Sub(c.loadedAt) > globalBlockRefresh || now.Before(c.loadedAt)
	reload := stale && (c.entries == nil || !c.refreshing)
	if reload {
		c.refreshing = true
	}
	entries := c.entries
	c.mu.Unlock()
	if reload {
		fresh, err := e.rdb.HGetAll(ctx, GlobalBlockedKey).Result()
		c.mu.Lock()
		c.refreshing = false
		if err == nil {
			c.entries, c.loadedAt = fresh, now
			entries = fresh
		}
		c.mu.Unlock()
		if err != nil && entries == nil {
			return "", unavailable("queues.globalBlocks", err)
		}
	}
	if len(entries) == 0 {
		// Nobody is blocked everywhere (the usual case): no names to fold.
		return "", nil
	}
	for _, who := range []string{blockKey(downloader), downloader, blockKey(ip)} {
		if entry, ok := entries[who]; ok {
			return entry, nil
		}
	}
	return "", nil
}

// blockKey is how a block target is stored and looked up: nicknames are
// case-insensitive (Alice and alice are one warrior on the leaderboard's
// terms, and a block must not be dodged by changing case), and so are IPv6
// addresses' hex digits. The claim script folds case the same way.
func blockKey(who string) string { return strings.ToLower(who) }

// blockFields are the fields an unblock removes: the target as stored
// (an address in its canonical form), and the spellings stored before
// blocks ignored case or were canonical.
func blockFields(who string) []string {
	fields := []string{blockKey(who), who}
	if canonical, err := ValidateBlockTarget(who); err == nil && canonical != who {
		fields = append(fields, blockKey(canonical))
	}
	return fields
}

func (c *globalBlockCache) invalidate() {
	c.mu.Lock()
	c.entries = nil
	c.mu.Unlock()
}

// BlockGlobally blocks a nickname or IP in every project (except projects
// with ignore_global_blocks). Frontends see it within globalBlockRefresh.
func (e *Engine) BlockGlobally(ctx context.Context, who string, entry BlockEntry) error {
	const op = "queues.BlockGlobally"
	who, err := validateBlock(op, who, entry)
	if err != nil {
		return err
	}
	if entry.At.IsZero() {
		entry.At = e.clock.Now().UTC()
	}
	raw, _ := json.Marshal(entry)
	if err := e.rdb.HSet(ctx, GlobalBlockedKey, blockKey(who), raw).Err(); err != nil {
		return unavailable(op, err)
	}
	e.globalBlocks.invalidate()
	return nil
}

// UnblockGlobally lifts a server-wide block; it reports whether there was one.
func (e *Engine) UnblockGlobally(ctx context.Context, who string) (bool, error) {
	n, err := e.rdb.HDel(ctx, GlobalBlockedKey, blockFields(who)...).Result()
	if err != nil {
		return false, unavailable("queues.UnblockGlobally", err)
	}
	e.globalBlocks.invalidate()
	return n > 0, nil
}

// Blocks lists the block entries of a project ("" = the global list).
func (e *Engine) Blocks(ctx context.Context, slug string) (map[string]BlockEntry, error) {
	key := GlobalBlockedKey
	if slug != "" {
		if _, err := e.Project(ctx, slug); err != nil {
			return nil, err
		}
		key = BlockedKey(slug)
	}
	raw, err := e.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, unavailable("queues.Blocks", err)
	}
	out := make(map[string]BlockEntry, len(raw))
	for who, v := range raw {
		var entry BlockEntry
		_ = json.Unmarshal([]byte(v), &entry)
		out[who] = entry
	}
	return out, nil
}
