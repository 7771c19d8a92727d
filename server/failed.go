package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// The failed items' admin routes (docs/failed-items.md): list and export
// are project reads, requeue and delete project writes (auth.go).

func (a *AdminAPI) registerFailed(g *gin.RouterGroup) {
	g.GET("/projects/:slug/failed", a.listFailed)
	g.GET("/projects/:slug/failed/export", a.exportFailed)
	g.POST("/projects/:slug/failed/requeue", a.requeueFailed)
	g.POST("/projects/:slug/failed/delete", a.deleteFailed)
}

// FailedPage is a page of GET …/failed; pass Next back as cursor for the
// following page ("" = no more).
type FailedPage struct {
	Failed []queues.FailedItem `json:"failed"`
	Next   string              `json:"next"`
}

// listFailed serves GET /projects/:slug/failed[?limit=&cursor=].
func (a *AdminAPI) listFailed(c *gin.Context) {
	limit := queues.MaxFailedPage
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil {
			_ = c.Error(badRequest("limit %q is not a number", raw))
			return
		}
		limit = n
	}
	var cursor uint64
	if raw := c.Query("cursor"); raw != "" {
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			_ = c.Error(badRequest("cursor %q is not one a listing returned", raw))
			return
		}
		cursor = n
	}
	page, next, err := a.Engine.FailedItems(c.Request.Context(), c.Param("slug"), cursor, limit)
	if err != nil {
		_ = c.Error(err)
		return
	}
	reply := FailedPage{Failed: page}
	if next != 0 {
		reply.Next = strconv.FormatUint(next, 10)
	}
	c.JSON(http.StatusOK, reply)
}

// exportFailed serves GET /projects/:slug/failed/export: every failed item
// as one JSON object per line (item, claims, at, reason, message,
// history), with the line count in the export trailer.
func (a *AdminAPI) exportFailed(c *gin.Context) {
	a.stream(c, func(w io.Writer) (int64, error) {
		var n int64
		var werr error
		enc := json.NewEncoder(w)
		err := a.Engine.EachFailed(c.Request.Context(), c.Param("slug"), func(f queues.FailedItem) bool {
			if werr = enc.Encode(f); werr != nil {
				return false
			}
			n++
			return true
		})
		if err == nil {
			err = werr
		}
		return n, err
	})
}

// FailedRequest names failed items to requeue or delete: the items, or
// every failed item with All (never both, never neither, so an empty list
// sent by mistake touches nothing).
type FailedRequest struct {
	Items []string `json:"items"`
	All   bool     `json:"all"`
	// Queue is where requeued items go: todo (the default), backfeed,
	// secondary or redo.
	Queue string `json:"queue"`
}

func (a *AdminAPI) failedRequest(c *gin.Context) (FailedRequest, bool) {
	var req FailedRequest
	if !a.decode(c, &req) {
		return req, false
	}
	switch {
	case req.All && len(req.Items) > 0:
		_ = c.Error(badRequest("name items or set all, not both"))
		return req, false
	case !req.All && len(req.Items) == 0:
		_ = c.Error(badRequest("name the items, or set all to true for every failed item"))
		return req, false
	case len(req.Items) > queues.MaxEnqueueBatch:
		_ = c.Error(badRequest("%d items in one call; the limit is %d", len(req.Items), queues.MaxEnqueueBatch))
		return req, false
	}
	return req, true
}

// requeueFailed serves POST /projects/:slug/failed/requeue.
func (a *AdminAPI) requeueFailed(c *gin.Context) {
	req, ok := a.failedRequest(c)
	if !ok {
		return
	}
	q, err := queues.ParseQueue(req.Queue)
	if err != nil {
		_ = c.Error(err)
		return
	}
	res, err := a.Engine.RequeueFailed(c.Request.Context(), c.Param("slug"), q, req.Items)
	if err != nil {
		_ = c.Error(err)
		return
	}
	if res.Moved > 0 {
		a.logChange(c, "failed items requeued", "queue", string(q), "items", res.Moved, "all", req.All)
	}
	c.JSON(http.StatusOK, res)
}

// deleteFailed serves POST /projects/:slug/failed/delete.
func (a *AdminAPI) deleteFailed(c *gin.Context) {
	req, ok := a.failedRequest(c)
	if !ok {
		return
	}
	if req.Queue != "" {
		_ = c.Error(badRequest("a delete takes no queue"))
		return
	}
	res, err := a.Engine.DeleteFailed(c.Request.Context(), c.Param("slug"), req.Items)
	if err != nil {
		_ = c.Error(err)
		return
	}
	if res.Moved > 0 {
		a.logChange(c, "failed items deleted", "items", res.Moved, "all", req.All)
	}
	c.JSON(http.StatusOK, res)
}
