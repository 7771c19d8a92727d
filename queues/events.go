package queues

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A project's event log (event_log > 0) is a capped Redis stream in the
// project's slot. done.lua appends one "done" entry per call that completed
// items, and an expired claim gets one "reclaim" entry, written by
// claim.lua when it hands the item out again before the expiry scan saw it,
// or by the scan (ScanExpiredClaims) otherwise: so each completion and each
// expiry is logged exactly once, by the script that made the change.
//
// Readers use consumer groups: each group (one per plugin) sees every
// entry, each entry goes to one consumer of the group (one frontend), and
// stays pending until that consumer acknowledges it; a consumer that died
// leaves its entries pending, and ClaimStaleEvents hands them to a live
// one. The log is capped (event_log entries, approximately): a reader down
// for longer than the log covers misses the oldest entries, which is why
// plugins also re-derive their state from stored timestamps.

// Event kinds.
const (
	EventDone    = "done"
	EventReclaim = "reclaim"
)

// Event is one entry of a project's event log.
type Event struct {
	// ID is the stream entry id, to acknowledge.
	ID string
	// Kind is EventDone or EventReclaim.
	Kind string
	// Items completed (done) or whose claim expired (reclaim, one item).
	Items []string
	// By completed the items, or held the claim that expired ("" when the
	// claim record was gone).
	By string
	// At is when the items completed, or the claim's reclaim deadline.
	At time.Time
	// Result is the worker's JSON result of a done, when it sent one.
	Result json.RawMessage
	// Deliveries counts how many times the entry was handed to a consumer,
	// this time included (1 for a first read).
	Deliveries int64
}

var (
	expireScanScript = loadScript("expire_scan.lua")
)

// JoinEventLog creates the consumer group on the project's event log (and
// the log itself) unless it exists. A new group starts at the oldest
// entry still in the log, so events logged before the reader first came up
// are delivered too.
func (e *Engine) JoinEventLog(ctx context.Context, slug, group string) error {
	const op = "queues.JoinEventLog"
	err := e.rdb.XGroupCreateMkStream(ctx, EventsKey(slug), group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return unavailable(op, err)
	}
	return nil
}

// ReadEvents waits up to block for entries of the project's event log that
// no consumer of group has seen yet, and hands at most count of them to
// consumer. They stay pending until AckEvents.
func (e *Engine) ReadEvents(ctx context.Context, slug, group, consumer string, count int, block time.Duration) ([]Event, error) {
	const op = "queues.ReadEvents"
	streams, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{EventsKey(slug), ">"},
		Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			return nil, unavailable(op, fmt.Errorf("no consumer group %s on the event log of %s (join it first): %w", group, slug, err))
		}
		return nil, unavailable(op, err)
	}
	var events []Event
	for _, stream := range streams {
		for _, msg := range stream.Messages {
			events = append(events, decodeEvent(msg, 1))
		}
	}
	return events, nil
}

// AckEvents acknowledges entries a consumer of group has handled.
func (e *Engine) AckEvents(ctx context.Context, slug, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := e.rdb.XAck(ctx, EventsKey(slug), group, ids...).Err(); err != nil {
		return unavailable("queues.AckEvents", err)
	}
	return nil
}

// StaleEvents is what ClaimStaleEvents found.
type StaleEvents struct {
	// Events are now pending for the claiming consumer.
	Events []Event
	// GivenUp were delivered maxDeliveries times already: they are
	// acknowledged and not retried.
	GivenUp []Event
	// Trimmed counts pending entries the log no longer holds (trimmed
	// before anyone acknowledged them); they are acknowledged.
	Trimmed int
}

// ClaimStaleEvents takes over entries of group pending for longer than
// idle, whoever holds them (a consumer that died, or one whose handling
// failed), up to count: the ones delivered fewer than maxDeliveries times
// become pending for consumer, to handle again; the rest are given up
// (acknowledged) and returned so the caller can say so.
func (e *Engine) ClaimStaleEvents(ctx context.Context, slug, group, consumer string, idle time.Duration, count, maxDeliveries int) (StaleEvents, error) {
	const op = "queues.ClaimStaleEvents"
	key := EventsKey(slug)
	var result StaleEvents
	pending, err := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: key, Group: group, Idle: idle, Start: "-", End: "+", Count: int64(count),
	}).Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			return result, unavailable(op, fmt.Errorf("no consumer group %s on the event log of %s (join it first): %w", group, slug, err))
		}
		return result, unavailable(op, err)
	}
	if len(pending) == 0 {
		return result, nil
	}
	var retry, giveUp []string
	deliveries := map[string]int64{}
	for _, p := range pending {
		deliveries[p.ID] = p.RetryCount
		if p.RetryCount >= int64(maxDeliveries) {
			giveUp = append(giveUp, p.ID)
		} else {
			retry = append(retry, p.ID)
		}
	}
	if len(giveUp) > 0 {
		// Read them first, to report what is given up.
		for _, id := range giveUp {
			msgs, err := e.rdb.XRange(ctx, key, id, id).Result()
			if err != nil {
				return result, unavailable(op, err)
			}
			if len(msgs) == 1 {
				result.GivenUp = append(result.GivenUp, decodeEvent(msgs[0], deliveries[id]))
			}
		}
		if err := e.AckEvents(ctx, slug, group, giveUp...); err != nil {
			return result, err
		}
	}
	if len(retry) == 0 {
		return result, nil
	}
	msgs, err := e.rdb.XClaim(ctx, &redis.XClaimArgs{
		Stream: key, Group: group, Consumer: consumer, MinIdle: idle, Messages: retry,
	}).Result()
	if err != nil {
		return result, unavailable(op, err)
	}
	claimed := map[string]bool{}
	for _, msg := range msgs {
		claimed[msg.ID] = true
		result.Events = append(result.Events, decodeEvent(msg, deliveries[msg.ID]+1))
	}
	// XCLAIM skips (and, since Redis 7, drops from the pending list) the
	// entries trimmed from the log; acknowledge them in case.
	var gone []string
	for _, id := range retry {
		if !claimed[id] {
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		exists, err := e.rdb.XRange(ctx, key, gone[0], gone[len(gone)-1]).Result()
		if err != nil {
			return result, unavailable(op, err)
		}
		present := map[string]bool{}
		for _, msg := range exists {
			present[msg.ID] = true
		}
		var trimmed []string
		for _, id := range gone {
			if !present[id] {
				trimmed = append(trimmed, id)
			}
		}
		result.Trimmed = len(trimmed)
		if err := e.AckEvents(ctx, slug, group, trimmed...); err != nil {
			return result, err
		}
	}
	return result, nil
}

// ScanExpiredClaims logs up to limit claims of the project whose reclaim
// deadline passed since the last scan, and says whether more are due. It
// logs nothing (and reports no error) when the project's event log is off.
func (e *Engine) ScanExpiredClaims(ctx context.Context, slug string, limit int) (logged int, more bool, err error) {
	const op = "queues.ScanExpiredClaims"
	if limit < 1 {
		limit = 1
	}
	keys := []string{ConfigKey(slug), DeadlinesKey(slug), ClaimsKey(slug), EventsKey(slug), ExpiryCursorKey(slug),
		BatchesKey(slug), BatchDeadlinesKey(slug)}
	code, rest, err := e.runScriptList(ctx, op, expireScanScript, keys, e.nowMillis(), limit)
	if err != nil {
		return 0, false, err
	}
	switch code {
	case 1:
		return int(replyInt(rest[0])), replyInt(rest[1]) == 1, nil
	case 0:
		return 0, false, nil
	case codeNoProject:
		return 0, false, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case codeCorrupt:
		return 0, false, unavailable(op, errors.New("corrupt project state: "+replyString(rest[0])))
	}
	return 0, false, unavailable(op, fmt.Errorf("expire scan returned unknown code %d", code))
}

// decodeEvent reads a stream entry; a malformed one decodes with what it
// has (a reader must acknowledge it either way, or it would be retried
// forever).
func decodeEvent(msg redis.XMessage, deliveries int64) Event {
	ev := Event{ID: msg.ID, Deliveries: deliveries}
	ev.Kind, _ = msg.Values["type"].(string)
	ev.By, _ = msg.Values["by"].(string)
	if raw, ok := msg.Values["items"].(string); ok {
		_ = json.Unmarshal([]byte(raw), &ev.Items)
	}
	if raw, ok := msg.Values["result"].(string); ok && raw != "" {
		ev.Result = json.RawMessage(raw)
	}
	if raw, ok := msg.Values["at"].(string); ok {
		if ms, err := strconv.ParseInt(raw, 10, 64); err == nil {
			ev.At = time.UnixMilli(ms)
		}
	}
	return ev
}
