package queues

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stats are a project's counters and the rates operators steer by (seed
// 004's definitions).
type Stats struct {
	Title    string           `json:"title"`
	Counts   Counts           `json:"counts"`
	Counters map[string]int64 `json:"counters"`
	// IRSR, item request serve rate: share of item requests given an item.
	IRSR float64 `json:"irsr"`
	// ReclaimRate: share of handed-out items reclaimed at least once.
	ReclaimRate float64 `json:"reclaim_rate"`
	// ReclaimServeRate: share of served requests given a reclaim.
	ReclaimServeRate float64 `json:"reclaim_serve_rate"`
	// ItemFailRate: share of finished items that failed, items failed ever
	// (stats.items_failed, requeued ones included) over those plus the
	// done: how much of the work hoard gives up on.
	ItemFailRate float64 `json:"item_fail_rate"`
	// FilterRate: share of the items offered on the ways in (admin add,
	// backfeed, import) that the project's filters dropped: items_filtered
	// over those plus items_queued, lifetime as ItemFailRate is.
	FilterRate float64 `json:"filter_rate"`
	// RTT: mean time from claim to done.
	RTT         Duration          `json:"rtt"`
	Downloaders []DownloaderStats `json:"downloaders"`
	DomainBytes map[string]int64  `json:"domain_bytes"`
	// Groups are the project's limit groups with the items each holds.
	Groups []GroupStats `json:"groups"`
	// LastHour are the same rates over the current and the previous UTC
	// hour, which is what operators steer by; the ones above are lifetime.
	LastHour WindowStats `json:"last_hour"`
	// Hourly lists the last 24 UTC hours, oldest first.
	Hourly []HourStats `json:"hourly"`
	// Paused says the project hands out nothing (Rates.HeldBack says so too).
	Paused bool `json:"paused"`
	// Rates are the pace now and recently, the ETAs of the work left, what
	// is held back and why, and each downloader's recent pace (rates.go).
	Rates Rates `json:"rates"`
}

// GroupStats is one limit group and the items waiting in its sub-queues.
type GroupStats struct {
	LimitGroup
	Queued int64 `json:"queued"`
	// queuedIn splits Queued by shared queue, in SharedQueues order, so
	// each queue's ETA is bounded by the groups holding its items.
	queuedIn [4]int64
}

// WindowStats are the rates over a recent window.
type WindowStats struct {
	Requests         int64   `json:"requests"`
	IRSR             float64 `json:"irsr"`
	ReclaimServeRate float64 `json:"reclaim_serve_rate"`
	ItemsDone        int64   `json:"items_done"`
	BytesDone        int64   `json:"bytes_done"`
}

// HourStats are one UTC hour's counters.
type HourStats struct {
	Hour                  time.Time `json:"hour"`
	ItemsDone             int64     `json:"items_done"`
	BytesDone             int64     `json:"bytes_done"`
	Requests              int64     `json:"requests"`
	RequestsServed        int64     `json:"requests_served"`
	RequestsServedReclaim int64     `json:"requests_served_reclaim"`
}

// HourlyRetention is how long hourly counters are kept.
const HourlyRetention = 8 * 24 * time.Hour

// DownloaderStats is one row of the leaderboard.
type DownloaderStats struct {
	Name    string `json:"name"`
	Bytes   int64  `json:"bytes"`
	Items   int64  `json:"items"`
	Version string `json:"version,omitempty"`
}

// Stats reads a project's statistics.
func (e *Engine) Stats(ctx context.Context, slug string) (Stats, error) {
	const op = "queues.Stats"
	counts, err := e.Counts(ctx, slug)
	if err != nil {
		return Stats{}, err
	}
	if err := e.flushCounters(ctx, slug); err != nil {
		return Stats{}, err
	}
	pipe := e.rdb.Pipeline()
	counters := pipe.HGetAll(ctx, StatsKey(slug))
	bytes := pipe.HGetAll(ctx, DownloaderBytesKey(slug))
	items := pipe.HGetAll(ctx, DownloaderItemsKey(slug))
	versions := pipe.HGetAll(ctx, DownloaderVersionKey(slug))
	domains := pipe.HGetAll(ctx, DomainBytesKey(slug))
	thisHour := e.clock.Now().UTC().Truncate(time.Hour)
	hours := make([]*redis.MapStringStringCmd, 24)
	for i := range hours {
		hours[i] = pipe.HGetAll(ctx, HourlyKey(slug, thisHour.Add(time.Duration(i-23)*time.Hour)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, unavailable(op, err)
	}
	s := Stats{Counts: counts, Counters: intMap(counters.Val()), DomainBytes: intMap(domains.Val())}
	project, err := e.Project(ctx, slug)
	if err != nil {
		return Stats{}, err
	}
	s.Title = project.Title
	s.Groups = groupStats(ctx, e, slug, project.LimitGroups)
	s.Paused = project.Paused
	if s.Rates, err = e.rates(ctx, project, counts, s.Groups); err != nil {
		return Stats{}, err
	}
	c := s.Counters
	s.IRSR = ratio(c["requests_served"], c["requests"])
	s.ReclaimRate = ratio(c["items_reclaimed"], c["items_served"]-c["reclaims_served"])
	s.ReclaimServeRate = ratio(c["requests_served_reclaim"], c["requests_served"])
	s.ItemFailRate = ratio(c["items_failed"], counts.Done+c["items_failed"])
	s.FilterRate = ratio(c["items_filtered"], c["items_filtered"]+c["items_queued"])
	if c["rtt_count"] > 0 {
		s.RTT = Duration(time.Duration(c["rtt_ms_sum"]/c["rtt_count"]) * time.Millisecond)
	}
	for i, h := range hours {
		c := intMap(h.Val())
		s.Hourly = append(s.Hourly, HourStats{Hour: thisHour.Add(time.Duration(i-23) * time.Hour),
			ItemsDone: c["items_done"], BytesDone: c["bytes_done"], Requests: c["requests"],
			RequestsServed: c["requests_served"], RequestsServedReclaim: c["requests_served_reclaim"]})
	}
	var served, reclaimServed int64
	for _, h := range s.Hourly[22:] {
		s.LastHour.Requests += h.Requests
		served += h.RequestsServed
		reclaimServed += h.RequestsServedReclaim
		s.LastHour.ItemsDone += h.ItemsDone
		s.LastHour.BytesDone += h.BytesDone
	}
	s.LastHour.IRSR = ratio(served, s.LastHour.Requests)
	s.LastHour.ReclaimServeRate = ratio(reclaimServed, served)
	byteCounts, itemCounts := intMap(bytes.Val()), intMap(items.Val())
	names := map[string]bool{}
	for n := range byteCounts {
		names[n] = true
	}
	for n := range itemCounts {
		names[n] = true
	}
	for n := range names {
		s.Downloaders = append(s.Downloaders, DownloaderStats{Name: n, Bytes: byteCounts[n], Items: itemCounts[n], Version: versions.Val()[n]})
	}
	sort.Slice(s.Downloaders, func(i, j int) bool {
		a, b := s.Downloaders[i], s.Downloaders[j]
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		return a.Name < b.Name
	})
	return s, nil
}

// Recent returns up to n of the most recent completions, newest first, as
// the JSON objects the frontends pushed (queues/publish.go).
func (e *Engine) Recent(ctx context.Context, slug string, n int) ([]json.RawMessage, error) {
	if err := ValidateSlug(slug); err != nil {
		return nil, err
	}
	// This frontend's own completions are pushed first, as Stats flushes
	// its counts: another frontend's lag by at most PublishInterval.
	e.PublishCompletions(ctx)
	entries, err := e.rdb.LRange(ctx, LogKey(slug), 0, int64(n-1)).Result()
	if err != nil {
		return nil, unavailable("queues.Recent", err)
	}
	out := make([]json.RawMessage, len(entries))
	for i, entry := range entries {
		out[i] = json.RawMessage(entry)
	}
	return out, nil
}

func intMap(h map[string]string) map[string]int64 {
	m := make(map[string]int64, len(h))
	for k, v := range h {
		n, _ := strconv.ParseInt(v, 10, 64)
		m[k] = n
	}
	return m
}

func ratio(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// groupStats counts the items each limit group holds; a failed read
// leaves the counts at zero rather than failing the whole page.
func groupStats(ctx context.Context, e *Engine, slug string, groups []LimitGroup) []GroupStats {
	out := make([]GroupStats, 0, len(groups))
	if len(groups) == 0 {
		return out
	}
	pipe := e.rdb.Pipeline()
	lens := make([][]*redis.IntCmd, len(groups))
	for i, g := range groups {
		for _, q := range SharedQueues {
			lens[i] = append(lens[i], pipe.LLen(ctx, GroupQueueKey(slug, q, g.Name)))
		}
	}
	_, _ = pipe.Exec(ctx)
	for i, g := range groups {
		gs := GroupStats{LimitGroup: g}
		for j, l := range lens[i] {
			gs.Queued += l.Val()
			gs.queuedIn[j] = l.Val()
		}
		out = append(out, gs)
	}
	return out
}
