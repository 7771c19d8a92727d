package queues

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Charts are a project's downsampled history: per minute for the last
// day, per hour for the last 30 days, and the top downloaders' bytes per
// hour for the last 7 days. The series keys expire, so memory is bounded
// whatever the project's age.
type Charts struct {
	Now            time.Time          `json:"now"`
	ItemsDoneTotal int64              `json:"items_done_total"`
	BytesDoneTotal int64              `json:"bytes_done_total"`
	Minutes        []SeriesPoint      `json:"minutes"`
	Hours          []SeriesPoint      `json:"hours"`
	Downloaders    []DownloaderSeries `json:"downloaders"`
}

// SeriesPoint is one bucket: items and bytes done in it.
type SeriesPoint struct {
	T     int64 `json:"t"` // bucket start, Unix seconds
	Items int64 `json:"items"`
	Bytes int64 `json:"bytes"`
}

// DownloaderSeries is one downloader's bytes per hour.
type DownloaderSeries struct {
	Name  string  `json:"name"`
	Total int64   `json:"total"`
	Bytes []int64 `json:"bytes"` // one per hour, aligned with HoursStart
	Start int64   `json:"start"` // first hour, Unix seconds
}

// Charts reads a project's chart history.
func (e *Engine) Charts(ctx context.Context, slug string) (Charts, error) {
	const op = "queues.Charts"
	if _, err := e.Project(ctx, slug); err != nil {
		return Charts{}, err
	}
	if err := e.flushCounters(ctx, slug); err != nil {
		return Charts{}, err
	}
	now := e.clock.Now().UTC()
	thisMinute := now.Truncate(time.Minute)
	thisHour := now.Truncate(time.Hour)
	pipe := e.rdb.Pipeline()
	stats := pipe.HMGet(ctx, StatsKey(slug), "items_done", "bytes_done")
	days := map[string]*redis.MapStringStringCmd{}
	for _, d := range []time.Time{now, now.Add(-24 * time.Hour)} {
		days[d.Format("20060102")] = pipe.HGetAll(ctx, SeriesMinuteKey(slug, d))
	}
	years := map[string]*redis.MapStringStringCmd{}
	for _, y := range []time.Time{now, now.AddDate(0, 0, -31)} {
		years[y.Format("2006")] = pipe.HGetAll(ctx, SeriesHourKey(slug, y))
	}
	dayDownloaders := make([]*redis.MapStringStringCmd, 8)
	for i := range dayDownloaders {
		dayDownloaders[i] = pipe.HGetAll(ctx, SeriesDownloaderKey(slug, now.AddDate(0, 0, i-7)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Charts{}, unavailable(op, err)
	}
	c := Charts{Now: now}
	if v := stats.Val(); len(v) == 2 {
		c.ItemsDoneTotal, _ = strconv.ParseInt(strValue(v[0]), 10, 64)
		c.BytesDoneTotal, _ = strconv.ParseInt(strValue(v[1]), 10, 64)
	}
	for i := 1439; i >= 0; i-- {
		t := thisMinute.Add(-time.Duration(i) * time.Minute)
		h := days[t.Format("20060102")].Val()
		field := t.Format("1504")
		c.Minutes = append(c.Minutes, SeriesPoint{T: t.Unix(), Items: atoi(h[field]), Bytes: atoi(h[field+"b"])})
	}
	for i := 30*24 - 1; i >= 0; i-- {
		t := thisHour.Add(-time.Duration(i) * time.Hour)
		cmd, ok := years[t.Format("2006")]
		if !ok {
			c.Hours = append(c.Hours, SeriesPoint{T: t.Unix()})
			continue
		}
		h := cmd.Val()
		field := t.Format("010215")
		c.Hours = append(c.Hours, SeriesPoint{T: t.Unix(), Items: atoi(h[field]), Bytes: atoi(h[field+"b"])})
	}
	// Top downloaders over the last 7 days (168 hours).
	start := thisHour.Add(-167 * time.Hour)
	series := map[string]*DownloaderSeries{}
	for i, cmd := range dayDownloaders {
		day := now.AddDate(0, 0, i-7).Truncate(24 * time.Hour)
		for field, v := range cmd.Val() {
			hh, name, ok := strings.Cut(field, " ")
			hour, err := strconv.Atoi(hh)
			if !ok || err != nil {
				continue
			}
			t := time.Date(day.Year(), day.Month(), day.Day(), hour, 0, 0, 0, time.UTC)
			idx := int(t.Sub(start) / time.Hour)
			if idx < 0 || idx >= 168 {
				continue
			}
			s := series[name]
			if s == nil {
				s = &DownloaderSeries{Name: name, Bytes: make([]int64, 168), Start: start.Unix()}
				series[name] = s
			}
			n := atoi(v)
			s.Bytes[idx] += n
			s.Total += n
		}
	}
	for _, s := range series {
		c.Downloaders = append(c.Downloaders, *s)
	}
	sort.Slice(c.Downloaders, func(i, j int) bool {
		if c.Downloaders[i].Total != c.Downloaders[j].Total {
			return c.Downloaders[i].Total > c.Downloaders[j].Total
		}
		return c.Downloaders[i].Name < c.Downloaders[j].Name
	})
	if len(c.Downloaders) > 10 {
		c.Downloaders = c.Downloaders[:10]
	}
	return c, nil
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func strValue(v any) string {
	s, _ := v.(string)
	return s
}
