package server

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/queues"
)

// routeDownloader labels /downloaders/… on /metrics.
const routeDownloader = "downloader"

// ContributionsReader is what the downloader pages need from the engine.
type ContributionsReader interface {
	Contributions(ctx context.Context, downloader string, include func(slug string) bool) (queues.Contributions, error)
}

// Downloaders serves a downloader's contributions across every project,
// all time (seesaw-kit#166): GET /downloaders/<nick>.json, public and
// readable cross-origin, and the page /downloaders/<nick>/ that draws it.
// Each frontend reads one nickname at most once per CacheFor.
type Downloaders struct {
	Engine ContributionsReader
	// Clock times the cache; nil is the wall clock.
	Clock queues.Clock
	// CacheFor is how long one read is reused and the max-age sent; zero
	// is DefaultPageCacheFor.
	CacheFor time.Duration
	// Access, when set, leaves the plugins' private projects out.
	Access PluginAccess

	once  sync.Once
	cache *sharedJSON
}

func (d *Downloaders) init() {
	d.once.Do(func() {
		if d.Clock == nil {
			d.Clock = queues.SystemClock{}
		}
		if d.CacheFor <= 0 {
			d.CacheFor = DefaultPageCacheFor
		}
		d.cache = newSharedJSON(d.CacheFor, d.Clock)
	})
}

// noContributions is how an encoded queues.Contributions with no project
// reads; the nickname cannot hold a quote, so it cannot forge it.
var noContributions = []byte(`"projects":[]`)

// downloaderRequest is a parsed /downloaders/ path.
type downloaderRequest struct {
	Nick string
	JSON bool // <nick>.json rather than the page
	// Redirect: "<nick>" without the slash, sent to "<nick>/" so the
	// page's relative links work.
	Redirect bool
}

// parseDownloaderPath parses the part after /downloaders/: "<nick>.json",
// "<nick>/" or "<nick>"; a nickname that breaks seesaw's rule is an error.
func parseDownloaderPath(path string) (downloaderRequest, error) {
	var r downloaderRequest
	switch {
	case strings.HasSuffix(path, ".json"):
		r.Nick, r.JSON = strings.TrimSuffix(path, ".json"), true
	case strings.HasSuffix(path, "/"):
		r.Nick = strings.TrimSuffix(path, "/")
	default:
		r.Nick, r.Redirect = path, true
	}
	if err := queues.ValidateDownloader(r.Nick); err != nil {
		return downloaderRequest{}, err
	}
	return r, nil
}

// Serve answers GET /downloaders/*path: "<nick>.json" or "<nick>/".
func (d *Downloaders) Serve(c *gin.Context) {
	d.init()
	c.Set(routeKey, routeDownloader)
	r, err := parseDownloaderPath(strings.TrimPrefix(c.Param("path"), "/"))
	switch {
	case err != nil:
		if strings.HasSuffix(c.Param("path"), ".json") {
			c.Header("Access-Control-Allow-Origin", "*")
		}
		_ = c.Error(err)
	case r.JSON:
		d.json(c, r.Nick)
	case r.Redirect:
		c.Redirect(http.StatusMovedPermanently, "/downloaders/"+r.Nick+"/")
	default:
		// The page is static: downloader.js reads the nickname from the
		// URL and writes it as text only.
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "text/html; charset=utf-8", leaderboard.DownloaderPage())
	}
}

func (d *Downloaders) json(c *gin.Context, nick string) {
	c.Header("Access-Control-Allow-Origin", "*")
	body, err := d.cache.get(c.Request.Context(), nick, func(ctx context.Context) (any, error) {
		var include func(string) bool
		if d.Access != nil {
			include = func(slug string) bool { return !d.Access.PrivateProject(slug) }
		}
		return d.Engine.Contributions(ctx, nick, include)
	})
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Cache-Control", publicMaxAge(d.CacheFor))
	if bytes.Contains(body, noContributions) {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "no_contributions",
			Message: "no project has work by this downloader"})
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}
