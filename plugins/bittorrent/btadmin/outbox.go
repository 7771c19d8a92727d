package btadmin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// The outbox calls, for a site that polls instead of (or besides)
// receiving the webhook, and for operators:
//
//	GET  /api/v1/bittorrent/outbox/events?after=ID&limit=N   pending events after the cursor, in id order
//	POST /api/v1/bittorrent/outbox/ack         {"ids":["17","18"]}   mark them delivered
//	GET  /api/v1/bittorrent/outbox/stats                     sizes and counters
//	GET  /api/v1/bittorrent/outbox/dead?after=ID&limit=N     events whose attempts ran out
//	POST /api/v1/bittorrent/outbox/dead/retry  {"ids":[…]} or {"all":true}   deliver them again
//
// after is the id of the last event seen ("" or absent: from the start);
// limit is 1-1000 (100). An ack or retry naming an id that is not pending
// (or not dead) is refused whole: nothing changes.

// DefaultOutboxLimit is the page size of …/events and …/dead.
const DefaultOutboxLimit = 100

// OutboxEventsReply answers …/events and …/dead. Next is the cursor to
// ask with next time (the last id listed; the same cursor when none).
type OutboxEventsReply struct {
	Events []outbox.Stored `json:"events"`
	Next   string          `json:"next"`
	Counts outbox.Counts   `json:"counts"`
}

// OutboxIDsRequest is the body of …/ack and …/dead/retry. Ids may be JSON
// strings or numbers; All (retry only) takes up to 1000 dead events.
type OutboxIDsRequest struct {
	IDs []LooseString `json:"ids"`
	All bool          `json:"all,omitempty"`
}

// OutboxChangeReply answers …/ack (Acknowledged now, and AlreadyAcknowledged:
// ids a retried ack had delivered before) and …/dead/retry (Retried), with
// the counts after the change.
type OutboxChangeReply struct {
	Acknowledged        int           `json:"acknowledged,omitempty"`
	AlreadyAcknowledged int           `json:"already_acknowledged,omitempty"`
	Retried             int           `json:"retried,omitempty"`
	Counts              outbox.Counts `json:"counts"`
}

func (b *Admin) registerOutbox(g *gin.RouterGroup) {
	o := g.Group("/outbox", requirePart(func() bool { return b.Outbox != nil },
		"outbox_off", "this hoard has no BitTorrent outbox (btadmin.Admin.Outbox is not set)"))
	o.GET("/events", b.outboxEvents)
	o.POST("/ack", b.outboxAck)
	o.GET("/stats", b.outboxStats)
	o.GET("/dead", b.outboxDead)
	o.POST("/dead/retry", b.outboxRetry)
}

// outboxError turns the outbox's argument errors into 400 and 404
// replies with its own explanation; anything else stays internal.
func outboxError(err error) error {
	message := strings.TrimPrefix(err.Error(), outbox.ErrInvalid.Error()+": ")
	switch {
	case errors.Is(err, outbox.ErrInvalid):
		return badRequest("%s", message)
	case errors.Is(err, outbox.ErrUnknown):
		return newAPIError(http.StatusNotFound, "unknown_event", strings.TrimPrefix(message, outbox.ErrUnknown.Error()+": "))
	case errors.Is(err, outbox.ErrDead):
		return newAPIError(http.StatusConflict, "dead_event", strings.TrimPrefix(message, outbox.ErrDead.Error()+": "))
	}
	return err
}

func pageQuery(c *gin.Context) (after uint64, limit int, err error) {
	if after, err = outbox.ParseCursor(c.Query("after")); err != nil {
		return 0, 0, err
	}
	limit = DefaultOutboxLimit
	if text, ok := c.GetQuery("limit"); ok {
		if limit, err = strconv.Atoi(text); err != nil || limit < 1 || limit > outbox.MaxListLimit {
			return 0, 0, badRequest("limit=%q: want a whole number from 1 to %d", text, outbox.MaxListLimit)
		}
	}
	return after, limit, nil
}

func (b *Admin) outboxList(c *gin.Context, dead bool) {
	after, limit, err := pageQuery(c)
	if err != nil {
		_ = c.Error(outboxError(err))
		return
	}
	ctx := c.Request.Context()
	list := b.Outbox.Pending
	if dead {
		list = b.Outbox.Dead
	}
	events, next, err := list(ctx, after, limit)
	if err != nil {
		_ = c.Error(outboxError(err))
		return
	}
	counts, err := b.Outbox.Counts(ctx)
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8",
		appendEventsReply(nil, OutboxEventsReply{Events: events, Next: strconv.FormatUint(next, 10), Counts: counts}))
}

// appendEventsReply appends the text json.Marshal writes for r (what
// c.JSON sent until s51), each event's body as the outbox stored it
// (outbox.AppendStoredJSON): json.Marshal scanned every body again.
func appendEventsReply(b []byte, r OutboxEventsReply) []byte {
	b = append(b, `{"events":`...)
	if r.Events == nil {
		b = append(b, `null`...)
	} else {
		b = append(b, '[')
		for i, e := range r.Events {
			if i > 0 {
				b = append(b, ',')
			}
			b = outbox.AppendStoredJSON(b, e)
		}
		b = append(b, ']')
	}
	next, _ := json.Marshal(r.Next) // a string always marshals
	counts, _ := json.Marshal(r.Counts)
	b = append(append(b, `,"next":`...), next...)
	b = append(append(b, `,"counts":`...), counts...)
	return append(b, '}')
}

func (b *Admin) outboxEvents(c *gin.Context) { b.outboxList(c, false) }
func (b *Admin) outboxDead(c *gin.Context)   { b.outboxList(c, true) }

func (b *Admin) outboxStats(c *gin.Context) {
	counts, err := b.Outbox.Counts(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, counts)
}

func (b *Admin) decodeIDs(c *gin.Context, allowAll bool) ([]uint64, bool, bool) {
	var req OutboxIDsRequest
	if !decode(c, &req) {
		return nil, false, false
	}
	if req.All {
		if !allowAll {
			_ = c.Error(badRequest(`"all" is only for …/dead/retry; acknowledge events by id`))
			return nil, false, false
		}
		if len(req.IDs) > 0 {
			_ = c.Error(badRequest(`give "ids" or "all", not both`))
			return nil, false, false
		}
		return nil, true, true
	}
	texts := make([]string, len(req.IDs))
	for i, id := range req.IDs {
		texts[i] = string(id)
	}
	ids, err := outbox.ParseIDs(texts)
	if err != nil {
		_ = c.Error(outboxError(err))
		return nil, false, false
	}
	return ids, false, true
}

func (b *Admin) outboxAck(c *gin.Context) {
	ids, _, ok := b.decodeIDs(c, false)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	acked, err := b.Outbox.Ack(ctx, ids)
	if err != nil {
		_ = c.Error(outboxError(err))
		return
	}
	counts, err := b.Outbox.Counts(ctx)
	if err != nil {
		_ = c.Error(err)
		return
	}
	logChange(c, "outbox events acknowledged", "events", acked.Now, "already", acked.Already, "first_id", ids[0], "last_id", ids[len(ids)-1])
	c.JSON(http.StatusOK, OutboxChangeReply{Acknowledged: acked.Now, AlreadyAcknowledged: acked.Already, Counts: counts})
}

func (b *Admin) outboxRetry(c *gin.Context) {
	ids, all, ok := b.decodeIDs(c, true)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	var n int
	var err error
	if all {
		n, err = b.Outbox.RetryAllDead(ctx, outbox.MaxListLimit)
	} else {
		n, err = b.Outbox.RetryDead(ctx, ids)
	}
	if err != nil {
		_ = c.Error(outboxError(err))
		return
	}
	counts, err := b.Outbox.Counts(ctx)
	if err != nil {
		_ = c.Error(err)
		return
	}
	logChange(c, "dead outbox events retried", "events", n, "all", all)
	c.JSON(http.StatusOK, OutboxChangeReply{Retried: n, Counts: counts})
}
