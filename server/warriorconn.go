package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/internal/http1"
	"github.com/hoardproject/hoard/internal/ratelog"
)

// The warrior listener accepts every connection on hoard's main port and
// answers the seesaw round trip (POST request, done and fail) itself,
// with the shared HTTP/1.x parser (internal/http1): net/http's per-request
// machinery (a background reader, header maps, a request context, a
// buffered response writer) and gin's context and middleware were about
// half of hoard's CPU per round trip, and seesaw opens a connection per
// call. Anything else it is not sure to answer exactly as gin would (every
// other route, another method, HTTP/1.0, Expect, a chunked or too large
// body, a head it does not parse or past warriorMaxHead, several X-Forwarded-For
// lines on a claim) is handed with the bytes already read to the net/http
// Server, through handoffListener: net/http then reads that request and
// every later one on the connection as if it had accepted it. Handing a
// connection on, rather than proxying the rest in-process, keeps every
// other route, websockets and refusals net/http's own, byte for byte, at
// no cost to them but a parse of their first head.
//
// A served call's answer is what gin wrote: the same handler code
// (WarriorAPI.answer), the same error rendering (answerError), the same
// metrics (Metrics.observe) and headers in net/http's order; the timeouts
// are the http.Server's (server.go). TestWarriorListenerAnswersAsNetHTTP
// compares the bytes.

// The main port's limits, for the http.Server and the warrior listener.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 60 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
)

const (
	// warriorInitialBuffer is a connection's input buffer at first: a
	// seesaw call's head and body (about 500 bytes) several times over.
	warriorInitialBuffer = 4 << 10
	// warriorMaxHead: a longer head goes to net/http, which applies its
	// own limit (maxHeaderBytes). Seesaw's are a few hundred bytes.
	warriorMaxHead = 8 << 10
	// maxPooledBuffer bounds the buffers a closed connection's struct
	// keeps in the pool (a large body grows a connection's input).
	maxPooledBuffer = 64 << 10
)

// The headers the warrior listener reads, by their index in
// RequestHead.Fields.
const (
	fieldAuthorization = iota
	fieldUserAgent
	fieldForwardedFor
	fieldRealIP
	fieldExpect
)

var warriorFields = []string{"Authorization", "User-Agent", "X-Forwarded-For", "X-Real-IP", "Expect"}

// Connection states, for Stop: an idle connection waits for a request and
// is closed at once; a busy one finishes its request first.
const (
	warriorConnBusy int32 = iota
	warriorConnIdle
)

// errHandOff: the request goes to net/http.
var errHandOff = errors.New("handed to net/http")

// warriorListener serves the main port's connections until they need
// net/http.
type warriorListener struct {
	api      *WarriorAPI
	metrics  *Metrics
	refusals *ratelog.Log
	logger   *slog.Logger
	trusted  trustedProxies
	handoff  *handoffListener

	// baseCtx is every call's context: cancelled when Stop gives up
	// waiting for the calls in flight.
	baseCtx context.Context
	cancel  context.CancelFunc
	closing atomic.Bool
	wg      sync.WaitGroup // the accept loop and the connections
	// answered counts the calls this listener answered, handedOff the
	// connections it gave to net/http.
	answered, handedOff atomic.Int64

	mu      sync.Mutex
	ln      net.Listener
	conns   map[*warriorConn]struct{}
	stopped bool
}

func newWarriorListener(api *WarriorAPI, metrics *Metrics, refusals *ratelog.Log, logger *slog.Logger, trusted trustedProxies) *warriorListener {
	l := &warriorListener{api: api, metrics: metrics, refusals: refusals, logger: logger, trusted: trusted,
		conns: map[*warriorConn]struct{}{}}
	l.baseCtx, l.cancel = context.WithCancel(context.Background())
	return l
}

// start accepts on ln in the background, handing connections to handoff.
func (l *warriorListener) start(ln net.Listener, handoff *handoffListener) {
	l.ln, l.handoff = ln, handoff
	l.wg.Add(1)
	go l.acceptLoop()
}

// acceptLoop gives each connection its goroutine until the listener
// closes. A temporary accept error (out of file descriptors) backs off
// from 5 ms to 1 s, as net/http's Serve does; any other ends net/http's
// Serve with it, which Server.Done reports.
func (l *warriorListener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if l.closing.Load() {
				return
			}
			var temp interface{ Temporary() bool }
			if errors.As(err, &temp) && temp.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				l.logger.Warn("http: accept failed, retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			l.handoff.closeWith(err)
			return
		}
		backoff = 0
		c := newWarriorConn(l, nc)
		if !l.track(c) {
			c.close()
			continue
		}
		go c.serve()
	}
}

// track registers a new connection, unless the listener is stopping.
func (l *warriorListener) track(c *warriorConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return false
	}
	l.conns[c] = struct{}{}
	l.wg.Add(1)
	c.tracked = true
	return true
}

// forget removes a connection closed or handed on.
func (l *warriorListener) forget(c *warriorConn) {
	if !c.tracked {
		return
	}
	c.tracked = false
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	l.wg.Done()
}

// close stops accepting and closes the idle connections; the busy ones
// close after their answer. Safe to call twice.
func (l *warriorListener) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.stopped = true
	l.closing.Store(true)
	if l.ln != nil {
		_ = l.ln.Close()
	}
	for c := range l.conns {
		if c.state.Load() == warriorConnIdle {
			_ = c.nc.Close()
		}
	}
}

// wait waits for the connections being served until ctx ends, then
// cancels their calls and closes them.
func (l *warriorListener) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		l.cancel()
		l.mu.Lock()
		for c := range l.conns {
			_ = c.nc.Close()
		}
		l.mu.Unlock()
		<-done
	}
	l.cancel()
}

// warriorConnPool keeps closed connections' structs with their buffers:
// seesaw opens a connection per call.
var warriorConnPool = sync.Pool{New: func() any { return &warriorConn{base: make([]byte, warriorInitialBuffer)} }}

func newWarriorConn(l *warriorListener, nc net.Conn) *warriorConn {
	c := warriorConnPool.Get().(*warriorConn)
	c.l, c.nc, c.in = l, nc, c.base
	return c
}

// warriorConn is one client connection.
type warriorConn struct {
	l       *warriorListener
	nc      net.Conn
	state   atomic.Int32
	tracked bool // in l.conns
	handed  bool // given to net/http: no longer this loop's to close
	served  int  // calls answered

	base []byte // the input buffer kept in the pool
	in   []byte // base, or a larger one for this connection
	r, w int    // unread input is in[r:w]
	out  []byte
	head http1.RequestHead

	// The deadlines set on nc (setReadDeadline, write).
	readDeadline, writeDeadline time.Time

	// Copies of the last call's strings that outlive a call (the engine
	// may keep them), reused while the next call's are the same: a
	// warrior's connection calls one project with one user agent.
	slug, userAgent string
	// The remote address as gin reads it, once a claim needs it.
	remoteRead    bool
	remoteTrusted bool
	remoteIP      string
}

// serve answers calls until the client closes, a timeout passes, the
// server stops, or a request goes to net/http.
func (c *warriorConn) serve() {
	defer c.close()
	// A new goroutine's stack is small; grown here, it is copied with one
	// frame on it instead of deep in the first call (stack.go): seesaw
	// opens a connection per call.
	growStack(len(c.in))
	for {
		headLen, err := c.readHead()
		if err == nil {
			var route warriorRoute
			var ok bool
			if route, ok = c.servable(headLen); ok {
				if !c.readBody(headLen) {
					return
				}
				if keep := c.answer(route, headLen); !keep {
					return
				}
				continue
			}
			err = errHandOff
		}
		if errors.Is(err, errHandOff) {
			c.handOff()
		}
		return
	}
}

// readHead waits for a whole request head in the buffer and returns its
// length from c.r; errHandOff when it grows past warriorMaxHead. Blank
// lines before a request are skipped, as net/http does.
func (c *warriorConn) readHead() (int, error) {
	scanned := 0
	waited := false // the header deadline is set
	for {
		for scanned == 0 && c.r < c.w && (c.in[c.r] == '\r' || c.in[c.r] == '\n') {
			c.r++
		}
		if c.r == c.w {
			c.r, c.w = 0, 0
		}
		if c.r < c.w {
			end, resume := http1.HeadEnd(c.in[c.r:c.w], scanned)
			if end > 0 {
				return end, nil
			}
			scanned = resume
			if c.w-c.r >= warriorMaxHead {
				return 0, errHandOff
			}
		}
		now := time.Now()
		if c.r == c.w {
			// Between requests: Stop may close an idle connection. It
			// checks the state after setting closing, and this checks
			// closing after setting the state, so one sees the other.
			c.state.Store(warriorConnIdle)
			if c.l.closing.Load() {
				return 0, net.ErrClosed
			}
			if c.served == 0 {
				c.setReadDeadline(now, readHeaderTimeout) // net/http: no idle wait before the first
			} else {
				c.setReadDeadline(now, idleTimeout)
			}
		} else if !waited {
			waited = true
			c.setReadDeadline(now, readHeaderTimeout)
		}
		c.makeRoom(c.w - c.r + 1)
		n, err := c.nc.Read(c.in[c.w:])
		c.w += n
		if n > 0 && c.state.Load() == warriorConnIdle {
			c.state.Store(warriorConnBusy)
		}
		if err != nil && n == 0 {
			return 0, err
		}
	}
}

// makeRoom makes space after c.w for at least one read: moving the unread
// bytes to the front, or growing this connection's buffer so that need
// bytes from c.r fit.
func (c *warriorConn) makeRoom(need int) {
	if c.w < len(c.in) && len(c.in)-c.r >= need {
		return
	}
	if c.r > 0 && len(c.in) >= need {
		c.w = copy(c.in, c.in[c.r:c.w])
		c.r = 0
		if c.w < len(c.in) {
			return
		}
	}
	bigger := make([]byte, max(2*len(c.in), need))
	c.w = copy(bigger, c.in[c.r:c.w])
	c.r = 0
	c.in = bigger
}

// servable parses the head and decides whether this listener answers the
// request: a POST of request, done or fail in HTTP/1.1 with a body
// length net/http would read and accept, and nothing it would read
// differently from gin.
func (c *warriorConn) servable(headLen int) (warriorRoute, bool) {
	h := &c.head
	if http1.ParseRequestHead(c.in[c.r:c.r+headLen], warriorFields, h) != nil {
		return warriorRoute{}, false
	}
	if h.Method != http.MethodPost || h.Minor != 1 || h.Chunked || h.Fields[fieldExpect].Lines > 0 ||
		h.ContentLength < 0 || h.ContentLength > c.l.api.MaxBodyBytes {
		return warriorRoute{}, false
	}
	route, ok := warriorCallRoute(h.Path)
	if !ok {
		return warriorRoute{}, false
	}
	// gin's ClientIP joins a header's lines; one line is read here.
	if route.Action == "request" && (h.Fields[fieldForwardedFor].Lines > 1 || h.Fields[fieldRealIP].Lines > 1) {
		return warriorRoute{}, false
	}
	return route, true
}

// warriorCallRoute reports whether gin would route a POST to path to
// WarriorAPI.answer: no route of its own (TestWarriorCallPathsAreNotGinRoutes),
// none of Dispatch's other resources, a warrior path without error whose
// action answer serves.
func warriorCallRoute(path string) (warriorRoute, bool) {
	route, ok, err := parseWarriorPath(path)
	if !ok || err != nil || !answeredByCall(route.Action) {
		return warriorRoute{}, false
	}
	if _, ok := statsJSONSlug(path); ok {
		return warriorRoute{}, false
	}
	if _, _, ok := pagePath(path); ok {
		return warriorRoute{}, false
	}
	if _, _, ok := itemStatusPath(path); ok {
		return warriorRoute{}, false
	}
	return route, true
}

// readBody waits until the request's body is in the buffer after its
// head; false when the client goes or the read timeout passes (net/http
// closes such a connection without an answer too).
func (c *warriorConn) readBody(headLen int) bool {
	need := headLen + int(c.head.ContentLength)
	if c.w-c.r >= need {
		return true
	}
	if len(c.in)-c.r < need {
		// Moving the buffer moves the head the parsed strings point
		// into: read it again from its new place.
		c.makeRoom(need)
		if http1.ParseRequestHead(c.in[c.r:c.r+headLen], warriorFields, &c.head) != nil {
			return false
		}
	}
	c.setReadDeadline(time.Now(), readTimeout)
	for c.w-c.r < need {
		n, err := c.nc.Read(c.in[c.w:])
		c.w += n
		if err != nil && c.w-c.r < need {
			return false
		}
	}
	return true
}

// answer serves the call and writes its answer with one write. It returns
// whether the connection stays open: the client wants it, the server is
// not stopping (read once the answer is ready, so a call Stop waited for
// closes its connection) and the write went.
func (c *warriorConn) answer(route warriorRoute, headLen int) (keep bool) {
	h := &c.head
	start := time.Now()
	bodyLen := int(h.ContentLength)
	status := http.StatusOK
	// The call is recorded before its answer is written, as net/http's
	// buffered answer left gin's metrics middleware: a client that has
	// its answer finds the call in /metrics.
	observe := func() { c.l.metrics.observe(warriorRouteLabel(route, h.Path), status, time.Since(start)) }
	defer func() {
		if p := recover(); p != nil {
			// gin.Recovery's answer: 500 with no body, the panic logged.
			c.l.logger.Error("panic serving a warrior call", "path", h.Path, "panic", p, "stack", string(debug.Stack()))
			status = http.StatusInternalServerError
			observe()
			keep = !h.Close && !c.l.closing.Load()
			c.out = c.appendHead(c.out[:0], status, "", "", 0, keep)
			keep = c.write() && keep
		}
		c.r += headLen + bodyLen
		c.served++
	}()
	c.l.answered.Add(1)
	route.Slug = c.own(&c.slug, route.Slug)
	call := warriorCall{ctx: c.l.baseCtx, route: route, body: c.in[c.r+headLen : c.r+headLen+bodyLen]}
	var reply warriorReply
	err := c.l.api.workRefusal(route.Slug, h.Fields[fieldAuthorization].First)
	if err == nil {
		switch route.Action {
		case "request":
			call.clientIP = c.clientIP()
		case "done":
			call.userAgent = c.own(&c.userAgent, h.Fields[fieldUserAgent].First)
		}
		reply, err = c.l.api.answer(&call)
	}
	keep = !h.Close && !c.l.closing.Load()
	if err != nil {
		a := answerError(err)
		a.note(c.l.baseCtx, c.l.refusals, h.Method, h.Path, err)
		body, merr := json.Marshal(a.body)
		if merr != nil {
			panic(merr) // gin's c.JSON panics too; the deferred recover answers 500
		}
		status = a.status
		c.out = c.appendHead(c.out[:0], status, contentTypeJSONUTF8[0], a.retryAfter, len(body), keep)
		c.out = append(c.out, body...)
	} else {
		c.out = c.appendHead(c.out[:0], status, reply.contentType[0], "", len(reply.body), keep)
		c.out = append(c.out, reply.body...)
	}
	observe()
	return c.write() && keep
}

// own returns s, a view into the input buffer, as a string of its own:
// the copy kept in *last when it is the same.
func (c *warriorConn) own(last *string, s string) string {
	if *last != s {
		*last = strings.Clone(s)
	}
	return *last
}

// clientIP is gin's ClientIP for the current request (trustedProxies).
func (c *warriorConn) clientIP() string {
	if !c.remoteRead {
		c.remoteRead = true
		_, c.remoteTrusted, c.remoteIP = c.l.trusted.remote(c.nc.RemoteAddr().String())
	}
	if !c.remoteTrusted {
		return c.remoteIP
	}
	for _, field := range []int{fieldForwardedFor, fieldRealIP} {
		if ip, ok := c.l.trusted.forwarded(c.head.Fields[field].First); ok {
			return strings.Clone(ip)
		}
	}
	return c.remoteIP
}

// appendHead writes a response head as net/http writes it for gin's
// answer: the status line, the handler's headers (sorted), then Date,
// Content-Length and Connection.
func (c *warriorConn) appendHead(b []byte, status int, contentType, retryAfter string, contentLength int, keep bool) []byte {
	b = http1.AppendStatusLine(b, status)
	if contentType != "" {
		b = append(b, "Content-Type: "...)
		b = append(b, contentType...)
		b = append(b, "\r\n"...)
	}
	if retryAfter != "" {
		b = append(b, "Retry-After: "...)
		b = append(b, retryAfter...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Date: "...)
	b = time.Now().UTC().AppendFormat(b, http.TimeFormat)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(contentLength), 10)
	b = append(b, "\r\n"...)
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// write sends c.out; false when it did not go.
func (c *warriorConn) write() bool {
	if d := time.Now().Add(writeTimeout); d.Sub(c.writeDeadline) > deadlineSlack {
		c.writeDeadline = d
		_ = c.nc.SetWriteDeadline(d)
	}
	_, err := c.nc.Write(c.out)
	return err == nil
}

// deadlineSlack: a deadline is moved only when it would move by more
// than this. Moving one is a timer update, twice per call on a kept-alive
// connection; so an idle connection may be closed up to this much before
// idleTimeout, a write given up up to this much before writeTimeout.
const deadlineSlack = time.Second

// setReadDeadline makes the read deadline now+timeout, unless the one set
// is within deadlineSlack after it. A shorter timeout than the one set
// (the header's after the idle one) always moves it.
func (c *warriorConn) setReadDeadline(now time.Time, timeout time.Duration) {
	d := now.Add(timeout)
	if diff := d.Sub(c.readDeadline); diff >= 0 && diff <= deadlineSlack {
		return
	}
	c.readDeadline = d
	_ = c.nc.SetReadDeadline(d)
}

// handOff gives the connection, with the bytes read and not answered, to
// net/http.
func (c *warriorConn) handOff() {
	// Forgotten first: from here Stop leaves it to net/http's Shutdown.
	c.l.forget(c)
	c.handed = true
	c.l.handedOff.Add(1)
	nc := &replayConn{Conn: c.nc, pending: bytes.Clone(c.in[c.r:c.w])}
	// net/http sets its own deadlines from here.
	_ = nc.SetDeadline(time.Time{})
	if !c.l.handoff.give(nc) {
		_ = nc.Close()
	}
}

// close closes the connection (unless handed on) and returns its struct
// to the pool: once forgotten, nothing else holds it.
func (c *warriorConn) close() {
	if !c.handed {
		_ = c.nc.Close()
	}
	c.l.forget(c)
	out := c.out[:0]
	if cap(out) > maxPooledBuffer {
		out = nil
	}
	*c = warriorConn{base: c.base, out: out}
	warriorConnPool.Put(c)
}
