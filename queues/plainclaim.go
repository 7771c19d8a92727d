package queues

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The plain claim (lua/claim_plain.lua) serves a request from todo with
// five KEYS and four commands, where claim.lua takes 28 KEYS, reads 21
// settings and probes eight usually absent keys on every call. What
// claim.lua would decide from those reads is decided here, from a copy of
// the project's settings the frontend keeps, and the script checks that the
// copy is current with one HMGET of config_version (which every writer of a
// setting or of a key the plain path cannot handle moves: config_write.lua,
// blocks, reservations, releases) and of has_extras and pop_check (which the
// build before writes without moving config_version). Anything the plain
// path cannot do it leaves to claim.lua, having changed nothing.
//
// A copy is also re-read when it is older than plainConfigRefresh: a
// frontend of the build before changes settings, blocks and reservations
// without moving config_version, so during a rolling upgrade a new frontend
// acts on such a change within that time (docs/warrior-path.md).
const plainConfigRefresh = time.Second

// plainCacheMax bounds the projects cached (slugs come from requests); when
// full the cache starts over. plainSetMax bounds a cached block list or
// reservation set: a project with more is served by claim.lua.
const (
	plainCacheMax = 1024
	plainSetMax   = 10_000
)

// plainConfig is one project's settings as the plain claim needs them.
type plainConfig struct {
	version string // config_version, "0" when absent
	plain   bool   // the project's settings and keys allow the plain claim
	// For a plain project:
	maxMulti    int64
	ttlMS       float64
	extra       string
	ignoreBlock bool                // ignore_global_blocks
	minVersion  string              // min_version, "" for none
	blocked     map[string]struct{} // the project's block targets
	reserved    map[string]struct{} // downloaders with a reserved queue
	loadedAt    time.Time
}

type plainCacheEntry struct {
	config  *plainConfig // nil: none loaded, or found stale
	loading bool
}

// plainConfigCache holds plainConfig per project.
type plainConfigCache struct {
	mu      sync.Mutex
	entries map[string]*plainCacheEntry
}

// get returns the project's copy, loading it when there is none or it is
// older than plainConfigRefresh. While one caller loads, the others use the
// copy they have (an old one only when it was not found stale) or nil, so no
// claim waits on another's load. nil means: use claim.lua.
func (c *plainConfigCache) get(ctx context.Context, e *Engine, slug string) *plainConfig {
	now := e.clock.Now()
	c.mu.Lock()
	entry := c.entries[slug]
	if entry == nil {
		if c.entries == nil || len(c.entries) >= plainCacheMax {
			c.entries = make(map[string]*plainCacheEntry)
		}
		entry = &plainCacheEntry{}
		c.entries[slug] = entry
	}
	cfg := entry.config
	fresh := cfg != nil && now.Sub(cfg.loadedAt) < plainConfigRefresh && !now.Before(cfg.loadedAt)
	if fresh || entry.loading {
		c.mu.Unlock()
		return cfg
	}
	entry.loading = true
	c.mu.Unlock()

	loaded, err := loadPlainConfig(ctx, e.rdb, slug, now)
	c.mu.Lock()
	entry.loading = false
	if err == nil {
		entry.config = loaded
	}
	c.mu.Unlock()
	if err != nil {
		// claim.lua reports what is wrong, if anything is.
		return nil
	}
	return loaded
}

// invalidate drops a copy that claim_plain.lua found stale.
func (c *plainConfigCache) invalidate(slug string, stale *plainConfig) {
	c.mu.Lock()
	if entry := c.entries[slug]; entry != nil && entry.config == stale {
		entry.config = nil
	}
	c.mu.Unlock()
}

// plainConfigFields are the config fields loadPlainConfig reads, in order.
var plainConfigFields = []string{
	"config_version", "created_at", "paused", "min_version",
	"rate_per_minute", "downloader_rate_per_minute", "ip_rate_per_minute",
	"downloader_budget", "claims_limit", "has_extras", "pop_check", "limit_groups",
	"reclaim_ttl_ms", "max_multi", "extra", "ignore_global_blocks",
}

// loadPlainConfig reads the settings and the keys that decide whether the
// project's claims can be plain, in one transaction (one consistent view).
func loadPlainConfig(ctx context.Context, rdb redis.UniversalClient, slug string, now time.Time) (*plainConfig, error) {
	pipe := rdb.TxPipeline()
	fieldsCmd := pipe.HMGet(ctx, ConfigKey(slug), plainConfigFields...)
	// Keys claim.lua handles and claim_plain.lua does not: a scored queue
	// (served before todo), released items (their claim count goes on), a
	// previous build's out (merged by claim.lua), limit groups' sub-queues.
	optionalCmd := pipe.Exists(ctx, QueueKey(slug, QueueScored), ReleasedKey(slug), LegacyOutKey(slug), GroupsKnownKey(slug))
	blockedCmd := pipe.HKeys(ctx, BlockedKey(slug))
	reservedCmd := pipe.SMembers(ctx, ReservedSetKey(slug))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	field := func(i int) (string, bool) {
		s, ok := fieldsCmd.Val()[i].(string)
		return s, ok
	}
	cfg := &plainConfig{version: "0", loadedAt: now}
	if v, ok := field(0); ok {
		cfg.version = v
	}
	_, exists := field(1)
	paused, _ := field(2)
	minVersion, _ := field(3)
	hasExtras, _ := field(9)
	popCheck, _ := field(10)
	groups, _ := field(11)
	cfg.minVersion = minVersion
	cfg.plain = exists && paused != "1" &&
		luaNumber(field(4)) == 0 && luaNumber(field(5)) == 0 && luaNumber(field(6)) == 0 &&
		luaNumber(field(7)) <= 0 && luaNumber(field(8)) == 0 &&
		hasExtras == "0" && popCheck == "0" && len(decodeGroups(groups)) == 0 &&
		optionalCmd.Val() == 0 && len(blockedCmd.Val()) <= plainSetMax && len(reservedCmd.Val()) <= plainSetMax
	if !cfg.plain {
		return cfg, nil
	}
	cfg.ttlMS = luaNumber(field(12))
	if cfg.ttlMS <= 0 {
		cfg.ttlMS = float64(DefaultReclaimTTL.Milliseconds())
	}
	cfg.maxMulti = int64(luaNumber(field(13)))
	cfg.extra = "{}"
	if extra, ok := field(14); ok {
		cfg.extra = extra
	}
	ignore, _ := field(15)
	cfg.ignoreBlock = ignore == "1"
	cfg.blocked = make(map[string]struct{}, len(blockedCmd.Val()))
	for _, who := range blockedCmd.Val() {
		cfg.blocked[who] = struct{}{}
	}
	cfg.reserved = make(map[string]struct{}, len(reservedCmd.Val()))
	for _, d := range reservedCmd.Val() {
		cfg.reserved[d] = struct{}{}
	}
	return cfg, nil
}

// luaNumber reads a config field as claim.lua's `tonumber(field or '0') or
// 0` does for the decimal numbers the settings write.
func luaNumber(s string, ok bool) float64 {
	if !ok {
		return 0
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0
	}
	return n
}

// serves reports whether this request can be plain: not if claim.lua
// would block it (a project block, or a global one the project does not
// ignore), refuse its version (or only claim.lua can tell: versionServed)
// or serve it a reserved queue first.
func (p *plainConfig) serves(downloader, ip, globalBlock, version string) bool {
	if !p.plain || (globalBlock != "" && !p.ignoreBlock) {
		return false
	}
	if p.minVersion != "" {
		if served, sure := versionServed(version, p.minVersion); !served || !sure {
			return false
		}
	}
	if _, ok := p.reserved[downloader]; ok {
		return false
	}
	if len(p.blocked) > 0 {
		for _, who := range []string{blockKey(downloader), downloader, blockKey(ip)} {
			if _, ok := p.blocked[who]; ok {
				return false
			}
		}
	}
	return true
}

// claimPlain runs claim_plain.lua for a request the copy says is plain.
// handled is false when claim.lua must serve it (nothing changed).
func (e *Engine) claimPlain(ctx context.Context, slug string, req ClaimRequest, ip string, cfg *plainConfig, now time.Time) (result ClaimResult, code int64, detail string, handled bool, err error) {
	const op = "queues.Claim"
	wanted := int64(req.Count)
	if cfg.maxMulti > 0 && wanted > cfg.maxMulti {
		wanted = cfg.maxMulti
	}
	ms := now.UnixMilli()
	// format_claim(1, now, downloader, ip, '-', '-') of the prelude, and
	// the deadline, cut from one string: one allocation per claim, not
	// three (the time's digits, the record, the deadline).
	var buf [128]byte
	b := append(buf[:0], "1 "...)
	b = strconv.AppendInt(b, ms, 10)
	b = append(b, ' ')
	b = append(b, req.Downloader...)
	b = append(b, ' ')
	b = append(b, ip...)
	b = append(b, " - -"...)
	cut := len(b)
	b = strconv.AppendFloat(b, float64(ms)+cfg.ttlMS, 'f', 0, 64)
	both := string(b)
	record, deadline := both[:cut], both[cut:]
	keys := plainKeys(e.warriorKeys.get(slug).plain, int(wanted))
	var reply any
	if wanted == 1 {
		// Coalesced with other one-item plain claims of the project that
		// arrive together (plainbatch.go); alone, claim_plain.lua.
		reply, err = e.plainBatches.do(plainCall{ctx: ctx, slug: slug, cfg: cfg, record: record, deadline: deadline, keys: keys})
		if err != nil {
			err = unavailable(op, err)
		}
	} else {
		reply, err = e.runScript(ctx, op, claimPlainScript, keys, cfg.version, wanted, record, deadline)
	}
	if err != nil {
		return ClaimResult{}, 0, "", true, err
	}
	// Items claimed come back as one string, the names joined by "\n"
	// (claim_plain.lua): one item as its name alone; an answer that is a
	// list starts with its code.
	if names, ok := reply.(string); ok {
		if wanted == 1 {
			return ClaimResult{ProjectExtra: []byte(cfg.extra), Items: []ClaimedItem{{Name: names}}}, 1, "", true, nil
		}
		items, err := splitClaimedNames(op, names, int(wanted))
		if err != nil {
			return ClaimResult{}, 0, "", true, err
		}
		return ClaimResult{ProjectExtra: []byte(cfg.extra), Items: items}, 1, "", true, nil
	}
	code, rest, err := scriptListReply(op, reply)
	if err != nil {
		return ClaimResult{}, 0, "", true, err
	}
	switch code {
	case codeStaleConfig:
		e.plainConfigs.invalidate(slug, cfg)
		return ClaimResult{}, code, "", false, nil
	case codeNotPlain:
		return ClaimResult{}, code, "", false, nil
	case codeCorrupt:
		if len(rest) > 0 {
			detail = replyString(rest[0])
		}
		return ClaimResult{}, code, detail, true, nil
	}
	return ClaimResult{}, code, "", true, unavailable(op, fmt.Errorf("plain claim script returned an unknown code %d", code))
}

// splitClaimedNames reads claim_plain.lua's answer for more than one item:
// the names joined by "\n" (no name holds one: ValidateItem). The names
// share the reply's bytes: one string read from Redis, not one per item.
// An answer of another count is a script bug, reported as unavailable;
// its items stay out and are reclaimed at their deadline.
func splitClaimedNames(op, names string, wanted int) ([]ClaimedItem, error) {
	items := make([]ClaimedItem, 0, wanted)
	for len(items) < wanted-1 {
		i := strings.IndexByte(names, '\n')
		if i < 0 {
			break
		}
		items = append(items, ClaimedItem{Name: names[:i]})
		names = names[i+1:]
	}
	items = append(items, ClaimedItem{Name: names})
	if len(items) != wanted || strings.IndexByte(names, '\n') >= 0 {
		return nil, unavailable(op, fmt.Errorf("plain claim script answered %d or more names, want %d", len(items), wanted))
	}
	return items, nil
}
