package queues

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The warrior path's statistics are counted in the frontend and added to
// Redis once a second (lua/counters_flush.lua), one script call per
// project, instead of a dozen HINCRBYs inside every claim and done. What
// this costs: a frontend that dies loses at most the last second of these
// counters (requests, items and bytes done, the leaderboard's per-downloader
// figures, the charts' series), never an item: items move only inside
// claim.lua and done.lua. A frontend that stops cleanly flushes first
// (FlushCounters), and the engine's own reads (Stats, Charts) flush this
// frontend's counters before they read, so one frontend's figures are exact.

// CounterFlushInterval is how long counts may wait in a frontend.
const CounterFlushInterval = time.Second

// flushTimeout bounds one flush. A flush is never cancelled with a request
// or a stop: one cancelled after Redis applied it would keep its counts for
// the next flush, which would count them twice.
const flushTimeout = 5 * time.Second

// counterKind says how a buffered hash field is written.
type counterKind byte

const (
	counterAdd    counterKind = '+' // HINCRBY, saturating
	counterDomain counterKind = 'd' // HINCRBY with domain_bytes' 64-group cap
	counterSet    counterKind = '=' // HSET (the latest value wins)
)

// counterHash is one hash's fields as a flush writes them.
type counterHash struct {
	ttl  time.Duration
	kind counterKind
	adds map[string]int64
	sets map[string]string
}

// counterBuffer holds counts not yet in Redis, by project.
//
// A request adds to a fixed struct under one lock: its project's counts
// for its UTC minute (one map look-up) and, for a done, its downloader's
// (one more). Every hash field a flush writes is made from these at the
// flush, once a second, not per request: a done used to add 17 counts to
// 10 hashes by key and field name (17 map assignments hashing long key
// and field strings, three field names built per done), about a quarter
// of a one-item done's frontend CPU (docs/warrior-path.md, "Counting
// without maps (s44)"). What a flush writes is the same: each field the
// old adds touched, with the same sums.
type counterBuffer struct {
	mu       sync.Mutex
	projects map[string]*projectCounts
	oldest   time.Time // when the oldest buffered count was made
}

// projectCounts is one project's counts since its last flush.
type projectCounts struct {
	keys *warriorKeys
	// minutes are the counts by UTC minute, oldest first: nearly always
	// one, two across a minute's turn.
	minutes []*minuteCounts
	// requeued is what a failed flush could not write; the next flush
	// writes it with these counts (a version set since wins).
	requeued map[string]*counterHash
}

// The request counters claims add to the stats hash (countClaim), by
// index into minuteCounts.claims.
const (
	claimRequests = iota
	claimBlocked
	claimTooOld
	claimRateLimited
	claimEmpty
	claimGroupLimited
	claimServed
	claimItemsServed
	claimServedReclaim
	claimReclaimsServed
	claimFields
)

// claimFieldNames are the stats hash's fields, by index. A field is
// written when a request added to it; items_served and reclaims_served
// are added with requests_served and requests_served_reclaim (claimWith),
// so they are written with those even when they add 0, as the adds did.
var claimFieldNames = [claimFields]string{
	claimRequests: "requests", claimBlocked: "requests_blocked", claimTooOld: "requests_too_old",
	claimRateLimited: "requests_rate_limited", claimEmpty: "requests_empty",
	claimGroupLimited: "requests_group_limited", claimServed: "requests_served",
	claimItemsServed: "items_served", claimServedReclaim: "requests_served_reclaim",
	claimReclaimsServed: "reclaims_served",
}

// claimWith is, per field, the field whose count says it was added to.
var claimWith = [claimFields]int{
	claimRequests: claimRequests, claimBlocked: claimBlocked, claimTooOld: claimTooOld,
	claimRateLimited: claimRateLimited, claimEmpty: claimEmpty, claimGroupLimited: claimGroupLimited,
	claimServed: claimServed, claimItemsServed: claimServed,
	claimServedReclaim: claimServedReclaim, claimReclaimsServed: claimServedReclaim,
}

// claimHourly are the claim fields the hourly hash gets too (the same
// name and count).
var claimHourly = [...]int{claimRequests, claimServed, claimServedReclaim}

// minuteCounts is one project's counts within one UTC minute: every key
// and time-named field a count goes to is the same inside a minute
// (counterMinute).
type minuteCounts struct {
	names  *counterMinute
	claims [claimFields]int64
	// Dones: the claim-to-done time, and per downloader its items and
	// bytes (from which the project's, the hour's and the series'
	// totals are summed at the flush) and latest version.
	rttSum, rttCount int64
	downloaders      map[string]*downloaderCounts
	domains          map[string]int64 // bytes by file group
}

type downloaderCounts struct {
	items, bytes int64
	// version is the latest non-empty one reported in the minute. The
	// flush writes a project's minutes in order, so a later minute's
	// wins over an earlier one's, even one counted late (a request that
	// took its time across a minute's turn): the newest done by its own
	// time, where the adds made it the last counted.
	version string
}

// minute returns slug's counts for now's UTC minute, made if there are
// none. b.mu is held.
func (b *counterBuffer) minute(e *Engine, slug string, now time.Time) *minuteCounts {
	p := b.projects[slug]
	if p == nil {
		if b.projects == nil {
			b.projects = map[string]*projectCounts{}
		}
		p = &projectCounts{keys: e.warriorKeys.get(slug)}
		b.projects[slug] = p
	}
	um := unixMinute(now)
	i := len(p.minutes)
	for ; i > 0 && p.minutes[i-1].names.unixMinute >= um; i-- {
		if m := p.minutes[i-1]; m.names.unixMinute == um {
			return m
		}
	}
	// Kept in minute order (a request late across a minute's turn may
	// come after the next minute's), so the flush writes versions oldest
	// first.
	m := &minuteCounts{names: p.keys.minuteKeys(slug, now)}
	p.minutes = slices.Insert(p.minutes, i, m)
	return m
}

// hashes is what a flush of p writes, by key: the fields the requests'
// counts go to, summed, after a failed flush's (requeued), whose sets
// the newer ones replace.
func (p *projectCounts) hashes() map[string]*counterHash {
	c := counts{p: p.requeued}
	if c.p == nil {
		c.p = map[string]*counterHash{}
	}
	k := p.keys
	for _, m := range p.minutes {
		t := m.names
		for i, n := range m.claims {
			if m.claims[claimWith[i]] > 0 {
				c.add(k.stats, counterAdd, 0, claimFieldNames[i], n)
			}
		}
		for _, i := range claimHourly {
			if n := m.claims[i]; n > 0 {
				c.add(t.hourly, counterAdd, HourlyRetention, claimFieldNames[i], n)
			}
		}
		if m.rttCount > 0 {
			c.add(k.stats, counterAdd, 0, "rtt_ms_sum", m.rttSum)
			c.add(k.stats, counterAdd, 0, "rtt_count", m.rttCount)
		}
		if len(m.downloaders) > 0 {
			var items, bytes int64
			for d, dc := range m.downloaders {
				items += dc.items
				bytes += dc.bytes
				c.add(k.downloaderBytes, counterAdd, 0, d, dc.bytes)
				c.add(k.downloaderItems, counterAdd, 0, d, dc.items)
				if dc.version != "" {
					c.set(k.downloaderVersion, 0, d, dc.version)
				}
				c.add(t.seriesDownloader, counterAdd, seriesDownloaderTTL, t.hourOfDay+d, dc.bytes)
				c.add(t.recent, counterAdd, RecentBucketTTL, "i "+d, dc.items)
				c.add(t.recent, counterAdd, RecentBucketTTL, "b "+d, dc.bytes)
			}
			c.add(k.stats, counterAdd, 0, "items_done", items)
			c.add(k.stats, counterAdd, 0, "bytes_done", bytes)
			c.add(t.hourly, counterAdd, HourlyRetention, "items_done", items)
			c.add(t.hourly, counterAdd, HourlyRetention, "bytes_done", bytes)
			c.add(t.seriesMinute, counterAdd, seriesMinuteTTL, t.minuteField, items)
			c.add(t.seriesMinute, counterAdd, seriesMinuteTTL, t.minuteBytes, bytes)
			c.add(t.seriesHour, counterAdd, seriesHourTTL, t.hourField, items)
			c.add(t.seriesHour, counterAdd, seriesHourTTL, t.hourBytes, bytes)
		}
		for g, n := range m.domains {
			c.add(k.domainBytes, counterDomain, 0, g, n)
		}
	}
	return c.p
}

// counts adds fields to a flush's hashes. The last hash added to is kept:
// most adds go several in a row to one.
type counts struct {
	p       map[string]*counterHash
	lastKey string
	last    *counterHash
}

func (c *counts) hash(key string, kind counterKind, ttl time.Duration) *counterHash {
	if c.last != nil && c.lastKey == key {
		return c.last
	}
	h := c.p[key]
	if h == nil {
		h = &counterHash{ttl: ttl, kind: kind}
		c.p[key] = h
	}
	c.lastKey, c.last = key, h
	return h
}

func (c *counts) add(key string, kind counterKind, ttl time.Duration, field string, n int64) {
	h := c.hash(key, kind, ttl)
	if h.adds == nil {
		h.adds = map[string]int64{}
	}
	h.adds[field] += n
}

func (c *counts) set(key string, ttl time.Duration, field, value string) {
	h := c.hash(key, counterSet, ttl)
	if h.sets == nil {
		h.sets = map[string]string{}
	}
	h.sets[field] = value
}

// count buffers a request's counters (fn adds them to its project's
// counts for now's minute) and flushes every project's buffer when the
// oldest count is a flush interval old, so counts reach Redis within
// about a second even with no flush loop running.
func (e *Engine) count(ctx context.Context, slug string, now time.Time, fn func(m *minuteCounts)) {
	b := &e.counters
	b.mu.Lock()
	if len(b.projects) == 0 {
		b.oldest = now
	}
	fn(b.minute(e, slug, now))
	due := now.Sub(b.oldest) >= CounterFlushInterval
	b.mu.Unlock()
	if due {
		// Not cancelled with the request: a flush cancelled after Redis
		// applied it would be kept for the next one and count twice.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		if err := e.FlushCounters(flushCtx); err != nil {
			e.logger.WarnContext(ctx, "flushing counters", "err", err)
		}
		cancel()
	}
}

// FlushCounters adds every buffered count to Redis. Counts a flush could
// not write stay buffered for the next one.
func (e *Engine) FlushCounters(ctx context.Context) error {
	e.counters.mu.Lock()
	projects := e.counters.projects
	e.counters.projects = nil
	e.counters.mu.Unlock()
	var firstErr error
	for slug, p := range projects {
		hashes := p.hashes()
		if err := e.flushProject(ctx, slug, hashes); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			e.requeueCounts(slug, p.keys, hashes)
		}
	}
	return firstErr
}

// flushCounters flushes before a read of slug's statistics, so this
// frontend's own counts are in what it reads.
func (e *Engine) flushCounters(ctx context.Context, slug string) error {
	e.counters.mu.Lock()
	p := e.counters.projects[slug]
	delete(e.counters.projects, slug)
	e.counters.mu.Unlock()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	hashes := p.hashes()
	if err := e.flushProject(ctx, slug, hashes); err != nil {
		e.requeueCounts(slug, p.keys, hashes)
		return err
	}
	return nil
}

// requeueCounts puts counts a flush failed to write back into the buffer,
// for the next flush of slug (before the counts made since, so a value
// set since the failed flush, newer, wins).
func (e *Engine) requeueCounts(slug string, keys *warriorKeys, hashes map[string]*counterHash) {
	b := &e.counters
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.projects) == 0 {
		b.oldest = e.clock.Now()
	}
	if b.projects == nil {
		b.projects = map[string]*projectCounts{}
	}
	p := b.projects[slug]
	if p == nil {
		p = &projectCounts{keys: keys}
		b.projects[slug] = p
	}
	if p.requeued == nil {
		p.requeued = hashes
		return
	}
	// Another failed flush's counts are waiting too (two flushes failed
	// at once): add them up; of two values set, the waiting one stays.
	c := counts{p: p.requeued}
	for key, h := range hashes {
		for field, n := range h.adds {
			c.add(key, h.kind, h.ttl, field, n)
		}
		for field, v := range h.sets {
			if current := p.requeued[key]; current != nil {
				if _, set := current.sets[field]; set {
					continue
				}
			}
			c.set(key, h.ttl, field, v)
		}
	}
}

func (e *Engine) flushProject(ctx context.Context, slug string, hashes map[string]*counterHash) error {
	keys := make([]string, 0, len(hashes))
	var args []any
	for key, h := range hashes {
		keys = append(keys, key)
		fields := len(h.adds) + len(h.sets)
		args = append(args, int64(h.ttl/time.Second), string(h.kind), fields)
		for field, n := range h.adds {
			args = append(args, field, strconv.FormatInt(n, 10))
		}
		for field, v := range h.sets {
			args = append(args, field, v)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := e.runScriptInt(ctx, "queues.FlushCounters", countersFlushScript, keys, args...)
	return err
}

// RunCounterFlusher must run beside an engine that serves warriors
// (server.Start runs it). It flushes the buffered counters every interval, and
// publishes the completions for live viewers every PublishInterval, until
// ctx ends, then once more (with a fresh 5 s context) so a clean stop
// keeps them.
func (e *Engine) RunCounterFlusher(ctx context.Context) {
	ticker := time.NewTicker(CounterFlushInterval)
	defer ticker.Stop()
	publish := time.NewTicker(PublishInterval)
	defer publish.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			e.PublishCompletions(final)
			if err := e.FlushCounters(final); err != nil {
				e.logger.Warn("final counter flush", "err", err)
			}
			cancel()
			return
		case <-publish.C:
			e.PublishCompletions(ctx)
		case <-ticker.C:
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			if err := e.FlushCounters(flushCtx); err != nil {
				e.logger.WarnContext(ctx, "flushing counters", "err", err)
			}
			cancel()
		}
	}
}

// The TTLs of the counted hashes, as claim.lua and done.lua had them.
const (
	seriesMinuteTTL     = 2 * 24 * time.Hour
	seriesHourTTL       = 400 * 24 * time.Hour
	seriesDownloaderTTL = 8 * 24 * time.Hour
)

// countClaim counts a claim script's outcome: every request that got past
// the block and version checks counts in requests (rate-limited ones too),
// as claim.lua counted them.
func (e *Engine) countClaim(ctx context.Context, slug string, now time.Time, code int64, detail string, items, reclaims int64) {
	switch code {
	case codeBlocked, codeTooOld, codeRateLimited, 0, 1:
	default:
		return
	}
	e.count(ctx, slug, now, func(m *minuteCounts) {
		c := &m.claims
		switch code {
		case codeBlocked:
			c[claimBlocked]++
			return
		case codeTooOld:
			c[claimTooOld]++
			return
		}
		c[claimRequests]++
		switch code {
		case codeRateLimited:
			c[claimRateLimited]++
		case 0:
			c[claimEmpty]++
			if detail == "group_limit" {
				c[claimGroupLimited]++
			}
		case 1:
			c[claimServed]++
			c[claimItemsServed] += items
			if reclaims > 0 {
				c[claimServedReclaim]++
				c[claimReclaimsServed] += reclaims
			}
		}
	})
}

// countDone counts an accepted done with fresh new items: the project's
// and the hour's items and bytes, the leaderboard's per-downloader figures,
// the per-file-group bytes, the charts' series and the claim-to-done time
// of the claimed ones (all made from the minute's per-downloader items and
// bytes at the flush: projectCounts.hashes).
func (e *Engine) countDone(ctx context.Context, req DoneRequest, now time.Time, total int64, groups []string, fresh int, rttSum, rttCount int64) {
	e.count(ctx, req.Project, now, func(m *minuteCounts) {
		d := m.downloaders[req.Downloader]
		if d == nil {
			if m.downloaders == nil {
				m.downloaders = map[string]*downloaderCounts{}
			}
			d = &downloaderCounts{}
			m.downloaders[req.Downloader] = d
		}
		d.items += int64(fresh)
		d.bytes += total
		if req.Version != "" {
			d.version = req.Version
		}
		if rttCount > 0 {
			m.rttSum += rttSum
			m.rttCount += rttCount
		}
		if len(groups) > 0 && m.domains == nil {
			m.domains = map[string]int64{}
		}
		for _, g := range groups {
			m.domains[g] += req.Bytes[g]
		}
	})
}
