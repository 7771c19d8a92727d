package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// OffloadEngine is what the offload admin calls need: this frontend's
// offloader, which owns the segment files in its data directory.
type OffloadEngine interface {
	Segments(ctx context.Context, slug string) ([]queues.Segment, error)
	MoveSegments(ctx context.Context, slug string, from, to queues.Queue) (int64, error)
	ExportQueue(ctx context.Context, slug string, q queues.Queue, w io.Writer) (int64, error)
	ExportArchive(ctx context.Context, slug string, w io.Writer) (int64, error)
	RemoveProjectFiles(ctx context.Context, slug string) (int, error)
}

// The admin calls on offloaded items (methods of AdminAPI):
//
//	GET  /api/v1/projects/:slug/segments            the segment records
//	POST /api/v1/projects/:slug/segments/move       {"from":"todo","to":"secondary"}
//	GET  /api/v1/projects/:slug/queues/:queue/export every item of a queue, one per line
//	GET  /api/v1/projects/:slug/archive/export      every archived completion
//
// Exports stream text/plain that `hoard queue add` reads back. The item
// count comes last, in the Hoard-Export-Items trailer: a reader without it
// got a broken export.
func (a *AdminAPI) registerOffload(g *gin.RouterGroup) {
	g.GET("/projects/:slug/segments", a.segments)
	g.POST("/projects/:slug/segments/move", a.moveSegments)
	g.GET("/projects/:slug/queues/:queue/export", a.exportQueue)
	g.GET("/projects/:slug/archive/export", a.exportArchive)
}

func (a *AdminAPI) offloadAvailable(c *gin.Context) bool {
	if a.Offloader == nil {
		_ = c.Error(&httpError{Status: http.StatusServiceUnavailable, Code: "offload_off",
			Message: "this frontend runs no offloader (start hoard serve with a data directory)"})
		return false
	}
	return true
}

func (a *AdminAPI) segments(c *gin.Context) {
	if !a.offloadAvailable(c) {
		return
	}
	segments, err := a.Offloader.Segments(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"segments": segments})
}

// SegmentMoveRequest moves on-disk segments between shared queues.
type SegmentMoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func (a *AdminAPI) moveSegments(c *gin.Context) {
	if !a.offloadAvailable(c) {
		return
	}
	var req SegmentMoveRequest
	if !a.decode(c, &req) {
		return
	}
	from, err := queues.ParseQueue(req.From)
	if err != nil {
		_ = c.Error(err)
		return
	}
	to, err := queues.ParseQueue(req.To)
	if err != nil {
		_ = c.Error(err)
		return
	}
	moved, err := a.Offloader.MoveSegments(c.Request.Context(), c.Param("slug"), from, to)
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "offloaded segments moved", "from", from, "to", to, "items", moved)
	c.JSON(http.StatusOK, gin.H{"moved": moved})
}

func (a *AdminAPI) exportQueue(c *gin.Context) {
	if !a.offloadAvailable(c) {
		return
	}
	q, err := queues.ParseQueue(c.Param("queue"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.stream(c, func(w io.Writer) (int64, error) {
		return a.Offloader.ExportQueue(c.Request.Context(), c.Param("slug"), q, w)
	})
}

func (a *AdminAPI) exportArchive(c *gin.Context) {
	if !a.offloadAvailable(c) {
		return
	}
	a.stream(c, func(w io.Writer) (int64, error) {
		return a.Offloader.ExportArchive(c.Request.Context(), c.Param("slug"), w)
	})
}

// ExportItemsTrailer carries a complete export's item count.
const ExportItemsTrailer = "Hoard-Export-Items"

// stream writes an export. An error before the first byte is an ordinary
// error reply; after it, the stream is cut short without the trailer, so a
// reader can tell a complete export from a broken one.
func (a *AdminAPI) stream(c *gin.Context, export func(io.Writer) (int64, error)) {
	// A big export streams for longer than the server's write timeout.
	_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Time{})
	c.Header("Content-Type", "text/plain; charset=utf-8")
	c.Header("Trailer", ExportItemsTrailer)
	w := &lazyWriter{c: c}
	buffered := bufio.NewWriterSize(w, 64<<10)
	n, err := export(buffered)
	if err != nil {
		if !w.started {
			_ = c.Error(err)
			return
		}
		// Too late for an error reply: log it and end without the trailer,
		// which is how a reader tells a partial body from a whole export.
		_ = buffered.Flush()
		a.Logger.ErrorContext(c.Request.Context(), "export cut short", "project", c.Param("slug"), "err", err)
		return
	}
	if err := buffered.Flush(); err != nil {
		return
	}
	if !w.started {
		c.Status(http.StatusOK)
	}
	c.Writer.Header().Set(ExportItemsTrailer, strconv.FormatInt(n, 10))
}

// lazyWriter sends the 200 status only with the first byte.
type lazyWriter struct {
	c       *gin.Context
	started bool
}

func (w *lazyWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		w.c.Status(http.StatusOK)
	}
	return w.c.Writer.Write(p)
}
