package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// The filters' admin routes (docs/filters.md): listing is a project read,
// adding and removing project writes (auth.go).

func (a *AdminAPI) registerFilters(g *gin.RouterGroup) {
	g.GET("/projects/:slug/filters", a.listFilters)
	g.POST("/projects/:slug/filters", a.addFilter)
	g.DELETE("/projects/:slug/filters/:name", a.removeFilter)
	g.POST("/projects/:slug/filters/sift", a.siftFilters)
}

// FilterSiftReply answers POST /projects/:slug/filters/sift: the queued
// items the filters dropped, and how many were looked at.
type FilterSiftReply struct {
	Dropped int `json:"dropped"`
	Scanned int `json:"scanned"`
}

// siftFilters serves POST /projects/:slug/filters/sift: drops what the
// filters match from what is already queued (shared queues and their limit
// groups' sub-queues), lock-free beside live traffic.
func (a *AdminAPI) siftFilters(c *gin.Context) {
	r, err := a.Engine.SiftFilters(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "queued items sifted by the filters", "dropped", r.Moved, "scanned", r.Scanned)
	c.JSON(http.StatusOK, FilterSiftReply{Dropped: r.Moved, Scanned: r.Scanned})
}

// FiltersReply is the answer of every filters call: the project's list.
type FiltersReply struct {
	Filters []queues.Filter `json:"filters"`
}

// listFilters serves GET /projects/:slug/filters.
func (a *AdminAPI) listFilters(c *gin.Context) {
	a.replyFilters(c)
}

// addFilter serves POST /projects/:slug/filters with one filter; a bad one
// (no or two matchers, a bad RE2 or glob, a taken name) is refused and the
// list stays as it was.
func (a *AdminAPI) addFilter(c *gin.Context) {
	var f queues.Filter
	if !a.decode(c, &f) {
		return
	}
	if err := a.Engine.AddFilter(c.Request.Context(), c.Param("slug"), f); err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "filter added", "filter", f)
	a.replyFilters(c)
}

// removeFilter serves DELETE /projects/:slug/filters/:name.
func (a *AdminAPI) removeFilter(c *gin.Context) {
	if err := a.Engine.RemoveFilter(c.Request.Context(), c.Param("slug"), c.Param("name")); err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "filter removed", "name", c.Param("name"))
	a.replyFilters(c)
}

func (a *AdminAPI) replyFilters(c *gin.Context) {
	filters, err := a.Engine.Filters(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, FiltersReply{Filters: filters})
}
