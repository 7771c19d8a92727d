package outbox

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/hoardproject/hoard/internal/luascript"
)

// WebhookEvent is one event in a webhook request's body:
//
//	{"events": [{"id": "17", "idempotency_key": "…", "kind": "…",
//	             "at": "2026-03-01T12:00:00Z", "attempt": 1, "body": {…}}]}
//
// A site processes each event once per idempotency_key: the same key can
// come again (a retried request, a second frontend), with the same body.
type WebhookEvent struct {
	ID      string          `json:"id"`
	Key     string          `json:"idempotency_key"`
	Kind    string          `json:"kind"`
	At      time.Time       `json:"at"`
	Attempt int             `json:"attempt"`
	Body    json.RawMessage `json:"body"`
}

// WebhookBody is a webhook request's body.
type WebhookBody struct {
	Events []WebhookEvent `json:"events"`
}

// Round is what one DeliverOnce did.
type Round struct {
	Taken     int // events taken for the request
	Delivered int // events the site accepted (2xx)
	Failed    int // events whose attempt failed
	Died      int // events moved to the dead set
}

// The kinds of the outbox's Failures log.
const (
	// KindWebhookFailed counts webhook requests that failed (a non-2xx
	// answer, a redirect, a timeout, a refused address).
	KindWebhookFailed = "webhook_failed"
	// KindError counts deliverer rounds that failed on Redis.
	KindError = "outbox_error"
)

// maxReplyBytes is how much of a receiver's reply is read (and quoted in
// the failure, up to 200 bytes): enough to reuse the connection.
const maxReplyBytes = 64 << 10

// DeliverOnce takes up to batch_size due events, POSTs them to the
// webhook in one signed request, and marks them delivered on a 2xx or
// failed (with backoff, or dead) otherwise. A delivery failure is in the
// Round, not the error; the error is Redis's. With nothing due it
// returns an empty Round.
func (o *Outbox) DeliverOnce(ctx context.Context) (Round, error) {
	var round Round
	if o.policy.WebhookURL == nil {
		return round, errors.New("outbox: no webhook_url to deliver to")
	}
	now := o.clock.Now()
	list, err := luascript.RunList(ctx, o.rdb, claimScript, btstore.OutboxClaimKeys(),
		ms(now), o.policy.Lease().Milliseconds(), o.policy.BatchSize, o.policy.MaxAttempts)
	if err != nil {
		return round, fmt.Errorf("outbox: claim: %w", err)
	}
	died, _ := list[0].(int64)
	round.Died = int(died)
	if died > 0 {
		o.logger.Warn("outbox: events moved to the dead set: their last attempt's deliverer never answered", "events", died)
	}
	type taken struct {
		id      uint64
		attempt int
	}
	var took []taken
	var body WebhookBody
	for i := 1; i+2 < len(list); i += 3 {
		idText, _ := list[i].(string)
		if idText == "" {
			if n, ok := list[i].(int64); ok {
				idText = strconv.FormatInt(n, 10)
			}
		}
		id, _ := strconv.ParseUint(idText, 10, 64)
		attempt, _ := list[i+1].(int64)
		raw, _ := list[i+2].(string)
		s, err := decodeRecord(id, raw)
		if err != nil {
			return round, err
		}
		took = append(took, taken{id, int(attempt)})
		body.Events = append(body.Events, WebhookEvent{ID: idText, Key: s.Key, Kind: s.Kind, At: s.At, Attempt: int(attempt), Body: s.Body})
	}
	// One request lists its events in id order (the order they were
	// appended); across requests order is not kept (a retried event comes
	// after newer ones).
	sort.Slice(took, func(i, j int) bool { return took[i].id < took[j].id })
	sort.Slice(body.Events, func(i, j int) bool {
		return len(body.Events[i].ID) < len(body.Events[j].ID) ||
			len(body.Events[i].ID) == len(body.Events[j].ID) && body.Events[i].ID < body.Events[j].ID
	})
	round.Taken = len(took)
	if len(took) == 0 {
		return round, nil
	}
	ids := make([]uint64, len(took))
	for i, t := range took {
		ids[i] = t.id
	}
	if postErr := o.post(ctx, body); postErr != nil {
		if ctx.Err() != nil {
			// Stopping: leave the events leased; the lease ends and they
			// are tried again, without counting this as the site's fault.
			return round, ctx.Err()
		}
		failedAt := o.clock.Now()
		args := []any{o.policy.MaxAttempts, postErr.Error()}
		for _, t := range took {
			args = append(args, t.id, t.attempt, ms(failedAt.Add(o.backoff(t.attempt))))
		}
		reply, err := luascript.RunList(ctx, o.rdb, failScript, btstore.OutboxFailKeys(), args...)
		if err != nil {
			return round, fmt.Errorf("outbox: recording a failed delivery: %w", err)
		}
		failed, _ := reply[0].(int64)
		died, _ := reply[1].(int64)
		round.Failed, round.Died = int(failed), round.Died+int(died)
		o.fails.Log(ctx, slog.LevelWarn, KindWebhookFailed, "outbox: webhook delivery failed; the events are retried with backoff", "events", len(took),
			"first_id", ids[0], "attempt", took[0].attempt, "error", postErr, "dead", died)
		return round, nil
	}
	acked, err := o.ack(ctx, ids, false)
	if err != nil {
		return round, err
	}
	round.Delivered = acked.Now
	o.logger.Debug("outbox: events delivered", "events", acked.Now, "first_id", ids[0])
	return round, nil
}

// backoff is the wait after the attempt-th failure: Backoff doubled per
// earlier failure, capped at MaxBackoff, drawn between half and all of it.
func (o *Outbox) backoff(attempt int) time.Duration {
	return Backoff(o.policy.Backoff, o.policy.MaxBackoff, attempt, o.jitter())
}

// Backoff is the wait after the attempt-th failure (1 is the first):
// base doubled attempt-1 times, capped at limit, times (1+jitter)/2 for a
// jitter in [0, 1].
func Backoff(base, limit time.Duration, attempt int, jitter float64) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	jitter = min(max(jitter, 0), 1)
	return time.Duration(float64(d) * (1 + jitter) / 2)
}

func (o *Outbox) post(ctx context.Context, body WebhookBody) error {
	payload := appendWebhookBody(nil, body)
	ctx, cancel := context.WithTimeout(ctx, o.policy.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.policy.WebhookURL.String(), bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hoard-outbox/1")
	req.Header.Set(SignatureHeader, Sign(o.policy.Secret, o.clock.Now(), payload))
	resp, err := o.client.Do(req)
	if err != nil {
		// url.Error names the URL; keep any password out of logs.
		var uerr interface{ Unwrap() error }
		if errors.As(err, &uerr) && uerr.Unwrap() != nil {
			err = uerr.Unwrap()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within the timeout (%s)", o.policy.Timeout)
		}
		return fmt.Errorf("request failed: %v", err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if resp.StatusCode/100 != 2 {
		if len(reply) > 200 {
			reply = reply[:200]
		}
		if resp.StatusCode/100 == 3 {
			return fmt.Errorf("the webhook answered %s, a redirect, which is never followed (set webhook_url to where it points): %q", resp.Status, reply)
		}
		return fmt.Errorf("the webhook answered %s: %q", resp.Status, reply)
	}
	return nil
}

// Start runs the deliverer until Stop (or ctx ends): it delivers while
// events are due, and when none are, waits Poll or until an Append in
// this process wakes it. Without a webhook URL it does nothing (the site
// polls).
func (o *Outbox) Start(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cancel != nil || o.stopped {
		return errors.New("outbox: Start called twice")
	}
	if o.policy.WebhookURL == nil {
		o.stopped = false
		o.cancel = func() {}
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	o.done = make(chan struct{})
	go o.run(runCtx, o.done)
	o.logger.Info("outbox: delivering to the webhook", "url", o.policy.WebhookURL.Redacted(),
		"max_attempts", o.policy.MaxAttempts, "timeout", o.policy.Timeout)
	return nil
}

func (o *Outbox) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		round, err := o.DeliverOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			o.fails.Log(ctx, slog.LevelError, KindError, "outbox: delivering", "error", err)
		case err == nil && round.Taken > 0 && round.Failed == 0:
			continue // more may be due
		}
		select {
		case <-ctx.Done():
		case <-o.clock.After(o.policy.Poll):
		case <-o.wake:
		}
	}
}

// Stop ends the deliverer and waits for it; a request in flight is
// abandoned and its events are tried again when their lease ends. Safe to
// call twice, and before Start.
func (o *Outbox) Stop() {
	o.mu.Lock()
	cancel, done := o.cancel, o.done
	o.cancel, o.done, o.stopped = nil, nil, true
	o.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if done != nil {
		<-done
	}
}

// appendWebhookBody appends the text json.Marshal writes for body, each
// event's body as the outbox stored it: json.Marshal checked and
// compacted every body again (see AppendStoredJSON).
func appendWebhookBody(b []byte, body WebhookBody) []byte {
	b = append(b, `{"events":`...)
	if body.Events == nil {
		return append(b, `null}`...)
	}
	b = append(b, '[')
	for i, e := range body.Events {
		if i > 0 {
			b = append(b, ',')
		}
		id, _ := json.Marshal(e.ID) // a string always marshals
		b = appendKeyKindAt(append(append(b, `{"id":`...), id...), e.Key, e.Kind, e.At)
		b = strconv.AppendInt(append(b, `,"attempt":`...), int64(e.Attempt), 10)
		b = append(appendBody(b, e.Body), '}')
	}
	return append(b, "]}"...)
}
