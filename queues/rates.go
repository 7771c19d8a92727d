package queues

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rates are read from history the counter flush already writes (the
// per-minute chart series, and five-minute per-downloader buckets added to
// the same flush), never from the claim path: a read costs a few HMGETs,
// and the history is bounded by the keys' expiry whatever the project's age.

// RecentBucket is the width of the per-downloader rate buckets, and the
// alignment of the "now" window.
const RecentBucket = 5 * time.Minute

// RecentBucketTTL keeps a bucket a little past the longest window that
// reads it (three buckets).
const RecentBucketTTL = 20 * time.Minute

// nowWindowBuckets is how many whole buckets the "now" window has before
// the current, partial one: 10 to 15 minutes in all.
const nowWindowBuckets = 2

// recentWindow is the window the ETAs are computed from: long enough that
// one quiet minute does not make the ETA jump, short enough to follow a
// change of pace within the hour.
const recentWindow = time.Hour

// MaxRecentDownloaders caps the recent-rate list, as stats.json caps the
// leaderboard: the fastest ones are listed.
const MaxRecentDownloaders = 500

// Rates are how fast a project's work goes and when what is left would be
// done at that pace.
type Rates struct {
	// Now is the last 10 to 15 minutes: the whole five-minute buckets
	// before the current one, and the current one so far.
	Now RateWindow `json:"now"`
	// Recent is the last hour and the current minute so far: the ETAs are
	// computed from it.
	Recent RateWindow `json:"recent"`
	// Queues are the shared queues in the order warriors are served from
	// them, each with its waiting items and ETA.
	Queues []QueueETA `json:"queues"`
	// ETASeconds is when every item any warrior can get would be done at
	// the recent rate, and no sooner than the slowest limit group allows;
	// null when nothing was done in the recent window.
	ETASeconds *float64 `json:"eta_seconds"`
	// HeldBack lists the waiting items warriors cannot get now, and why.
	HeldBack []HeldBack `json:"held_back"`
	// Downloaders are each downloader's rate over the Now window, fastest
	// (by bytes) first.
	Downloaders []DownloaderRate `json:"downloaders"`
}

// RateWindow is what was done in one window and the rates it gives.
type RateWindow struct {
	Start time.Time `json:"start"`
	// Seconds is the window's length: at least a minute, and never from
	// before the project existed, so a young project's rate is its own.
	Seconds        float64 `json:"seconds"`
	Items          int64   `json:"items"`
	Bytes          int64   `json:"bytes"`
	ItemsPerMinute float64 `json:"items_per_minute"`
	BytesPerSecond float64 `json:"bytes_per_second"`
}

// QueueETA is one shared queue's waiting items (its limit groups'
// sub-queues and offloaded segments included) and when it would be empty
// at the recent rate, the queues served before it emptied first, and no
// sooner than the limit groups holding items in those queues let them out.
type QueueETA struct {
	Queue      Queue    `json:"queue"`
	Items      int64    `json:"items"`
	ETASeconds *float64 `json:"eta_seconds"`
}

// Kinds of HeldBack.
const (
	// HeldPaused: the project is paused; nothing is handed out.
	HeldPaused = "paused"
	// HeldLimitGroup: items of a limit group, handed out no faster than
	// the group's rate (not at all at rate 0).
	HeldLimitGroup = "limit_group"
	// HeldReserved: items reserved for named downloaders; only they get them.
	HeldReserved = "reserved"
	// HeldClaimsLimit: the project's claims limit is reached; new items
	// wait until claims come back.
	HeldClaimsLimit = "claims_limit"
)

// HeldBack is a set of waiting items warriors cannot have now, and why.
type HeldBack struct {
	Kind string `json:"kind"`
	// Name is the limit group's name.
	Name  string `json:"name,omitempty"`
	Items int64  `json:"items"`
	// RatePerMinute and Burst are the limit group's, or the claims limit
	// (as Burst) for HeldClaimsLimit.
	RatePerMinute float64 `json:"rate_per_minute,omitempty"`
	Burst         int     `json:"burst,omitempty"`
	// ETASeconds is, for a limit group with a rate, the least time its
	// items need at that rate.
	ETASeconds *float64 `json:"eta_seconds,omitempty"`
}

// DownloaderRate is one downloader's pace over a window.
type DownloaderRate struct {
	Name           string  `json:"name"`
	Items          int64   `json:"items"`
	Bytes          int64   `json:"bytes"`
	ItemsPerMinute float64 `json:"items_per_minute"`
	BytesPerSecond float64 `json:"bytes_per_second"`
}

// serveOrder is the order claim.lua serves the shared queues in (after a
// downloader's own reserved queue).
var serveOrder = []Queue{QueueScored, QueueTodo, QueueBackfeed, QueueSecondary, QueueRedo}

// windows returns the Now and Recent windows' starts at now for a project
// created at created: minute-aligned, never before the project's first
// minute.
func windows(now, created time.Time) (nowStart, recentStart time.Time) {
	nowStart = now.Truncate(RecentBucket).Add(-nowWindowBuckets * RecentBucket)
	recentStart = now.Truncate(time.Minute).Add(-recentWindow)
	first := created.Truncate(time.Minute)
	if nowStart.Before(first) {
		nowStart = first
	}
	if recentStart.Before(first) {
		recentStart = first
	}
	return nowStart, recentStart
}

func newWindow(start, now time.Time, items, bytes int64) RateWindow {
	secs := max(now.Sub(start).Seconds(), 60)
	return RateWindow{Start: start, Seconds: secs, Items: items, Bytes: bytes,
		ItemsPerMinute: float64(items) * 60 / secs, BytesPerSecond: float64(bytes) / secs}
}

// minuteFields queues HMGETs of the chart's minute series from start to
// now's minute, by day hash; sum adds them up once the pipeline ran.
func minuteFields(ctx context.Context, pipe redis.Pipeliner, slug string, start, now time.Time) (sum func(from time.Time) (items, bytes int64)) {
	type day struct {
		fields  []string
		minutes []time.Time
		cmd     *redis.SliceCmd
	}
	days := map[string]*day{}
	var order []*day
	for t := start; !t.After(now); t = t.Add(time.Minute) {
		key := SeriesMinuteKey(slug, t)
		d := days[key]
		if d == nil {
			d = &day{}
			days[key] = d
			order = append(order, d)
		}
		f := t.UTC().Format("1504")
		d.fields = append(d.fields, f, f+"b")
		d.minutes = append(d.minutes, t)
	}
	for key, d := range days {
		d.cmd = pipe.HMGet(ctx, key, d.fields...)
	}
	return func(from time.Time) (items, bytes int64) {
		for _, d := range order {
			vals := d.cmd.Val()
			for i, t := range d.minutes {
				if t.Before(from) || 2*i+1 >= len(vals) {
					continue
				}
				items += atoi(strValue(vals[2*i]))
				bytes += atoi(strValue(vals[2*i+1]))
			}
		}
		return items, bytes
	}
}

// recentBuckets queues HGETALLs of the per-downloader buckets from start
// to now.
func recentBuckets(ctx context.Context, pipe redis.Pipeliner, slug string, start, now time.Time) []*redis.MapStringStringCmd {
	var cmds []*redis.MapStringStringCmd
	for t := start.Truncate(RecentBucket); !t.After(now); t = t.Add(RecentBucket) {
		cmds = append(cmds, pipe.HGetAll(ctx, RecentDownloadersKey(slug, t)))
	}
	return cmds
}

// downloaderRates sums the buckets by downloader over w.
func downloaderRates(cmds []*redis.MapStringStringCmd, w RateWindow) []DownloaderRate {
	byName := map[string]*DownloaderRate{}
	for _, cmd := range cmds {
		for field, v := range cmd.Val() {
			kind, name, ok := strings.Cut(field, " ")
			if !ok || (kind != "i" && kind != "b") {
				continue
			}
			d := byName[name]
			if d == nil {
				d = &DownloaderRate{Name: name}
				byName[name] = d
			}
			if kind == "i" {
				d.Items += atoi(v)
			} else {
				d.Bytes += atoi(v)
			}
		}
	}
	out := make([]DownloaderRate, 0, len(byName))
	for _, d := range byName {
		d.ItemsPerMinute = float64(d.Items) * 60 / w.Seconds
		d.BytesPerSecond = float64(d.Bytes) / w.Seconds
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > MaxRecentDownloaders {
		out = out[:MaxRecentDownloaders]
	}
	return out
}

// rates reads a project's recent history and works out its rates, ETAs
// and what is held back, from the counts and limit groups Stats read.
func (e *Engine) rates(ctx context.Context, project Project, counts Counts, groups []GroupStats) (Rates, error) {
	slug := project.Slug
	now := e.clock.Now().UTC()
	nowStart, recentStart := windows(now, project.CreatedAt)
	pipe := e.rdb.Pipeline()
	sum := minuteFields(ctx, pipe, slug, recentStart, now)
	buckets := recentBuckets(ctx, pipe, slug, nowStart, now)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return Rates{}, unavailable("queues.Rates", err)
	}
	r := Rates{}
	items, bytes := sum(nowStart)
	r.Now = newWindow(nowStart, now, items, bytes)
	items, bytes = sum(recentStart)
	r.Recent = newWindow(recentStart, now, items, bytes)
	r.Downloaders = downloaderRates(buckets, r.Now)

	perMinute := r.Recent.ItemsPerMinute
	eta := func(n int64) *float64 {
		if perMinute <= 0 {
			return nil
		}
		s := float64(n) / perMinute * 60
		return &s
	}
	waiting := map[Queue]int64{QueueScored: counts.Scored, QueueTodo: counts.Todo,
		QueueBackfeed: counts.Backfeed, QueueSecondary: counts.Secondary, QueueRedo: counts.Redo}
	// A queue is empty once it and the queues served before it are: at
	// the project's recent pace, and no sooner than each limit group with
	// a rate lets out its items in those queues (a group at rate 0 is
	// never served: its items are held back, listed below, not waited for).
	var ahead int64
	groupAhead := make([]int64, len(groups))
	for _, q := range serveOrder {
		ahead += waiting[q]
		if j := slices.Index(SharedQueues, q); j >= 0 {
			for i, g := range groups {
				groupAhead[i] += g.queuedIn[j]
			}
		}
		at := eta(ahead)
		for i, g := range groups {
			if at == nil || g.RatePerMinute <= 0 || groupAhead[i] == 0 {
				continue
			}
			if s := float64(groupAhead[i]) / g.RatePerMinute * 60; s > *at {
				at = &s
			}
		}
		r.Queues = append(r.Queues, QueueETA{Queue: q, Items: waiting[q], ETASeconds: at})
	}
	// The last queue's: every group's items are in the queues up to it.
	r.ETASeconds = r.Queues[len(r.Queues)-1].ETASeconds

	r.HeldBack = []HeldBack{}
	if project.Paused && counts.TodoTotal() > 0 {
		r.HeldBack = append(r.HeldBack, HeldBack{Kind: HeldPaused, Items: counts.TodoTotal()})
	}
	if project.ClaimsLimit > 0 && counts.Out >= int64(project.ClaimsLimit) && ahead > 0 {
		r.HeldBack = append(r.HeldBack, HeldBack{Kind: HeldClaimsLimit, Items: ahead, Burst: project.ClaimsLimit})
	}
	for _, g := range groups {
		if g.Queued == 0 {
			continue
		}
		h := HeldBack{Kind: HeldLimitGroup, Name: g.Name, Items: g.Queued, RatePerMinute: g.RatePerMinute, Burst: g.Burst}
		if g.RatePerMinute > 0 {
			s := float64(g.Queued) / g.RatePerMinute * 60
			h.ETASeconds = &s
		}
		r.HeldBack = append(r.HeldBack, h)
	}
	if counts.Reserved > 0 {
		r.HeldBack = append(r.HeldBack, HeldBack{Kind: HeldReserved, Items: counts.Reserved})
	}
	return r, nil
}
