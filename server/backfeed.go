package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// BackfeedEngine is what the backfeed endpoint needs.
type BackfeedEngine interface {
	Backfeed(ctx context.Context, slug, secret string, items []string) (queues.BackfeedResult, error)
}

// Backfeed serves POST /backfeed/legacy/<slug>-<secret>[?shard=<name>]:
// grab scripts send the items they discover, NUL-separated (with a
// trailing NUL) or one per line, with LuaSocket's simple http.request, which
// labels the body as a form. The body is read raw and never parsed as a
// form.
type Backfeed struct {
	Engine       BackfeedEngine
	MaxBodyBytes int64
}

// DefaultBackfeedBodyBytes caps one backfeed batch (grabs send 400-1000
// items at a time).
const DefaultBackfeedBodyBytes = 8 << 20

// splitBackfeed splits a body on NUL, or on newlines when it has no NUL.
// One trailing separator is allowed; empty items are counted as rejected.
func splitBackfeed(body []byte) (items []string, empty int) {
	sep := []byte{0}
	if bytes.IndexByte(body, 0) < 0 {
		sep = []byte{'\n'}
	}
	body = bytes.TrimSuffix(body, sep)
	if len(body) == 0 {
		return nil, 0
	}
	for _, part := range bytes.Split(body, sep) {
		if sep[0] == '\n' {
			part = bytes.TrimSuffix(part, []byte{'\r'})
		}
		if len(part) == 0 {
			empty++
			continue
		}
		items = append(items, string(part))
	}
	return items, empty
}

// Serve handles one batch.
func (b *Backfeed) Serve(c *gin.Context) {
	key := c.Param("key")
	cut := strings.LastIndexByte(key, '-')
	if cut <= 0 || cut == len(key)-1 {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "project_not_found", Message: "backfeed URLs are /backfeed/legacy/<project>-<secret>"})
		return
	}
	slug, secret := key[:cut], key[cut+1:]
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, b.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		_ = c.Error(&httpError{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
			Message: "backfeed body is larger than " + strconv.FormatInt(b.MaxBodyBytes, 10) + " bytes; send smaller batches"})
		return
	}
	if err != nil {
		_ = c.Error(badRequest("could not read the body: %v", err))
		return
	}
	items, empty := splitBackfeed(body)
	result, err := b.Engine.Backfeed(c.Request.Context(), slug, secret, items)
	if err != nil {
		if errors.Is(err, queues.ErrBadSecret) {
			_ = c.Error(&httpError{Status: http.StatusForbidden, Code: "bad_secret", Message: "wrong backfeed secret, or backfeed is off for this project"})
			return
		}
		_ = c.Error(err)
		return
	}
	result.Received += empty
	result.Rejected += empty
	c.JSON(http.StatusOK, gin.H{
		"status_code": http.StatusOK, "received": result.Received, "new": result.New,
		"duplicate": result.Duplicate, "rejected": result.Rejected, "shard": c.Query("shard"),
	})
}
