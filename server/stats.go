package server

import (
	"context"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// StatsReader is what the public stats.json needs from the engine.
type StatsReader interface {
	Stats(ctx context.Context, slug string) (queues.Stats, error)
}

// StatsJSON serves GET /<slug>/stats.json: a project's queues.Stats,
// public and readable cross-origin (userscripts fetch it).
type StatsJSON struct {
	Engine StatsReader
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

// Serve answers for one slug; WarriorAPI.Dispatch routes here.
func (s *StatsJSON) Serve(c *gin.Context, slug string) {
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
	stats, err := s.Engine.Stats(c.Request.Context(), slug)
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Cache-Control", "max-age=5")
	c.JSON(http.StatusOK, stats)
}
