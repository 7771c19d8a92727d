package server

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// StatsReader is what the public stats.json needs from the engine.
type StatsReader interface {
	Stats(ctx context.Context, slug string) (queues.Stats, error)
}

// DefaultStatsDownloaders is how many downloaders stats.json lists by
// bytes and by items: a project's page cannot show tens of thousands of
// rows, and every viewer would download them on each refresh.
const DefaultStatsDownloaders = 500

// StatsJSON serves GET /<slug>/stats.json: a project's queues.Stats,
// public and readable cross-origin (userscripts fetch it). Each frontend
// reads one project's stats at most once per CacheFor, however many pages
// poll it.
type StatsJSON struct {
	Engine StatsReader
	// Clock times the cache; nil is the wall clock.
	Clock queues.Clock
	// CacheFor is how long one read is reused and the max-age sent;
	// zero is DefaultPageCacheFor.
	CacheFor time.Duration
	// MaxDownloaders caps the list (the top ones by bytes and the top ones
	// by items); zero is DefaultStatsDownloaders.
	MaxDownloaders int

	once  sync.Once
	cache *sharedJSON
}

// statsReply is stats.json: the engine's Stats with the downloader list
// capped, and what the page needs to merge it with the live stream.
type statsReply struct {
	queues.Stats
	// DownloadersTotal counts every downloader, listed or not.
	DownloadersTotal int `json:"downloaders_total"`
	// GeneratedAt is when the stats were read (Unix ms), so the page can
	// add back live completions newer than them.
	GeneratedAt int64 `json:"generated_at"`
}

// statsJSONSlug reports whether path is exactly /<slug>/stats.json, and
// the slug. The slug is not validated here.
func statsJSONSlug(path string) (string, bool) {
	slug, ok := strings.CutSuffix(strings.TrimPrefix(path, "/"), "/stats.json")
	if !ok || slug == "" || strings.Contains(slug, "/") {
		return "", false
	}
	return slug, true
}

func (s *StatsJSON) init() {
	s.once.Do(func() {
		if s.Clock == nil {
			s.Clock = queues.SystemClock{}
		}
		if s.CacheFor <= 0 {
			s.CacheFor = DefaultPageCacheFor
		}
		if s.MaxDownloaders <= 0 {
			s.MaxDownloaders = DefaultStatsDownloaders
		}
		s.cache = newSharedJSON(s.CacheFor, s.Clock)
	})
}

// Serve answers for one slug; WarriorAPI.Dispatch routes here.
func (s *StatsJSON) Serve(c *gin.Context, slug string) {
	s.init()
	c.Header("Access-Control-Allow-Origin", "*")
	if c.Request.Method != http.MethodGet {
		c.Header("Allow", http.MethodGet)
		_ = c.Error(&httpError{Status: http.StatusMethodNotAllowed, Code: "method", Message: "stats.json is read with GET"})
		return
	}
	if err := queues.ValidateSlug(slug); err != nil {
		// Every name that cannot be a project is simply not one.
		_ = c.Error(&queues.Error{Op: "server.stats", Code: queues.CodeProjectNotFound, Message: "no such project", Err: err})
		return
	}
	body, err := s.cache.get(c.Request.Context(), slug, func(ctx context.Context) (any, error) {
		generated := s.Clock.Now()
		stats, err := s.Engine.Stats(ctx, slug)
		if err != nil {
			return nil, err
		}
		total := len(stats.Downloaders)
		stats.Downloaders = topDownloaders(stats.Downloaders, s.MaxDownloaders)
		return statsReply{Stats: stats, DownloadersTotal: total, GeneratedAt: generated.UnixMilli()}, nil
	})
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Cache-Control", publicMaxAge(s.CacheFor))
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

// topDownloaders keeps the top n by bytes and the top n by items, so the
// page's table is right whichever it ranks by, ordered by bytes.
func topDownloaders(all []queues.DownloaderStats, n int) []queues.DownloaderStats {
	if len(all) <= n {
		return all
	}
	byBytes := slices.Clone(all)
	slices.SortFunc(byBytes, func(a, b queues.DownloaderStats) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Name, b.Name))
	})
	byItems := slices.Clone(all)
	slices.SortFunc(byItems, func(a, b queues.DownloaderStats) int {
		return cmp.Or(cmp.Compare(b.Items, a.Items), strings.Compare(a.Name, b.Name))
	})
	keep := make(map[string]bool, 2*n)
	for i := range n {
		keep[byBytes[i].Name] = true
		keep[byItems[i].Name] = true
	}
	out := make([]queues.DownloaderStats, 0, len(keep))
	for _, d := range byBytes {
		if keep[d.Name] {
			out = append(out, d)
		}
	}
	return out
}

// publicMaxAge lets browsers and shared caches reuse a reply as long as
// this frontend does.
func publicMaxAge(d time.Duration) string {
	return fmt.Sprintf("public, max-age=%d", int(math.Ceil(d.Seconds())))
}
