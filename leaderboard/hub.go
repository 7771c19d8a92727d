// Package leaderboard is hoard's live project page: a websocket hub fed by
// Redis pub/sub, and the page itself (embedded assets, no CDN, no build).
package leaderboard

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/queues"
)

// Source is what the hub reads from the engine: the truth behind every
// pub/sub hint.
type Source interface {
	Counts(ctx context.Context, slug string) (queues.Counts, error)
	Recent(ctx context.Context, slug string, n int) ([]json.RawMessage, error)
}

// Config tunes the hub; zero values take the defaults.
type Config struct {
	// Interval is the most often a viewer gets an update: events arriving
	// meanwhile are coalesced into one message.
	Interval time.Duration
	// Sweep is how often counts are re-read and sent even with no event,
	// because pub/sub messages can be lost while a frontend is away.
	Sweep time.Duration
	// SendBuffer is how many updates may wait for a slow viewer before it
	// is dropped, so one slow viewer never stalls the others. At least 2:
	// a new viewer's snapshot and its held update go out together.
	SendBuffer int
	// WriteTimeout bounds each websocket write.
	WriteTimeout time.Duration
	// MaxViewers caps connections per frontend (503 beyond). Zero is
	// ViewerCap of the process's descriptor limit, so viewers can never
	// take the descriptors warriors and Redis need.
	MaxViewers int
	// MaxViewersPerAddress caps the connections of one client address, an
	// IPv4 address or an IPv6 /64 (429 beyond, before the upgrade). Zero
	// is DefaultMaxViewersPerAddress.
	MaxViewersPerAddress int
	// IdleTimeout drops a viewer that sent nothing for this long, not even
	// a pong to our pings: a client that stopped reading, or is gone
	// without a FIN, gives its descriptor back. Zero is
	// DefaultViewerIdleTimeout.
	IdleTimeout time.Duration
	// PingEvery is how often viewers are pinged; zero is 30 s, or half of
	// IdleTimeout if that is shorter, so a live viewer is asked at least
	// twice before it is dropped.
	PingEvery time.Duration
	// Clock times pings and idleness (tests move it); nil is the wall
	// clock. Coalescing and sweeps pace real sockets and use real time.
	Clock  queues.Clock
	Logger *slog.Logger
}

// DefaultViewerIdleTimeout is two pings missed and ten seconds' grace.
const DefaultViewerIdleTimeout = 70 * time.Second

const defaultPingEvery = 30 * time.Second

// idleCheckEvery is how often idle viewers are looked for: a viewer may
// outlive IdleTimeout by this much.
const idleCheckEvery = time.Second

// Hub fans completions out to the viewers of each project. Each frontend
// runs one hub with one Redis subscription, so several frontends behind a
// load balancer all show the same stream.
type Hub struct {
	cfg    Config
	rdb    redis.UniversalClient
	source Source
	up     websocket.Upgrader

	mu    sync.Mutex
	rooms map[string]*room
	// viewers counts connected viewers plus the slots Serve has reserved
	// for upgrades in progress, so MaxViewers holds under concurrency;
	// perAddress counts the same per AddressKey.
	viewers    int
	perAddress map[string]int
	// nextPing is when every viewer is pinged next, and nextIdleCheck
	// when idleness is checked next, by the clock: walking every viewer
	// at each tick would cost more than it finds.
	nextPing, nextIdleCheck time.Time
	// stopped refuses every viewer once Stop has begun.
	stopped bool

	// wake tells the loop an event arrived, so a quiet room's first event
	// goes out at once instead of at the next tick.
	wake     chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	pubsub   *redis.PubSub
}

// room is one project's viewers and what waits to be sent to them.
type room struct {
	viewers  map[*viewer]struct{}
	pending  []json.RawMessage
	dirty    bool
	lastSent time.Time
}

// viewer is one websocket client. Only the hub closes send, under hub.mu.
type viewer struct {
	conn *websocket.Conn
	// addr is the AddressKey it counts against.
	addr string
	send chan []byte
	// ping asks the writer to ping; it holds one request.
	ping chan struct{}
	// heard is when the viewer last sent anything (Unix ns, by the
	// clock); the hub drops it once that is IdleTimeout ago.
	heard  atomic.Int64
	closed bool
	// ready is false until the snapshot is queued. Updates broadcast
	// before then are merged into one held update that follows the
	// snapshot, so the snapshot is always first and a slow snapshot read
	// costs one message, not a full buffer.
	ready      bool
	held       bool
	heldCounts queues.Counts
	heldLog    []json.RawMessage
	heldAt     int64
}

// hold merges one update into the viewer's held update.
func (v *viewer) hold(counts queues.Counts, entries []json.RawMessage, at int64) {
	v.held, v.heldCounts, v.heldAt = true, counts, at
	v.heldLog = append(v.heldLog, entries...)
	if len(v.heldLog) > maxPending {
		v.heldLog = v.heldLog[len(v.heldLog)-maxPending:]
	}
}

func updateMessage(counts queues.Counts, entries []json.RawMessage, at int64) []byte {
	if entries == nil {
		entries = []json.RawMessage{}
	}
	msg, _ := json.Marshal(map[string]any{"type": "update", "counts": counts, "log": entries, "at": at})
	return msg
}

// maxPending bounds the log entries kept for one update.
const maxPending = 100

// NewHub builds a hub over the engine's Redis client.
func NewHub(cfg Config, rdb redis.UniversalClient, source Source) *Hub {
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 5 * time.Second
	}
	if cfg.SendBuffer <= 0 {
		cfg.SendBuffer = 16
	}
	// A new viewer's snapshot and its held update go out together.
	cfg.SendBuffer = max(cfg.SendBuffer, 2)
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxViewers <= 0 {
		soft, _, err := DescriptorLimit()
		if err != nil {
			soft = 4096
			cfg.Logger.Warn("leaderboard: cannot read the descriptor limit; capping viewers as if it were 4096", "err", err)
		}
		// Stored even when 0: a limit too small for viewers refuses them.
		cfg.MaxViewers = ViewerCap(soft)
	}
	if cfg.MaxViewersPerAddress <= 0 {
		cfg.MaxViewersPerAddress = DefaultMaxViewersPerAddress
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultViewerIdleTimeout
	}
	if cfg.PingEvery <= 0 {
		cfg.PingEvery = min(defaultPingEvery, cfg.IdleTimeout/2)
	}
	if cfg.Clock == nil {
		cfg.Clock = queues.SystemClock{}
	}
	return &Hub{
		cfg: cfg, rdb: rdb, source: source, rooms: map[string]*room{}, perAddress: map[string]int{},
		wake: make(chan struct{}, 1), nextPing: cfg.Clock.Now().Add(cfg.PingEvery),
		up: websocket.Upgrader{
			ReadBufferSize: 256, WriteBufferSize: 1024,
			// Pooled write buffers: an idle viewer holds none.
			WriteBufferPool: &sync.Pool{},
			// The page is served by this same origin; other origins may
			// read stats.json instead.
			CheckOrigin: sameOrigin,
		},
	}
}

// sameOrigin accepts a request without Origin (not a browser) or from the
// page's own scheme and host, compared without case as RFC 6454 and RFC
// 3986 say they are.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	scheme := strings.ToLower(u.Scheme)
	return (scheme == "http" || scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// Start subscribes to the events channel and starts the update loop.
func (h *Hub) Start(ctx context.Context) error {
	h.pubsub = h.rdb.Subscribe(ctx, queues.EventsChannel)
	if _, err := h.pubsub.Receive(ctx); err != nil {
		_ = h.pubsub.Close()
		return err
	}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.wg.Add(2)
	go h.listen(ctx)
	go h.loop(ctx)
	return nil
}

// Stop closes the subscription and every viewer. It is safe to call twice,
// or without Start.
func (h *Hub) Stop() error {
	h.stopOnce.Do(func() {
		// From here on Serve refuses viewers, before and after the upgrade,
		// so none registers after the loop below has dropped them all.
		h.mu.Lock()
		h.stopped = true
		h.mu.Unlock()
		if h.cancel != nil {
			h.cancel()
		}
		if h.pubsub != nil {
			_ = h.pubsub.Close()
		}
		h.wg.Wait()
		h.mu.Lock()
		for slug, r := range h.rooms {
			for v := range r.viewers {
				h.dropLocked(slug, v)
			}
		}
		h.mu.Unlock()
	})
	return nil
}

// event is a published completion: one entry, or (from queues'
// batched publishes) several.
type event struct {
	Project string            `json:"project"`
	Entry   json.RawMessage   `json:"entry"`
	Entries []json.RawMessage `json:"entries"`
}

// listen turns pub/sub messages into pending log entries of watched rooms.
func (h *Hub) listen(ctx context.Context) {
	defer h.wg.Done()
	ch := h.pubsub.Channel(redis.WithChannelSize(1000))
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			// Every done of every project comes by: with no viewer
			// watching any room, there is nothing to parse it for.
			h.mu.Lock()
			watched := len(h.rooms) > 0
			h.mu.Unlock()
			if !watched {
				continue
			}
			var ev event
			if json.Unmarshal([]byte(msg.Payload), &ev) != nil {
				continue
			}
			if ev.Entry != nil {
				ev.Entries = append(ev.Entries, ev.Entry)
			}
			h.mu.Lock()
			if r, ok := h.rooms[ev.Project]; ok {
				for _, entry := range ev.Entries {
					if len(r.pending) >= maxPending {
						r.pending = r.pending[1:]
					}
					r.pending = append(r.pending, entry)
				}
				r.dirty = true
			}
			h.mu.Unlock()
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}
	}
}

// loop sends a dirty room an update at once if it was sent nothing for an
// interval (leading edge), else at the next tick, so a viewer gets at most
// one coalesced update per interval; and every room its counts per sweep.
func (h *Hub) loop(ctx context.Context) {
	defer h.wg.Done()
	ticker := time.NewTicker(h.cfg.Interval / 2)
	defer ticker.Stop()
	lastSweep := time.Now()
	// failing marks the rooms whose counts could not be read, so a Redis
	// outage logs once per room rather than once per interval.
	failing := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-h.wake:
		}
		h.tend(h.cfg.Clock.Now())
		now := time.Now()
		sweep := now.Sub(lastSweep) >= h.cfg.Sweep
		if sweep {
			lastSweep = now
		}
		h.mu.Lock()
		due := map[string][]json.RawMessage{}
		for slug, r := range h.rooms {
			if (r.dirty && now.Sub(r.lastSent) >= h.cfg.Interval) || sweep {
				due[slug] = r.pending
				r.pending, r.dirty, r.lastSent = nil, false, now
			}
		}
		h.mu.Unlock()
		for slug, entries := range due {
			counts, err := h.source.Counts(ctx, slug)
			if err != nil {
				if !failing[slug] {
					h.cfg.Logger.Warn("leaderboard: reading counts; the update waits for the next interval", "project", slug, "err", err)
				}
				failing[slug] = true
				h.requeue(slug, entries)
				continue
			}
			delete(failing, slug)
			h.broadcast(slug, counts, entries, time.Now().UnixMilli())
		}
	}
}

// requeue puts back entries whose update could not be sent, ahead of any
// that arrived since, so the next interval sends them instead of losing
// them.
func (h *Hub) requeue(slug string, entries []json.RawMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.rooms[slug]
	if !ok {
		return
	}
	merged := append(entries, r.pending...)
	if len(merged) > maxPending {
		merged = merged[len(merged)-maxPending:]
	}
	r.pending, r.dirty = merged, true
}

// broadcast queues an update for every viewer of slug without blocking: a
// viewer whose buffer is full is dropped.
func (h *Hub) broadcast(slug string, counts queues.Counts, entries []json.RawMessage, at int64) {
	msg := updateMessage(counts, entries, at)
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.rooms[slug]
	if !ok {
		return
	}
	for v := range r.viewers {
		if !v.ready {
			v.hold(counts, entries, at)
			continue
		}
		select {
		case v.send <- msg:
		default:
			h.dropLocked(slug, v)
		}
	}
}

// tend pings every viewer once per PingEvery and drops those not heard
// from for IdleTimeout, both by the clock.
func (h *Hub) tend(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pinging := !now.Before(h.nextPing)
	if !pinging && now.Before(h.nextIdleCheck) {
		return
	}
	h.nextIdleCheck = now.Add(idleCheckEvery)
	if pinging {
		h.nextPing = now.Add(h.cfg.PingEvery)
	}
	idleSince := now.Add(-h.cfg.IdleTimeout).UnixNano()
	dropped := 0
	for slug, r := range h.rooms {
		for v := range r.viewers {
			if v.heard.Load() < idleSince {
				h.dropLocked(slug, v)
				dropped++
				continue
			}
			if pinging {
				select {
				case v.ping <- struct{}{}:
				default: // a ping is already waiting
				}
			}
		}
	}
	if dropped > 0 {
		h.cfg.Logger.Debug("leaderboard: dropped idle viewers", "viewers", dropped, "idle_timeout", h.cfg.IdleTimeout)
	}
}

// releaseLocked gives back a viewer slot reserved by Serve.
func (h *Hub) releaseLocked(addr string) {
	h.viewers--
	if h.perAddress[addr]--; h.perAddress[addr] <= 0 {
		delete(h.perAddress, addr)
	}
}

func (h *Hub) dropLocked(slug string, v *viewer) {
	if v.closed {
		return
	}
	v.closed = true
	close(v.send)
	h.releaseLocked(v.addr)
	if r, ok := h.rooms[slug]; ok {
		delete(r.viewers, v)
		if len(r.viewers) == 0 {
			delete(h.rooms, slug)
		}
	}
}

func (h *Hub) drop(slug string, v *viewer) {
	h.mu.Lock()
	h.dropLocked(slug, v)
	h.mu.Unlock()
}

// Viewers reports how many viewers are connected.
func (h *Hub) Viewers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.viewers
}

// ErrTooManyViewers is returned when MaxViewers are connected.
var ErrTooManyViewers = errors.New("too many viewers on this frontend")

// ErrTooManyViewersFromAddress is returned when the client's address
// already holds MaxViewersPerAddress viewers.
var ErrTooManyViewersFromAddress = errors.New("too many live viewers from your address on this frontend; close some")

// ErrHubStopped is returned once Stop has begun.
var ErrHubStopped = errors.New("the live hub is stopped")

// Serve upgrades a request to a websocket for one project's live stream.
// The first message is a snapshot from stored state (counts and the recent
// log), so a viewer that connects or reconnects catches up whatever
// pub/sub messages it missed; updates broadcast while the snapshot is read
// are held and follow it, so none is lost and none comes first.
//
// client is the client's IP address as the caller resolved it (behind
// trusted proxies, the forwarded one); it is counted by AddressKey. The
// caps are checked before the upgrade, so a refused client gets a plain
// HTTP answer: ErrTooManyViewersFromAddress (429), ErrTooManyViewers or
// ErrHubStopped (503).
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, slug, client string) error {
	addr := AddressKey(client)
	// Check and reserve in one step, so concurrent requests cannot all see
	// one free slot.
	h.mu.Lock()
	switch {
	case h.stopped:
		h.mu.Unlock()
		return ErrHubStopped
	case h.perAddress[addr] >= h.cfg.MaxViewersPerAddress:
		h.mu.Unlock()
		return ErrTooManyViewersFromAddress
	case h.viewers >= h.cfg.MaxViewers:
		h.mu.Unlock()
		return ErrTooManyViewers
	}
	h.viewers++
	h.perAddress[addr]++
	h.mu.Unlock()

	conn, err := h.up.Upgrade(w, r, nil)
	if err != nil {
		h.mu.Lock()
		h.releaseLocked(addr)
		h.mu.Unlock()
		return nil // the upgrader has answered the client
	}
	v := &viewer{conn: conn, addr: addr, send: make(chan []byte, h.cfg.SendBuffer), ping: make(chan struct{}, 1)}
	v.heard.Store(h.cfg.Clock.Now().UnixNano())
	h.mu.Lock()
	if h.stopped {
		// Stop began during the upgrade and may already have dropped every
		// viewer: this one must not outlive it.
		h.releaseLocked(addr)
		h.mu.Unlock()
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""),
			time.Now().Add(h.cfg.WriteTimeout))
		_ = conn.Close()
		return nil
	}
	rm, ok := h.rooms[slug]
	if !ok {
		rm = &room{viewers: map[*viewer]struct{}{}}
		h.rooms[slug] = rm
	}
	// Registered before the snapshot is read, so every event from here on
	// reaches this viewer: in the snapshot, in a held update, or both (the
	// page drops duplicates).
	rm.viewers[v] = struct{}{}
	h.mu.Unlock()

	go h.write(slug, v)
	go h.read(slug, v)

	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	counts, err := h.source.Counts(ctx, slug)
	if err != nil {
		h.drop(slug, v)
		return nil
	}
	recent, err := h.source.Recent(ctx, slug, 50)
	if err != nil {
		h.drop(slug, v)
		return nil
	}
	snapshot, _ := json.Marshal(map[string]any{"type": "snapshot", "counts": counts, "log": recent, "at": time.Now().UnixMilli()})
	// One critical section: no broadcast can slip between the snapshot and
	// the updates held for it.
	h.mu.Lock()
	defer h.mu.Unlock()
	if v.closed {
		return nil
	}
	// send is empty (nothing was queued before ready) and holds at least
	// two messages.
	v.send <- snapshot
	if v.held {
		v.send <- updateMessage(v.heldCounts, v.heldLog, v.heldAt)
	}
	v.ready, v.held, v.heldLog = true, false, nil
	return nil
}

// write sends queued messages with a deadline each, and the pings tend
// asks for; it ends when the hub closes send or a write fails.
func (h *Hub) write(slug string, v *viewer) {
	defer func() {
		_ = v.conn.Close()
		h.drop(slug, v)
	}()
	for {
		select {
		case msg, ok := <-v.send:
			_ = v.conn.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
			if !ok {
				_ = v.conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""))
				return
			}
			if err := v.conn.WriteMessage(websocket.TextMessage, msg); err != nil {
				return
			}
		case <-v.ping:
			_ = v.conn.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
			if err := v.conn.WriteMessage(websocket.PingMessage, nil); err != nil {
				return
			}
		}
	}
}

// read discards what the viewer sends (nothing is expected but pongs) and
// notes when it last heard anything, for tend; it ends when the viewer
// goes away or sends more than a control frame's worth. There is no
// socket read deadline: idleness is tend's, by the clock.
func (h *Hub) read(slug string, v *viewer) {
	defer h.drop(slug, v)
	heard := func() { v.heard.Store(h.cfg.Clock.Now().UnixNano()) }
	v.conn.SetReadLimit(512)
	v.conn.SetPongHandler(func(string) error { heard(); return nil })
	v.conn.SetPingHandler(func(data string) error {
		heard()
		// What the default handler does: answer, and let a failed write
		// surface on the next read.
		err := v.conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(h.cfg.WriteTimeout))
		if err == nil || errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})
	for {
		if _, _, err := v.conn.ReadMessage(); err != nil {
			return
		}
		heard()
	}
}
