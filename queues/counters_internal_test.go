package queues

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
)

// counterModel is what claims and dones must add to Redis, written as the
// hash fields each request adds to (what countClaim and countDone did
// before the counts were kept in fixed structs and summed at the flush):
// key -> field -> sum, the values HSET last, and each key's TTL.
type counterModel struct {
	adds map[string]map[string]int64
	sets map[string]map[string]string
	ttls map[string]time.Duration
}

func (m *counterModel) add(key string, ttl time.Duration, field string, n int64) {
	if m.adds[key] == nil {
		m.adds[key] = map[string]int64{}
	}
	m.adds[key][field] += n
	m.ttls[key] = ttl
}

func (m *counterModel) claim(slug string, now time.Time, code int64, detail string, items, reclaims int64) {
	stats, hourly := StatsKey(slug), HourlyKey(slug, now)
	switch code {
	case codeBlocked:
		m.add(stats, 0, "requests_blocked", 1)
		return
	case codeTooOld:
		m.add(stats, 0, "requests_too_old", 1)
		return
	case codeRateLimited, 0, 1:
	default:
		return
	}
	m.add(stats, 0, "requests", 1)
	m.add(hourly, HourlyRetention, "requests", 1)
	switch code {
	case codeRateLimited:
		m.add(stats, 0, "requests_rate_limited", 1)
	case 0:
		m.add(stats, 0, "requests_empty", 1)
		if detail == "group_limit" {
			m.add(stats, 0, "requests_group_limited", 1)
		}
	case 1:
		m.add(stats, 0, "requests_served", 1)
		m.add(stats, 0, "items_served", items)
		m.add(hourly, HourlyRetention, "requests_served", 1)
		if reclaims > 0 {
			m.add(stats, 0, "requests_served_reclaim", 1)
			m.add(stats, 0, "reclaims_served", reclaims)
			m.add(hourly, HourlyRetention, "requests_served_reclaim", 1)
		}
	}
}

func (m *counterModel) done(req DoneRequest, now time.Time, total int64, fresh int, rttSum, rttCount int64) {
	slug, d, n := req.Project, req.Downloader, int64(fresh)
	utc := now.UTC()
	minute, hour := utc.Format("1504"), utc.Format("010215")
	stats, hourly := StatsKey(slug), HourlyKey(slug, now)
	m.add(stats, 0, "items_done", n)
	m.add(stats, 0, "bytes_done", total)
	if rttCount > 0 {
		m.add(stats, 0, "rtt_ms_sum", rttSum)
		m.add(stats, 0, "rtt_count", rttCount)
	}
	m.add(hourly, HourlyRetention, "items_done", n)
	m.add(hourly, HourlyRetention, "bytes_done", total)
	m.add(DownloaderBytesKey(slug), 0, d, total)
	m.add(DownloaderItemsKey(slug), 0, d, n)
	if req.Version != "" {
		if m.sets[DownloaderVersionKey(slug)] == nil {
			m.sets[DownloaderVersionKey(slug)] = map[string]string{}
		}
		m.sets[DownloaderVersionKey(slug)][d] = req.Version
		m.ttls[DownloaderVersionKey(slug)] = 0
	}
	for g, b := range req.Bytes {
		m.add(DomainBytesKey(slug), 0, g, b)
	}
	m.add(SeriesMinuteKey(slug, now), seriesMinuteTTL, minute, n)
	m.add(SeriesMinuteKey(slug, now), seriesMinuteTTL, minute+"b", total)
	m.add(SeriesHourKey(slug, now), seriesHourTTL, hour, n)
	m.add(SeriesHourKey(slug, now), seriesHourTTL, hour+"b", total)
	m.add(SeriesDownloaderKey(slug, now), seriesDownloaderTTL, hour[4:6]+" "+d, total)
	m.add(RecentDownloadersKey(slug, now), RecentBucketTTL, "i "+d, n)
	m.add(RecentDownloadersKey(slug, now), RecentBucketTTL, "b "+d, total)
}

// TestCountersFlushWhatEachRequestAdds: claims and dones of two projects
// and three downloaders, across a minute's, an hour's, a day's and a
// year's turn, with a done counted late in a minute already past, a
// failed flush in the middle and versions changing, write to Redis
// exactly the fields and sums the requests' own adds give (counterModel),
// with the TTLs the hashes had: no field more, none less, none counted
// twice.
func TestCountersFlushWhatEachRequestAdds(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		start := time.Date(2026, 12, 31, 23, 59, 58, 0, time.UTC)
		clock := NewFakeClock(start)
		e := NewEngine(b.Client, Options{Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		model := &counterModel{adds: map[string]map[string]int64{}, sets: map[string]map[string]string{}, ttls: map[string]time.Duration{}}

		claim := func(slug string, now time.Time, code int64, detail string, items, reclaims int64) {
			e.countClaim(ctx, slug, now, code, detail, items, reclaims)
			model.claim(slug, now, code, detail, items, reclaims)
		}
		done := func(slug, downloader, version string, bytes map[string]int64, now time.Time, fresh int, rttSum, rttCount int64) {
			req := DoneRequest{Project: slug, Downloader: downloader, Version: version, Bytes: bytes}
			var total int64
			groups := []string{}
			for g, n := range bytes {
				total += n
				groups = append(groups, g)
			}
			e.countDone(ctx, req, now, total, groups, fresh, rttSum, rttCount)
			model.done(req, now, total, fresh, rttSum, rttCount)
		}
		round := func(now time.Time, i int64) {
			for _, slug := range []string{"cnt", "cnt2"} {
				claim(slug, now, 1, "", 1, 0)
				claim(slug, now, 1, "", 3, 2)
				claim(slug, now, 0, "group_limit", 0, 0)
				claim(slug, now, 0, "empty", 0, 0)
				claim(slug, now, codeRateLimited, "", 0, 0)
				claim(slug, now, codeBlocked, "", 0, 0)
				claim(slug, now, codeTooOld, "", 0, 0)
				claim(slug, now, codeNoProject, "", 0, 0) // not counted
				done(slug, "alice", "v"+strconv.FormatInt(i, 10), map[string]int64{"data": 1000 + i, "warc": 7}, now, 1, 40+i, 1)
				done(slug, "bob", "", map[string]int64{"data": 0}, now, 3, 0, 0)
				done(slug, "carol", "c1", nil, now, 2, 9, 2)
			}
		}
		round(start, 1)                                                                            // 2026-12-31 23:59
		round(start.Add(3*time.Second), 2)                                                         // 2027-01-01 00:00: every time-named key turns
		done("cnt", "alice", "late", map[string]int64{"data": 5}, start.Add(time.Second), 1, 3, 1) // 23:59, counted after 00:00
		// A failed flush keeps its counts; a version set after it wins.
		failed, cancel := context.WithCancel(ctx)
		cancel()
		require.Error(t, e.FlushCounters(failed))
		round(start.Add(70*time.Second), 3) // 00:01
		require.NoError(t, e.FlushCounters(ctx))
		round(start.Add(75*time.Second), 4)
		require.NoError(t, e.flushCounters(ctx, "cnt"))
		require.NoError(t, e.FlushCounters(ctx))
		require.NoError(t, e.FlushCounters(ctx), "an empty buffer flushes nothing")
		// A project with only what adds no field of its own: a blocked
		// request, and dones with no bytes, no groups, no version, no
		// claim-to-done time.
		claim("cnt3", start, codeBlocked, "", 0, 0)
		done("cnt3", "bob", "", nil, start, 1, 0, 0)
		require.NoError(t, e.FlushCounters(ctx))

		keys := map[string]bool{}
		for key := range model.adds {
			keys[key] = true
		}
		for key := range model.sets {
			keys[key] = true
		}
		require.Len(t, keys, 2*(5+2*5)+3+5, "per project 5 keys named by the project, 5 by the time in each of 2 days; cnt3 no domain_bytes or downloader_version")
		for key := range keys {
			got, err := b.Client.HGetAll(ctx, key).Result()
			require.NoError(t, err)
			want := map[string]string{}
			for field, n := range model.adds[key] {
				want[field] = strconv.FormatInt(n, 10)
			}
			for field, v := range model.sets[key] {
				want[field] = v
			}
			require.Equal(t, want, got, key)
			ttl, err := b.Client.TTL(ctx, key).Result()
			require.NoError(t, err)
			if model.ttls[key] == 0 {
				require.Equal(t, time.Duration(-1), ttl, "%s has no TTL", key)
			} else {
				require.True(t, ttl > 0 && ttl <= model.ttls[key], "%s: TTL %s, want up to %s", key, ttl, model.ttls[key])
			}
		}
		require.Equal(t, "v4", model.sets[DownloaderVersionKey("cnt")]["alice"], "the model's latest version")
	})
}

// TestCountersKeepTheVersionOfTheLatestMinute: a done counted late, after
// one from the next minute, does not take the downloader's version back,
// whatever the order the minutes were first counted in.
func TestCountersKeepTheVersionOfTheLatestMinute(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		start := time.Date(2026, 12, 31, 23, 59, 58, 0, time.UTC)
		e := NewEngine(b.Client, Options{Clock: NewFakeClock(start), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		done := func(version string, now time.Time) {
			e.countDone(ctx, DoneRequest{Project: "cnt", Downloader: "alice", Version: version}, now, 1, nil, 1, 0, 0)
		}
		done("2", start.Add(3*time.Second)) // 00:00 first
		done("1", start)                    // then 23:59, late
		require.NoError(t, e.FlushCounters(ctx))
		version, err := b.Client.HGet(ctx, DownloaderVersionKey("cnt"), "alice").Result()
		require.NoError(t, err)
		require.Equal(t, "2", version)
		items, err := b.Client.HGet(ctx, DownloaderItemsKey("cnt"), "alice").Int64()
		require.NoError(t, err)
		require.EqualValues(t, 2, items)
	})
}

// BenchmarkCountOneItem counts a one-item claim and its done (countClaim,
// countDone) from parallel callers of 32 downloaders, as the engine does
// after each script reply: the frontend's counting alone, with its flush
// to Redis once a second.
func BenchmarkCountOneItem(b *testing.B) {
	backend := redistest.Require(b)[0]
	ctx := context.Background()
	if err := redistest.Flush(ctx, backend); err != nil {
		b.Fatal(err)
	}
	e := NewEngine(backend.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := DoneRequest{Project: "bench", Downloader: fmt.Sprintf("bench%03d", worker.Add(1)%32), Version: "20260101.01",
			Items: []string{"item"}, Bytes: map[string]int64{"data": 1000}}
		groups := []string{"data"}
		for pb.Next() {
			now := e.clock.Now()
			e.countClaim(ctx, "bench", now, 1, "", 1, 0)
			e.countDone(ctx, req, now, 1000, groups, 1, 1234, 1)
		}
	})
	b.StopTimer()
	if err := e.FlushCounters(ctx); err != nil {
		b.Fatal(err)
	}
	n, err := backend.Client.HGet(ctx, StatsKey("bench"), "items_done").Int64()
	if err != nil || n != int64(b.N) {
		b.Fatalf("items_done %d (%v), want %d", n, err, b.N)
	}
}
