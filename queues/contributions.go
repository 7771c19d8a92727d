package queues

import (
	"context"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Contributions are one downloader's work across every project, all time
// (for as long as each project exists): the leaderboards' own counters,
// read for one name, plus its pace over each project's "now" window.
type Contributions struct {
	Downloader string         `json:"downloader"`
	Items      int64          `json:"items"`
	Bytes      int64          `json:"bytes"`
	Projects   []Contribution `json:"projects"`
	// GeneratedAt is when these were read.
	GeneratedAt time.Time `json:"generated_at"`
}

// Contribution is one downloader's work in one project.
type Contribution struct {
	Project string `json:"project"`
	Title   string `json:"title,omitempty"`
	Items   int64  `json:"items"`
	Bytes   int64  `json:"bytes"`
	// Version is the script version it last completed items with.
	Version string `json:"version,omitempty"`
	// Recent is its pace in the project's "now" window (Rates.Now).
	Recent DownloaderRate `json:"recent"`
}

// Contributions reads downloader's work in every project include accepts
// (nil: every project): one pipeline of a few reads per project, so the
// cost grows with the number of projects, not with the downloader's work.
// A downloader with no work anywhere gets an empty Projects list.
func (e *Engine) Contributions(ctx context.Context, downloader string, include func(slug string) bool) (Contributions, error) {
	const op = "queues.Contributions"
	if err := ValidateDownloader(downloader); err != nil {
		return Contributions{}, err
	}
	slugs, err := e.Projects(ctx)
	if err != nil {
		return Contributions{}, err
	}
	now := e.clock.Now().UTC()
	type read struct {
		slug    string
		config  *redis.MapStringStringCmd
		bytes   *redis.StringCmd
		items   *redis.StringCmd
		version *redis.StringCmd
		recent  []*redis.SliceCmd
	}
	pipe := e.rdb.Pipeline()
	var reads []read
	for _, slug := range slugs {
		if include != nil && !include(slug) {
			continue
		}
		// This frontend's own buffered counts are in what it reads.
		if err := e.flushCounters(ctx, slug); err != nil {
			return Contributions{}, err
		}
		r := read{slug: slug,
			config:  pipe.HGetAll(ctx, ConfigKey(slug)),
			bytes:   pipe.HGet(ctx, DownloaderBytesKey(slug), downloader),
			items:   pipe.HGet(ctx, DownloaderItemsKey(slug), downloader),
			version: pipe.HGet(ctx, DownloaderVersionKey(slug), downloader),
		}
		// Every bucket the longest "now" window can read; the project's
		// creation time trims the window once the config is read.
		start := now.Truncate(RecentBucket).Add(-nowWindowBuckets * RecentBucket)
		for t := start; !t.After(now); t = t.Add(RecentBucket) {
			r.recent = append(r.recent, pipe.HMGet(ctx, RecentDownloadersKey(slug, t), "i "+downloader, "b "+downloader))
		}
		reads = append(reads, r)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return Contributions{}, unavailable(op, err)
	}
	c := Contributions{Downloader: downloader, Projects: []Contribution{}, GeneratedAt: now}
	for _, r := range reads {
		h := r.config.Val()
		if _, ok := h["created_at"]; !ok {
			continue // deleted since it was listed
		}
		p := Contribution{Project: r.slug, Title: settingsFromHash(h).Title,
			Bytes: atoi(r.bytes.Val()), Items: atoi(r.items.Val()), Version: r.version.Val()}
		var items, bytes int64
		for _, cmd := range r.recent {
			if v := cmd.Val(); len(v) == 2 {
				items += atoi(strValue(v[0]))
				bytes += atoi(strValue(v[1]))
			}
		}
		if p.Items == 0 && p.Bytes == 0 && items == 0 {
			continue
		}
		nowStart, _ := windows(now, time.UnixMilli(atoi(h["created_at"])))
		w := newWindow(nowStart, now, items, bytes)
		p.Recent = DownloaderRate{Name: downloader, Items: items, Bytes: bytes,
			ItemsPerMinute: w.ItemsPerMinute, BytesPerSecond: w.BytesPerSecond}
		c.Items += p.Items
		c.Bytes += p.Bytes
		c.Projects = append(c.Projects, p)
	}
	sort.Slice(c.Projects, func(i, j int) bool {
		a, b := c.Projects[i], c.Projects[j]
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		return a.Project < b.Project
	})
	return c, nil
}
