package queues

import (
	"context"
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

// counterHash is one hash's buffered fields.
type counterHash struct {
	ttl  time.Duration
	kind counterKind
	adds map[string]int64
	sets map[string]string
}

// counterBuffer holds counts not yet in Redis, by project and key.
type counterBuffer struct {
	mu       sync.Mutex
	projects map[string]map[string]*counterHash
	oldest   time.Time // when the oldest buffered count was made
}

// project returns slug's hashes, made if there are none.
func (b *counterBuffer) project(slug string) map[string]*counterHash {
	if b.projects == nil {
		b.projects = map[string]map[string]*counterHash{}
	}
	p := b.projects[slug]
	if p == nil {
		p = map[string]*counterHash{}
		b.projects[slug] = p
	}
	return p
}

// counts is one request's increments, applied under one lock. The
// project's hashes are looked up once per request, and the last hash
// added to is kept: a done adds 17 counts to 10 hashes, mostly several in
// a row to one, and three map look-ups per count were a third of its
// counting.
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

// count buffers a request's counters (fn adds them) and flushes every
// project's buffer when the oldest count is a flush interval old, so counts
// reach Redis within about a second even with no flush loop running.
func (e *Engine) count(ctx context.Context, slug string, fn func(c counts)) {
	now := e.clock.Now()
	e.counters.mu.Lock()
	if len(e.counters.projects) == 0 {
		e.counters.oldest = now
	}
	fn(counts{p: e.counters.project(slug)})
	due := now.Sub(e.counters.oldest) >= CounterFlushInterval
	e.counters.mu.Unlock()
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
	for slug, hashes := range projects {
		if err := e.flushProject(ctx, slug, hashes); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			e.requeueCounts(slug, hashes)
		}
	}
	return firstErr
}

// flushCounters flushes before a read of slug's statistics, so this
// frontend's own counts are in what it reads.
func (e *Engine) flushCounters(ctx context.Context, slug string) error {
	e.counters.mu.Lock()
	hashes := e.counters.projects[slug]
	delete(e.counters.projects, slug)
	e.counters.mu.Unlock()
	if hashes == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if err := e.flushProject(ctx, slug, hashes); err != nil {
		e.requeueCounts(slug, hashes)
		return err
	}
	return nil
}

// requeueCounts puts counts a flush failed to write back into the buffer.
func (e *Engine) requeueCounts(slug string, hashes map[string]*counterHash) {
	e.counters.mu.Lock()
	defer e.counters.mu.Unlock()
	if len(e.counters.projects) == 0 {
		e.counters.oldest = e.clock.Now()
	}
	c := counts{p: e.counters.project(slug)}
	for key, h := range hashes {
		for field, n := range h.adds {
			c.add(key, h.kind, h.ttl, field, n)
		}
		for field, v := range h.sets {
			// A value set since the failed flush is newer: it wins.
			if current := e.counters.projects[slug][key]; current != nil {
				if _, newer := current.sets[field]; newer {
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
	keys := e.warriorKeys.get(slug)
	hourly, stats := keys.minuteKeys(slug, now).hourly, keys.stats
	e.count(ctx, slug, func(c counts) {
		switch code {
		case codeBlocked:
			c.add(stats, counterAdd, 0, "requests_blocked", 1)
			return
		case codeTooOld:
			c.add(stats, counterAdd, 0, "requests_too_old", 1)
			return
		case codeRateLimited, 0, 1:
		default:
			return
		}
		c.add(stats, counterAdd, 0, "requests", 1)
		c.add(hourly, counterAdd, HourlyRetention, "requests", 1)
		switch code {
		case codeRateLimited:
			c.add(stats, counterAdd, 0, "requests_rate_limited", 1)
		case 0:
			c.add(stats, counterAdd, 0, "requests_empty", 1)
			if detail == "group_limit" {
				c.add(stats, counterAdd, 0, "requests_group_limited", 1)
			}
		case 1:
			c.add(stats, counterAdd, 0, "requests_served", 1)
			c.add(stats, counterAdd, 0, "items_served", items)
			c.add(hourly, counterAdd, HourlyRetention, "requests_served", 1)
			if reclaims > 0 {
				c.add(stats, counterAdd, 0, "requests_served_reclaim", 1)
				c.add(stats, counterAdd, 0, "reclaims_served", reclaims)
				c.add(hourly, counterAdd, HourlyRetention, "requests_served_reclaim", 1)
			}
		}
	})
}

// countDone counts an accepted done with fresh new items: the project's
// and the hour's items and bytes, the leaderboard's per-downloader figures,
// the per-file-group bytes, the charts' series and the claim-to-done time
// of the claimed ones.
func (e *Engine) countDone(ctx context.Context, req DoneRequest, now time.Time, total int64, groups []string, fresh int, rttSum, rttCount int64) {
	slug := req.Project
	keys := e.warriorKeys.get(slug)
	t := keys.minuteKeys(slug, now)
	stats, hourly := keys.stats, t.hourly
	// The three per-downloader fields ("15 name", "i name", "b name") are
	// cut from one string: one allocation per done instead of three.
	d := req.Downloader
	fields := t.hourOfDay + d + "i " + d + "b " + d
	h := len(t.hourOfDay) + len(d)
	i := h + len("i ") + len(d)
	hourOfDayField, itemsField, bytesField := fields[:h], fields[h:i], fields[i:]
	e.count(ctx, slug, func(c counts) {
		n := int64(fresh)
		c.add(stats, counterAdd, 0, "items_done", n)
		c.add(stats, counterAdd, 0, "bytes_done", total)
		if rttCount > 0 {
			c.add(stats, counterAdd, 0, "rtt_ms_sum", rttSum)
			c.add(stats, counterAdd, 0, "rtt_count", rttCount)
		}
		c.add(hourly, counterAdd, HourlyRetention, "items_done", n)
		c.add(hourly, counterAdd, HourlyRetention, "bytes_done", total)
		c.add(keys.downloaderBytes, counterAdd, 0, req.Downloader, total)
		c.add(keys.downloaderItems, counterAdd, 0, req.Downloader, n)
		if req.Version != "" {
			c.set(keys.downloaderVersion, 0, req.Downloader, req.Version)
		}
		for _, g := range groups {
			c.add(keys.domainBytes, counterDomain, 0, g, req.Bytes[g])
		}
		c.add(t.seriesMinute, counterAdd, seriesMinuteTTL, t.minuteField, n)
		c.add(t.seriesMinute, counterAdd, seriesMinuteTTL, t.minuteBytes, total)
		c.add(t.seriesHour, counterAdd, seriesHourTTL, t.hourField, n)
		c.add(t.seriesHour, counterAdd, seriesHourTTL, t.hourBytes, total)
		c.add(t.seriesDownloader, counterAdd, seriesDownloaderTTL, hourOfDayField, total)
		c.add(t.recent, counterAdd, RecentBucketTTL, itemsField, n)
		c.add(t.recent, counterAdd, RecentBucketTTL, bytesField, total)
	})
}
