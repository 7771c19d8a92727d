package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/queues"
)

// PageEngine is what the leaderboard pages read.
type PageEngine interface {
	Projects(ctx context.Context) ([]string, error)
	Project(ctx context.Context, slug string) (queues.Project, error)
	Counts(ctx context.Context, slug string) (queues.Counts, error)
	// Charts fails with queues.CodeProjectNotFound for a missing project.
	Charts(ctx context.Context, slug string) (queues.Charts, error)
	Recent(ctx context.Context, slug string, n int) ([]json.RawMessage, error)
}

// Pages serves the viewers' side: the project index at /, each project's
// page at /<slug>/, its live websocket, and charts.json and recent.json
// (the same data for scripts and userscripts). Each frontend reads one
// project's charts at most once per CacheFor, however many pages poll them.
type Pages struct {
	Engine PageEngine
	Hub    *leaderboard.Hub
	// Clock times the charts cache; nil is the wall clock.
	Clock queues.Clock
	// CacheFor is how long one charts read is reused and the max-age
	// sent; zero is DefaultPageCacheFor.
	CacheFor time.Duration
	// Plugins, when set, lists the plugins and their totals on the index.
	Plugins PluginSource
	// Access, when set, leaves the plugins' private projects off the index.
	Access PluginAccess

	once   sync.Once
	charts *sharedJSON
}

func (p *Pages) init() {
	p.once.Do(func() {
		if p.Clock == nil {
			p.Clock = queues.SystemClock{}
		}
		if p.CacheFor <= 0 {
			p.CacheFor = DefaultPageCacheFor
		}
		p.charts = newSharedJSON(p.CacheFor, p.Clock)
	})
}

// pageResources are the GET paths under /<slug>/ that Pages answers.
var pageResources = map[string]string{
	"": routePage, "charts.json": routeChartsJSON, "recent.json": routeRecentJSON, "ws": routeWebsocket,
}

// pagePath reports whether path is /<slug>/<resource> for a page resource.
func pagePath(path string) (slug, resource string, ok bool) {
	rest := strings.TrimPrefix(path, "/")
	slug, resource, found := strings.Cut(rest, "/")
	if !found || slug == "" || strings.Contains(resource, "/") {
		return "", "", false
	}
	_, ok = pageResources[resource]
	return slug, resource, ok
}

// Serve answers one page resource; WarriorAPI.Dispatch routes here.
func (p *Pages) Serve(c *gin.Context, slug, resource string) {
	p.init()
	if c.Request.Method != http.MethodGet && c.Request.Method != http.MethodHead {
		c.Header("Allow", http.MethodGet)
		_ = c.Error(&httpError{Status: http.StatusMethodNotAllowed, Code: "method", Message: "pages are read with GET"})
		return
	}
	if err := queues.ValidateSlug(slug); err != nil {
		_ = c.Error(&queues.Error{Op: "server.pages", Code: queues.CodeProjectNotFound, Message: "no such project", Err: err})
		return
	}
	ctx := c.Request.Context()
	if resource == "charts.json" {
		// Charts answers "no such project" itself, so the existence check
		// is cached with the charts instead of costing a read per request.
		body, err := p.charts.get(ctx, slug, func(ctx context.Context) (any, error) {
			return p.Engine.Charts(ctx, slug)
		})
		if err != nil {
			_ = c.Error(err)
			return
		}
		c.Header("Access-Control-Allow-Origin", "*")
		c.Header("Cache-Control", publicMaxAge(p.CacheFor))
		c.Data(http.StatusOK, "application/json; charset=utf-8", body)
		return
	}
	if _, err := p.Engine.Project(ctx, slug); err != nil {
		_ = c.Error(err)
		return
	}
	switch resource {
	case "":
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "text/html; charset=utf-8", leaderboard.ProjectPage())
	case "recent.json":
		recent, err := p.Engine.Recent(ctx, slug, 100)
		if err != nil {
			_ = c.Error(err)
			return
		}
		c.Header("Access-Control-Allow-Origin", "*")
		c.Header("Cache-Control", "max-age=2")
		c.JSON(http.StatusOK, recent)
	case "ws":
		// ClientIP is the forwarded address only behind a trusted proxy, so
		// a client cannot dodge its per-address cap with a header.
		if err := p.Hub.Serve(c.Writer, c.Request, slug, c.ClientIP()); err != nil {
			status := http.StatusInternalServerError
			switch {
			case errors.Is(err, leaderboard.ErrTooManyViewersFromAddress):
				status = http.StatusTooManyRequests
				c.Header("Retry-After", "30")
			case errors.Is(err, leaderboard.ErrTooManyViewers), errors.Is(err, leaderboard.ErrHubStopped):
				status = http.StatusServiceUnavailable
			}
			_ = c.Error(&httpError{Status: status, Code: "websocket", Message: err.Error()})
		}
	}
}

type indexRow struct {
	queues.Project
	Counts queues.Counts
}

// Index lists the projects with their counts, and the plugins with
// their totals.
func (p *Pages) Index(c *gin.Context) {
	ctx := c.Request.Context()
	slugs, err := p.Engine.Projects(ctx)
	if err != nil {
		_ = c.Error(err)
		return
	}
	rows := make([]indexRow, 0, len(slugs))
	for _, slug := range slugs {
		if p.Access != nil && p.Access.PrivateProject(slug) {
			continue
		}
		project, err := p.Engine.Project(ctx, slug)
		if err != nil {
			continue
		}
		counts, err := p.Engine.Counts(ctx, slug)
		if err != nil {
			continue
		}
		rows = append(rows, indexRow{Project: project, Counts: counts})
	}
	var page bytes.Buffer
	data := struct {
		Projects []indexRow
		Plugins  []PublicPlugin
	}{rows, publicPlugins(p.Plugins)}
	if err := leaderboard.IndexTemplate.Execute(&page, data); err != nil {
		_ = c.Error(err)
		return
	}
	c.Data(http.StatusOK, "text/html; charset=utf-8", page.Bytes())
}
