package outbox

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/ratelog"
)

// Event is one thing the site must hear of. Its fields are those of
// reaper.Event in the same order, so a publisher converts with
// outbox.Event(e).
type Event struct {
	// Key is the idempotency key: the same event appended again (a
	// repeated step) carries the same key, and the site dedups by it.
	Key string
	// Kind names the event for the site ("notice-initial", "reward" …).
	Kind string
	// Body is the event's JSON; empty means null.
	Body json.RawMessage
}

// Bounds on an event, so one bad event cannot fill Redis.
const (
	MaxKeyBytes  = 256
	MaxKindBytes = 64
	MaxBodyBytes = 64 << 10
)

// Stored is an event as the outbox holds it.
type Stored struct {
	ID   uint64          `json:"id,string"`
	Key  string          `json:"idempotency_key"`
	Kind string          `json:"kind"`
	At   time.Time       `json:"at"`
	Body json.RawMessage `json:"body"`
	// Attempts begun and the last failure, for pending and dead events.
	Attempts  int    `json:"attempts,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// record is what Redis holds per event; the id is its hash field.
type record struct {
	Key  string          `json:"key"`
	Kind string          `json:"kind"`
	Body json.RawMessage `json:"body"`
	At   time.Time       `json:"at"`
}

// Errors callers tell apart.
var (
	// ErrInvalid is bad input: an event, a cursor, an id, a limit.
	ErrInvalid = errors.New("invalid outbox input")
	// ErrUnknown: an id to acknowledge was never given, or one to retry
	// is not dead. Nothing changed.
	ErrUnknown = errors.New("unknown outbox event")
	// ErrDead: an id to acknowledge is dead; retry it first. Nothing
	// changed.
	ErrDead = errors.New("dead outbox event")
	// ErrFull: the append would pass max_pending. Nothing changed.
	ErrFull = errors.New("outbox full")
)

// Config configures an Outbox.
type Config struct {
	Policy Policy
	// Clock (the system clock when nil) stamps events and times retries.
	Clock clock.Clock
	// Jitter returns a number in [0, 1] that places each backoff between
	// half and all of its length (math/rand/v2 when nil).
	Jitter func() float64
	// HTTPClient sends the webhook requests (one with the policy's
	// timeout, dialling only the addresses Policy.Targets allows and
	// using no proxy, when nil). Each request is bounded by the timeout
	// either way, and redirects are never followed.
	HTTPClient *http.Client
	// Name tells frontends apart in logs.
	Name   string
	Logger *slog.Logger
	// Failures logs and counts failed deliveries ("webhook_failed") and
	// the deliverer's own errors ("outbox_error"): a webhook down for an
	// hour is a line a minute with a count, not one per request. When
	// nil, the outbox has its own, on Logger and Clock.
	Failures *ratelog.Log
}

// Outbox appends, delivers and lists events. Append, the reading and
// acknowledging calls work on any Outbox; Start runs the deliverer, which
// needs a webhook URL.
type Outbox struct {
	rdb    redis.UniversalClient
	policy Policy
	clock  clock.Clock
	jitter func() float64
	client *http.Client
	logger *slog.Logger
	fails  *ratelog.Log

	wake chan struct{}

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool

	// records are append's record buffers, kept for the next append: the
	// client is done with them when the script call returns, and the
	// feed appends some 30 KB of them per 100 rows.
	recordsMu sync.Mutex
	records   [][]byte
}

// maxRecordBuffers bounds the record buffers an Outbox keeps, and
// maxRecordBuffer the size of one kept (a transfers event's is about
// 33 KB).
const (
	maxRecordBuffers = 32
	maxRecordBuffer  = 64 << 10
)

// recordBuffer is an empty buffer of at least size bytes, one kept when
// one is big enough.
func (o *Outbox) recordBuffer(size int) []byte {
	o.recordsMu.Lock()
	defer o.recordsMu.Unlock()
	for i := len(o.records) - 1; i >= 0; i-- {
		if b := o.records[i]; cap(b) >= size {
			o.records[i] = o.records[len(o.records)-1]
			o.records[len(o.records)-1] = nil
			o.records = o.records[:len(o.records)-1]
			return b[:0]
		}
	}
	return make([]byte, 0, size)
}

// keepRecords takes back the record buffers in args (append's ARGV from
// its fifth on: key, record, ...) once the call is done with them.
func (o *Outbox) keepRecords(args []any) {
	o.recordsMu.Lock()
	defer o.recordsMu.Unlock()
	for i := 5; i < len(args) && len(o.records) < maxRecordBuffers; i += 2 {
		if b, ok := args[i].([]byte); ok && cap(b) <= maxRecordBuffer {
			o.records = append(o.records, b)
		}
	}
}

// New returns an Outbox on rdb.
func New(rdb redis.UniversalClient, cfg Config) *Outbox {
	o := &Outbox{rdb: rdb, policy: cfg.Policy, clock: cfg.Clock, jitter: cfg.Jitter, client: cfg.HTTPClient,
		logger: cfg.Logger, wake: make(chan struct{}, 1)}
	if o.clock == nil {
		o.clock = clock.System{}
	}
	if o.jitter == nil {
		o.jitter = rand.Float64
	}
	if o.client == nil {
		o.client = &http.Client{Timeout: cfg.Policy.Timeout, Transport: &http.Transport{
			// No proxy from the environment: the guard must see the
			// webhook's own address, not a proxy's.
			Proxy:                 nil,
			DialContext:           cfg.Policy.Targets.Dialer(cfg.Policy.Timeout).DialContext,
			TLSHandshakeTimeout:   cfg.Policy.Timeout,
			ResponseHeaderTimeout: cfg.Policy.Timeout,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
		}}
	}
	// A redirect is the webhook's answer, and a failed delivery: the
	// signed batch goes only to the URL the operator set, and only that
	// URL's 2xx marks it delivered.
	client := *o.client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.client = &client
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if cfg.Name != "" {
		o.logger = o.logger.With("deliverer", cfg.Name)
	}
	o.fails = cfg.Failures
	if o.fails == nil {
		o.fails = ratelog.New(ratelog.Config{Logger: o.logger, Clock: o.clock})
	}
	return o
}

// Policy is the outbox's parsed settings.
func (o *Outbox) Policy() Policy { return o.policy }

func ms(t time.Time) int64 { return t.UnixMilli() }

// SaveConfig writes the settings every acknowledging process must agree
// on (keep_delivered) where the scripts read them, so an ack through the
// admin API trims to the plugin's setting.
func (o *Outbox) SaveConfig(ctx context.Context) error {
	return o.rdb.HSet(ctx, btstore.OutboxConfigKey(), "keep_delivered", o.policy.KeepDelivered).Err()
}

// Validate checks events as Append does.
func Validate(events []Event) error {
	for i, e := range events {
		if err := validateFrame(i, e); err != nil {
			return err
		}
		if len(e.Body) > 0 && !json.Valid(e.Body) {
			return errNotJSON(i, e)
		}
	}
	return nil
}

// validateFrame checks all of event i but whether its body is JSON.
func validateFrame(i int, e Event) error {
	switch {
	case e.Key == "" || len(e.Key) > MaxKeyBytes || !utf8.ValidString(e.Key):
		return fmt.Errorf("%w: event %d: the idempotency key must be 1-%d bytes of UTF-8", ErrInvalid, i, MaxKeyBytes)
	case e.Kind == "" || len(e.Kind) > MaxKindBytes || !utf8.ValidString(e.Kind):
		return fmt.Errorf("%w: event %d (%s): the kind must be 1-%d bytes of UTF-8", ErrInvalid, i, e.Key, MaxKindBytes)
	case len(e.Body) > MaxBodyBytes:
		return fmt.Errorf("%w: event %d (%s): the body is over %d bytes", ErrInvalid, i, e.Key, MaxBodyBytes)
	}
	return nil
}

func errNotJSON(i int, e Event) error {
	return fmt.Errorf("%w: event %d (%s): the body is not JSON", ErrInvalid, i, e.Key)
}

// appendRecord appends event i as stored, the text json.Marshal writes for
// its record at at, checking the event as Validate does. The body is read
// once (json.Compact checks it while it compacts), not once by Validate and
// again by json.Marshal: a feed round's transfers events are tens of
// kilobytes (docs/bittorrent-site.md, "The plugin's CPU").
func appendRecord(b []byte, i int, e Event, at time.Time) ([]byte, error) {
	return appendRecordAs(b, i, e, at, false)
}

// appendRecordAs is appendRecord; marshalled: the body is what
// json.Marshal writes (AppendMarshalled), so it goes in as it is.
func appendRecordAs(b []byte, i int, e Event, at time.Time, marshalled bool) ([]byte, error) {
	if err := validateFrame(i, e); err != nil {
		return b, err
	}
	key, _ := json.Marshal(e.Key) // a string always marshals
	kind, _ := json.Marshal(e.Kind)
	b = append(append(append(b, `{"key":`...), key...), `,"kind":`...)
	b = append(append(b, kind...), `,"body":`...)
	if len(e.Body) == 0 {
		b = append(b, "null"...)
	} else if marshalled {
		b = append(b, e.Body...)
	} else {
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, e.Body); err != nil {
			return b, errNotJSON(i, e)
		}
		body := buf.Bytes()[len(b):]
		if htmlEscaped(body) {
			// json.Marshal escapes these in a raw message too
			var escaped bytes.Buffer
			json.HTMLEscape(&escaped, body)
			b = append(b, escaped.Bytes()...)
		} else {
			b = buf.Bytes()
		}
	}
	text, err := at.MarshalJSON()
	if err != nil {
		return b, fmt.Errorf("%w: %s: %v", ErrInvalid, e.Key, err)
	}
	b = append(append(append(b, `,"at":`...), text...), '}')
	return b, nil
}

// recordOverhead is a record's text but its key, kind and body, about:
// `{"key":"","kind":"","body":,"at":""}` and a time with nanoseconds.
const recordOverhead = 80

// htmlEscaped reports whether json.Marshal would escape something in a
// raw JSON body: <, >, & or U+2028 and U+2029 (bytes E2 80 A8 and E2 80
// A9). bytes.ContainsAny with the two non-ASCII runes in its set decodes
// every rune of the body, a fifth of a feed round's CPU in the plugin's
// profile (transfers bodies are tens of kilobytes); bytes.IndexByte scans
// a byte at a time in vector registers, so four passes cost less than one.
func htmlEscaped(b []byte) bool {
	if bytes.IndexByte(b, '<') >= 0 || bytes.IndexByte(b, '>') >= 0 || bytes.IndexByte(b, '&') >= 0 {
		return true
	}
	for i := bytes.IndexByte(b, 0xE2); i >= 0; {
		if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
			return true
		}
		next := bytes.IndexByte(b[i+1:], 0xE2)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return false
}

// Append stores a batch of events, all or none (one script): an event
// whose key was appended within the dedup window, or twice in the batch,
// is stored once. A bad event refuses the whole batch (ErrInvalid), as
// does a full outbox (ErrFull); nothing is stored then.
func (o *Outbox) Append(ctx context.Context, events []Event) error {
	_, err := o.AppendIDs(ctx, events)
	return err
}

// AppendIDs is Append that also returns the ids given to the events
// stored (duplicates get none).
func (o *Outbox) AppendIDs(ctx context.Context, events []Event) ([]uint64, error) {
	return o.appendIDs(ctx, events, false)
}

// AppendMarshalled is Append for events whose bodies are exactly what
// json.Marshal writes (compact, with its HTML escapes), as the feed's
// encoder writes them (btplugin's feedEvents, checked byte for byte
// against encoding/json by its tests). Such a body is stored as it is:
// compacting it again read every byte of a tens-of-kilobytes transfers
// event through encoding/json's scanner, about 2 µs of the plugin's CPU
// per crediting announce (docs/bittorrent-site.md, "The plugin's CPU").
// The key, kind and body size are checked as Append checks them. A body
// from anywhere else (the admin API, a site) goes through Append.
func (o *Outbox) AppendMarshalled(ctx context.Context, events []Event) error {
	_, err := o.appendIDs(ctx, events, true)
	return err
}

func (o *Outbox) appendIDs(ctx context.Context, events []Event, marshalled bool) ([]uint64, error) {
	if len(events) == 0 {
		return nil, nil
	}
	now := o.clock.Now()
	args := make([]any, 0, 4+2*len(events))
	args = append(args, ms(now), o.policy.DedupWindow.Milliseconds(), o.policy.DedupMax, o.policy.MaxPending)
	for i, e := range events {
		// Each record in a buffer of its own, sized for it, handed to
		// the client as bytes: no second copy into a string.
		rec, err := appendRecordAs(o.recordBuffer(len(e.Key)+len(e.Kind)+len(e.Body)+recordOverhead), i, e, now.UTC(), marshalled)
		if err != nil {
			o.keepRecords(args)
			return nil, err
		}
		args = append(args, e.Key, rec)
	}
	list, err := luascript.RunList(ctx, o.rdb, appendScript, btstore.OutboxAppendKeys(), args...)
	o.keepRecords(args)
	if err != nil {
		return nil, fmt.Errorf("outbox: append: %w", err)
	}
	if code, _ := list[0].(int64); code == codeFull {
		pending := int64(0)
		if len(list) > 1 {
			pending, _ = list[1].(int64)
		}
		return nil, fmt.Errorf("%w: %d events are undelivered and max_pending is %d; try again later", ErrFull, pending, o.policy.MaxPending)
	}
	ids := make([]uint64, 0, len(list)-2)
	for _, v := range list[2:] {
		id, _ := v.(int64)
		ids = append(ids, uint64(id))
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return ids, nil
}

// MaxListLimit bounds one Pending or Dead page.
const MaxListLimit = 1000

// ParseCursor reads a poll cursor: "" (from the start) or the decimal id
// of the last event the site has seen, without sign or spaces.
func ParseCursor(text string) (uint64, error) {
	if text == "" {
		return 0, nil
	}
	id, err := parseID(text)
	if err != nil {
		return 0, fmt.Errorf("%w: cursor %q: want the id of the last event seen (a whole number, or empty to start over)", ErrInvalid, truncate(text))
	}
	return id, nil
}

func parseID(text string) (uint64, error) {
	if text == "" || len(text) > 20 {
		return 0, errors.New("bad id")
	}
	for i := 0; i < len(text); i++ {
		if text[i] < '0' || text[i] > '9' {
			return 0, errors.New("bad id")
		}
	}
	id, err := strconv.ParseUint(text, 10, 64)
	if err != nil || id == 0 {
		return 0, errors.New("bad id")
	}
	return id, nil
}

// ParseIDs reads event ids (as the admin API's ack body gives them): 1 to
// MaxListLimit decimal ids.
func ParseIDs(texts []string) ([]uint64, error) {
	if len(texts) == 0 || len(texts) > MaxListLimit {
		return nil, fmt.Errorf("%w: give 1 to %d event ids", ErrInvalid, MaxListLimit)
	}
	ids := make([]uint64, len(texts))
	for i, text := range texts {
		id, err := parseID(text)
		if err != nil {
			return nil, fmt.Errorf("%w: event id %q is not a positive whole number", ErrInvalid, truncate(text))
		}
		ids[i] = id
	}
	return ids, nil
}

func truncate(text string) string {
	if len(text) > 40 {
		return text[:40] + "…"
	}
	return text
}

func checkLimit(limit int) error {
	if limit < 1 || limit > MaxListLimit {
		return fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalid, limit, MaxListLimit)
	}
	return nil
}

// Pending lists up to limit undelivered events with ids after the cursor,
// in id order (events being delivered included), and the cursor to ask
// with next (the last id listed, or after itself when none).
func (o *Outbox) Pending(ctx context.Context, after uint64, limit int) ([]Stored, uint64, error) {
	return o.list(ctx, btstore.OutboxPendingKey(), after, limit)
}

// Dead lists up to limit dead events with ids after the cursor.
func (o *Outbox) Dead(ctx context.Context, after uint64, limit int) ([]Stored, uint64, error) {
	return o.list(ctx, btstore.OutboxDeadKey(), after, limit)
}

func (o *Outbox) list(ctx context.Context, key string, after uint64, limit int) ([]Stored, uint64, error) {
	if err := checkLimit(limit); err != nil {
		return nil, after, err
	}
	// pending and dead are scored by id, so the cursor is a score range.
	ids, err := o.rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: "(" + strconv.FormatUint(after, 10), Max: "+inf", Count: int64(limit)}).Result()
	if err != nil {
		return nil, after, fmt.Errorf("outbox: list: %w", err)
	}
	if len(ids) == 0 {
		return []Stored{}, after, nil
	}
	pipe := o.rdb.Pipeline()
	recs := pipe.HMGet(ctx, btstore.OutboxEventsKey(), ids...)
	attempts := pipe.HMGet(ctx, btstore.OutboxAttemptsKey(), ids...)
	errs := pipe.HMGet(ctx, btstore.OutboxErrorsKey(), ids...)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, after, fmt.Errorf("outbox: list: %w", err)
	}
	out := make([]Stored, 0, len(ids))
	next := after
	for i, text := range ids {
		id, _ := strconv.ParseUint(text, 10, 64)
		next = max(next, id)
		raw, ok := recs.Val()[i].(string)
		if !ok {
			continue // delivered between the two reads
		}
		s, err := decodeRecord(id, raw)
		if err != nil {
			return nil, after, err
		}
		if a, ok := attempts.Val()[i].(string); ok {
			s.Attempts, _ = strconv.Atoi(a)
		}
		if e, ok := errs.Val()[i].(string); ok {
			s.LastError = e
		}
		out = append(out, s)
	}
	return out, next, nil
}

// decodeRecord reads a stored record. Every record is appendRecord's
// text, {"key":…,"kind":…,"body":…,"at":…}, so the body lies between a
// few dozen bytes of frame at each end: decodeRecordFrame reads the frame
// and takes the body as it lies. json.Unmarshal scanned all of a body to
// find its end, and a feed round's transfers bodies are tens of
// kilobytes: every event a polling site reads (Pending) or the webhook
// sends was one such scan (BenchmarkDecodeRecord). A record in any other
// shape is read by json.Unmarshal, as before.
func decodeRecord(id uint64, raw string) (Stored, error) {
	if s, ok := decodeRecordFrame(raw); ok {
		s.ID = id
		return s, nil
	}
	var r record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Stored{}, fmt.Errorf("outbox: event %d: unreadable record: %w", id, err)
	}
	return Stored{ID: id, Key: r.Key, Kind: r.Kind, At: r.At, Body: r.Body}, nil
}

// recordAtTail bounds where the record's "at" field starts, counted from
// its end: `,"at":` and a time as time.Time's MarshalJSON writes it
// (RFC 3339 with nanoseconds and an offset: 37 bytes quoted at most).
const recordAtTail = 64

// decodeRecordFrame reads a record in appendRecord's shape: its key and
// kind (JSON strings, decoded by encoding/json), its "at" (decoded by
// time.Time's UnmarshalJSON, as json.Unmarshal does) and its body, the
// bytes between `,"body":` and the last `,"at":`. A body is JSON that
// appendRecord checked before it stored it; it is not scanned again.
// ok is false for anything not in that shape.
func decodeRecordFrame(raw string) (s Stored, ok bool) {
	rest, ok := strings.CutPrefix(raw, `{"key":`)
	if !ok {
		return s, false
	}
	if s.Key, rest, ok = cutJSONString(rest); !ok {
		return s, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"kind":`); !ok {
		return s, false
	}
	if s.Kind, rest, ok = cutJSONString(rest); !ok {
		return s, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"body":`); !ok {
		return s, false
	}
	if rest, ok = strings.CutSuffix(rest, "}"); !ok {
		return s, false
	}
	from := max(0, len(rest)-recordAtTail)
	i := strings.LastIndex(rest[from:], `,"at":`)
	if i < 0 {
		return s, false
	}
	body, at := rest[:from+i], rest[from+i+len(`,"at":`):]
	if body == "" || s.At.UnmarshalJSON([]byte(at)) != nil {
		return s, false
	}
	s.Body = json.RawMessage(body)
	return s, true
}

// cutJSONString decodes the JSON string text starts with and returns the
// text after it; ok is false when text does not start with one.
func cutJSONString(text string) (value, rest string, ok bool) {
	if !strings.HasPrefix(text, `"`) {
		return "", text, false
	}
	for i := 1; i < len(text); i++ {
		switch text[i] {
		case '\\':
			i++ // the escaped byte cannot end the string
		case '"':
			if err := json.Unmarshal([]byte(text[:i+1]), &value); err != nil {
				return "", text, false
			}
			return value, text[i+1:], true
		}
	}
	return "", text, false
}

func idArgs(ids []uint64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = strconv.FormatUint(id, 10)
	}
	return args
}

// Acked is what an acknowledgement did.
type Acked struct {
	// Now were pending and are marked delivered by this call.
	Now int
	// Already were delivered before (a site retrying an ack after a
	// timeout): not an error, nothing changed for them.
	Already int
}

// Ack marks pending events delivered, for a site that polls. It is safe
// to retry: an id already delivered succeeds again (counted in Already).
// An id never given (ErrUnknown) or dead (ErrDead: retry it first)
// refuses the whole call and nothing changes.
func (o *Outbox) Ack(ctx context.Context, ids []uint64) (Acked, error) {
	if len(ids) == 0 || len(ids) > MaxListLimit {
		return Acked{}, fmt.Errorf("%w: give 1 to %d event ids", ErrInvalid, MaxListLimit)
	}
	return o.ack(ctx, ids, true)
}

func (o *Outbox) ack(ctx context.Context, ids []uint64, strict bool) (Acked, error) {
	flag := "0"
	if strict {
		flag = "1"
	}
	args := append([]any{ms(o.clock.Now()), flag, o.policy.KeepDelivered}, idArgs(ids)...)
	list, err := luascript.RunList(ctx, o.rdb, ackScript, btstore.OutboxAckKeys(), args...)
	if err != nil {
		return Acked{}, fmt.Errorf("outbox: ack: %w", err)
	}
	n, _ := list[0].(int64)
	switch n {
	case codeUnknown:
		return Acked{}, fmt.Errorf("%w: event %v was never given; nothing was acknowledged", ErrUnknown, list[1])
	case codeDead:
		return Acked{}, fmt.Errorf("%w: event %v is dead (retry it first); nothing was acknowledged", ErrDead, list[1])
	}
	already, _ := list[2].(int64)
	return Acked{Now: int(n), Already: int(already)}, nil
}

// RetryDead moves dead events back to pending, due at once with fresh
// attempts. Every id must be dead, else nothing changes (ErrUnknown).
func (o *Outbox) RetryDead(ctx context.Context, ids []uint64) (int, error) {
	if len(ids) == 0 || len(ids) > MaxListLimit {
		return 0, fmt.Errorf("%w: give 1 to %d event ids", ErrInvalid, MaxListLimit)
	}
	return o.retry(ctx, ids, true)
}

// RetryAllDead moves up to limit dead events (the oldest ids) back to
// pending.
func (o *Outbox) RetryAllDead(ctx context.Context, limit int) (int, error) {
	dead, _, err := o.Dead(ctx, 0, limit)
	if err != nil || len(dead) == 0 {
		return 0, err
	}
	ids := make([]uint64, len(dead))
	for i, s := range dead {
		ids[i] = s.ID
	}
	return o.retry(ctx, ids, false)
}

func (o *Outbox) retry(ctx context.Context, ids []uint64, strict bool) (int, error) {
	flag := "0"
	if strict {
		flag = "1"
	}
	args := append([]any{ms(o.clock.Now()), flag}, idArgs(ids)...)
	list, err := luascript.RunList(ctx, o.rdb, retryScript, btstore.OutboxRetryKeys(), args...)
	if err != nil {
		return 0, fmt.Errorf("outbox: retry: %w", err)
	}
	n, _ := list[0].(int64)
	if n == codeUnknown {
		return 0, fmt.Errorf("%w: event %v is not dead; nothing was retried", ErrUnknown, list[1])
	}
	if n > 0 {
		o.logger.Info("outbox: dead events retried", "events", n)
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
	return int(n), nil
}

// Counts are the outbox's sizes and counters over every frontend.
type Counts struct {
	Pending    int64 `json:"pending"`    // undelivered, not dead (being delivered included)
	Dead       int64 `json:"dead"`       // kept until retried
	Kept       int64 `json:"kept"`       // delivered events still readable
	Appended   int64 `json:"appended"`   // events stored, ever
	Duplicates int64 `json:"duplicates"` // events not stored: key seen within the window
	Attempts   int64 `json:"attempts"`   // deliveries begun (one per event per request)
	Failures   int64 `json:"failures"`   // attempts that failed (non-2xx, timeout, refused)
	Delivered  int64 `json:"delivered"`  // events delivered or acknowledged, ever
	Died       int64 `json:"died"`       // events moved to the dead set, ever
	Retried    int64 `json:"retried"`    // dead events an operator retried, ever
}

// Counts reads the sizes and counters.
func (o *Outbox) Counts(ctx context.Context) (Counts, error) {
	pipe := o.rdb.Pipeline()
	pending := pipe.ZCard(ctx, btstore.OutboxPendingKey())
	dead := pipe.ZCard(ctx, btstore.OutboxDeadKey())
	kept := pipe.ZCard(ctx, btstore.OutboxDeliveredKey())
	stats := pipe.HGetAll(ctx, btstore.OutboxStatsKey())
	if _, err := pipe.Exec(ctx); err != nil {
		return Counts{}, fmt.Errorf("outbox: counts: %w", err)
	}
	n := func(name string) int64 {
		v, _ := strconv.ParseInt(stats.Val()[name], 10, 64)
		return v
	}
	return Counts{Pending: pending.Val(), Dead: dead.Val(), Kept: kept.Val(),
		Appended: n("appended"), Duplicates: n("duplicates"), Attempts: n("attempts"), Failures: n("failures"),
		Delivered: n("delivered"), Died: n("dead"), Retried: n("retried")}, nil
}

// AppendStoredJSON appends the text json.Marshal writes for s, with its
// body as stored. json.Marshal checks and compacts a RawMessage again, a
// scan of every body a polling site reads (tens of kilobytes for a
// transfers event); a stored body needs neither: appendRecord wrote it
// compacted and HTML-escaped, as json.Marshal does, and only appendRecord
// writes records (TestAppendStoredJSONIsWhatJSONMarshalWrites).
func AppendStoredJSON(b []byte, s Stored) []byte {
	b = append(b, `{"id":"`...)
	b = strconv.AppendUint(b, s.ID, 10)
	b = appendKeyKindAt(append(b, '"'), s.Key, s.Kind, s.At)
	b = appendBody(b, s.Body)
	if s.Attempts != 0 {
		b = strconv.AppendInt(append(b, `,"attempts":`...), int64(s.Attempts), 10)
	}
	if s.LastError != "" {
		text, _ := json.Marshal(s.LastError)
		b = append(append(b, `,"last_error":`...), text...)
	}
	return append(b, '}')
}

// appendKeyKindAt appends an event's `,"idempotency_key":…,"kind":…,"at":…`
// as json.Marshal writes them.
func appendKeyKindAt(b []byte, key, kind string, at time.Time) []byte {
	keyText, _ := json.Marshal(key) // a string always marshals
	kindText, _ := json.Marshal(kind)
	b = append(append(b, `,"idempotency_key":`...), keyText...)
	b = append(append(b, `,"kind":`...), kindText...)
	atText, err := at.MarshalJSON()
	if err != nil {
		atText = []byte(`null`) // a year past 9999: json.Marshal would refuse it; nothing stores one
	}
	return append(append(b, `,"at":`...), atText...)
}

// appendBody appends `,"body":` and a stored body as it is (null when
// there is none).
func appendBody(b []byte, body json.RawMessage) []byte {
	b = append(b, `,"body":`...)
	if len(body) == 0 {
		return append(b, `null`...)
	}
	return append(b, body...)
}
