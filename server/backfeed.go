package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// BackfeedEngine is what the backfeed endpoint needs.
type BackfeedEngine interface {
	CheckBackfeedSecret(ctx context.Context, slug, secret string) error
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
	MaxItems     int // items per request; 0 means DefaultBackfeedItems
}

// DefaultBackfeedBodyBytes caps one backfeed batch (grabs send 400-1000
// items at a time).
const DefaultBackfeedBodyBytes = 8 << 20

// DefaultBackfeedItems caps the items in one batch: 100 times what a grab
// sends, and small enough that one request can't occupy the filter script
// for long.
const DefaultBackfeedItems = 100_000

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

// backfeedControl finds the first control character in a backfeed body
// that is not a separator (see queues.FindControl): the index of its part
// (counting from 0, empty parts included) and its byte offset in that
// part. NUL separates items in a body that has one, else newlines do,
// with an optional CR before each. One pass before the split, no
// allocation; the characters are queues.FindControl's.
func backfeedControl(body []byte) (part, offset int, r rune, found bool) {
	sep := byte(0)
	if bytes.IndexByte(body, 0) < 0 {
		sep = '\n'
	}
	start := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		// Most bytes are printable ASCII or UTF-8 past C2: one compare.
		if c >= 0x20 && c != 0x7f && c != 0xc2 {
			continue
		}
		switch {
		case c == sep:
			part, start = part+1, i+1
		case sep == '\n' && c == '\r' && (i+1 == len(body) || body[i+1] == '\n'):
			// CRLF: the CR is part of the separator.
		case c < 0x20 && c != '\t', c == 0x7f:
			return part, i - start, rune(c), true
		case c == 0xc2 && i+1 < len(body) && body[i+1] >= 0x80 && body[i+1] <= 0x9f:
			return part, i - start, rune(body[i+1]), true
		}
	}
	return 0, 0, 0, false
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
	// The project and secret are checked before the body is read, so a
	// caller without the secret costs one HMGET, not an 8 MiB read and split.
	if err := b.Engine.CheckBackfeedSecret(c.Request.Context(), slug, secret); err != nil {
		b.refuse(c, err)
		return
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(max(c.Request.ContentLength, 512), b.MaxBodyBytes+1)))
	_, err := buf.ReadFrom(http.MaxBytesReader(c.Writer, c.Request.Body, b.MaxBodyBytes))
	body := buf.Bytes()
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
	// A control character refuses the whole batch, naming the item, and
	// queues nothing: a grab script that sends one is broken (binary
	// data, the wrong separator), and its other items are suspect too.
	// The script sees a 400 with the position, not a 200 with a count.
	if part, offset, r, found := backfeedControl(body); found {
		_ = c.Error(badRequest("backfeed item at index %d has the control character U+%04X at byte offset %d; the batch was refused whole and nothing was queued", part, r, offset))
		return
	}
	items, empty := splitBackfeed(body)
	maxItems := b.MaxItems
	if maxItems <= 0 {
		maxItems = DefaultBackfeedItems
	}
	if len(items)+empty > maxItems {
		_ = c.Error(&httpError{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
			Message: "backfeed batch has " + strconv.Itoa(len(items)+empty) + " items; the most one request may carry is " + strconv.Itoa(maxItems) + "; send smaller batches"})
		return
	}
	result, err := b.Engine.Backfeed(c.Request.Context(), slug, secret, items)
	if err != nil {
		b.refuse(c, err)
		return
	}
	result.Received += empty
	result.Rejected += empty
	c.JSON(http.StatusOK, gin.H{
		"status_code": http.StatusOK, "received": result.Received, "new": result.New,
		"duplicate": result.Duplicate, "rejected": result.Rejected, "shard": c.Query("shard"),
	})
}

// refuse renders a backfeed error; a wrong secret is a 403 that names no
// detail of the secret.
func (b *Backfeed) refuse(c *gin.Context, err error) {
	if errors.Is(err, queues.ErrBadSecret) {
		_ = c.Error(&httpError{Status: http.StatusForbidden, Code: "bad_secret", Message: "wrong backfeed secret, or backfeed is off for this project"})
		return
	}
	_ = c.Error(err)
}
