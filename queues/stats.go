package queues

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"time"
)

// Stats are a project's counters and the rates operators steer by (seed
// 004's definitions).
type Stats struct {
	Counts   Counts           `json:"counts"`
	Counters map[string]int64 `json:"counters"`
	// IRSR, item request serve rate: share of item requests given an item.
	IRSR float64 `json:"irsr"`
	// ReclaimRate: share of handed-out items reclaimed at least once.
	ReclaimRate float64 `json:"reclaim_rate"`
	// ReclaimServeRate: share of served requests given a reclaim.
	ReclaimServeRate float64 `json:"reclaim_serve_rate"`
	// RTT: mean time from claim to done.
	RTT         Duration          `json:"rtt"`
	Downloaders []DownloaderStats `json:"downloaders"`
	DomainBytes map[string]int64  `json:"domain_bytes"`
}

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
	pipe := e.rdb.Pipeline()
	counters := pipe.HGetAll(ctx, StatsKey(slug))
	bytes := pipe.HGetAll(ctx, DownloaderBytesKey(slug))
	items := pipe.HGetAll(ctx, DownloaderItemsKey(slug))
	versions := pipe.HGetAll(ctx, DownloaderVersionKey(slug))
	domains := pipe.HGetAll(ctx, DomainBytesKey(slug))
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, unavailable(op, err)
	}
	s := Stats{Counts: counts, Counters: intMap(counters.Val()), DomainBytes: intMap(domains.Val())}
	c := s.Counters
	s.IRSR = ratio(c["requests_served"], c["requests"])
	s.ReclaimRate = ratio(c["items_reclaimed"], c["items_served"]-c["reclaims_served"])
	s.ReclaimServeRate = ratio(c["requests_served_reclaim"], c["requests_served"])
	if c["rtt_count"] > 0 {
		s.RTT = Duration(time.Duration(c["rtt_ms_sum"]/c["rtt_count"]) * time.Millisecond)
	}
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
// the JSON objects done.lua stored.
func (e *Engine) Recent(ctx context.Context, slug string, n int) ([]json.RawMessage, error) {
	if err := ValidateSlug(slug); err != nil {
		return nil, err
	}
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
