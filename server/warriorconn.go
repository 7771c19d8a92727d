package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
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

// warriorMaxHead: a longer head goes to net/http, which applies its own
// limit (maxHeaderBytes). Seesaw's are a few hundred bytes.
const warriorMaxHead = 8 << 10

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

// warriorListener answers the main port's warrior calls on the
// connection loop the BitTorrent plugin's listener shares (http1.Server:
// accept, workers, pooled buffers, timeouts, Stop), until a connection
// needs net/http.
type warriorListener struct {
	api      *WarriorAPI
	metrics  *Metrics
	refusals *ratelog.Log
	logger   *slog.Logger
	trusted  trustedProxies
	handoff  *handoffListener
	conns    *http1.Server[warriorState]

	// answered counts the calls this listener answered, handedOff the
	// connections it gave to net/http.
	answered, handedOff atomic.Int64
}

// warriorConn is one client connection; its S is what the listener keeps
// of it between calls.
type warriorConn = http1.Conn[warriorState]

// warriorState is what a connection keeps between its calls.
type warriorState struct {
	// Copies of the last call's strings that outlive a call (the engine
	// may keep them), reused while the next call's are the same: a
	// warrior's connection calls one project with one user agent.
	slug, userAgent string
	// The remote address as gin reads it, once a claim needs it.
	remoteRead    bool
	remoteTrusted bool
	remoteIP      string
}

func newWarriorListener(api *WarriorAPI, metrics *Metrics, refusals *ratelog.Log, logger *slog.Logger, trusted trustedProxies) *warriorListener {
	l := &warriorListener{api: api, metrics: metrics, refusals: refusals, logger: logger, trusted: trusted}
	l.conns = http1.NewServer(http1.ServerConfig{
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHead:           warriorMaxHead,
		Logger:            logger,
		Name:              "http",
		// net/http's Serve then ends with the error, which Server.Done
		// reports, as when it accepted itself.
		AcceptEnded: func(err error) { l.handoff.closeWith(err) },
	}, warriorHandler{l})
	return l
}

// start accepts on ln in the background, handing connections to handoff.
func (l *warriorListener) start(ln net.Listener, handoff *handoffListener) {
	l.handoff = handoff
	l.conns.Start(ln)
}

// close stops accepting and closes the idle connections; the busy ones
// close after their answer. Safe to call twice.
func (l *warriorListener) close() { _ = l.conns.Close() }

// wait waits for the connections being served until ctx ends, then
// cancels their calls and closes them.
func (l *warriorListener) wait(ctx context.Context) { l.conns.Wait(ctx) }

// warriorHandler serves the listener's requests.
type warriorHandler struct{ l *warriorListener }

// ServeRequest answers a call this listener serves, or hands the
// connection to net/http.
func (h warriorHandler) ServeRequest(c *warriorConn, headLen int) bool {
	route, ok := h.l.servable(c, headLen)
	if !ok {
		h.l.handOff(c)
		return false
	}
	moved, ok := c.ReadBody(headLen, int(c.Head.ContentLength))
	if !ok {
		return false
	}
	if moved {
		// The parsed strings point into the old buffer: read the head
		// again from its new place.
		if http1.ParseRequestHead(c.Input(headLen), warriorFields, &c.Head) != nil {
			return false
		}
	}
	return h.l.answer(c, route, headLen)
}

// HeadTooLarge hands a head past warriorMaxHead to net/http, which
// applies its own limit.
func (h warriorHandler) HeadTooLarge(c *warriorConn, _ *http1.HeadError) { h.l.handOff(c) }

// servable parses the head and decides whether this listener answers the
// request: a POST of request, done or fail in HTTP/1.1 with a body
// length net/http would read and accept, and nothing it would read
// differently from gin.
func (l *warriorListener) servable(c *warriorConn, headLen int) (warriorRoute, bool) {
	h := &c.Head
	if http1.ParseRequestHead(c.Input(headLen), warriorFields, h) != nil {
		return warriorRoute{}, false
	}
	if h.Method != http.MethodPost || h.Minor != 1 || h.Chunked || h.Fields[fieldExpect].Lines > 0 ||
		h.ContentLength < 0 || h.ContentLength > l.api.MaxBodyBytes {
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

// answer serves the call and writes its answer with one write. It returns
// whether the connection stays open: the client wants it, the server is
// not stopping (read once the answer is ready, so a call Stop waited for
// closes its connection) and the write went.
func (l *warriorListener) answer(c *warriorConn, route warriorRoute, headLen int) (keep bool) {
	h := &c.Head
	start := time.Now()
	bodyLen := int(h.ContentLength)
	status := http.StatusOK
	// The call is recorded before its answer is written, as net/http's
	// buffered answer left gin's metrics middleware: a client that has
	// its answer finds the call in /metrics.
	observe := func() { l.metrics.observe(warriorRouteLabel(route, h.Path), status, time.Since(start)) }
	defer func() {
		if p := recover(); p != nil {
			// gin.Recovery's answer: 500 with no body, the panic logged.
			l.logger.Error("panic serving a warrior call", "path", h.Path, "panic", p, "stack", string(debug.Stack()))
			status = http.StatusInternalServerError
			observe()
			keep = !h.Close && !c.Closing()
			c.Out = appendWarriorHead(c.Out[:0], status, "", "", 0, keep, time.Now())
			keep = c.Write(c.Out) == nil && keep
		}
	}()
	l.answered.Add(1)
	route.Slug = own(&c.S.slug, route.Slug)
	call := warriorCall{ctx: c.Context(), route: route, body: c.Input(headLen + bodyLen)[headLen:]}
	var reply warriorReply
	err := l.api.workRefusal(route.Slug, h.Fields[fieldAuthorization].First)
	if err == nil {
		switch route.Action {
		case "request":
			call.clientIP = l.clientIP(c)
		case "done":
			call.userAgent = own(&c.S.userAgent, h.Fields[fieldUserAgent].First)
		}
		reply, err = l.api.answer(&call)
	}
	keep = !h.Close && !c.Closing()
	if err != nil {
		a := answerError(err)
		a.note(c.Context(), l.refusals, h.Method, h.Path, err)
		body, merr := json.Marshal(a.body)
		if merr != nil {
			panic(merr) // gin's c.JSON panics too; the deferred recover answers 500
		}
		status = a.status
		c.Out = appendWarriorHead(c.Out[:0], status, contentTypeJSONUTF8[0], a.retryAfter, len(body), keep, time.Now())
		c.Out = append(c.Out, body...)
	} else {
		c.Out = appendWarriorHead(c.Out[:0], status, reply.contentType[0], "", len(reply.body), keep, time.Now())
		c.Out = append(c.Out, reply.body...)
	}
	observe()
	return c.Answer(c.Out, headLen, keep)
}

// own returns s, a view into the input buffer, as a string of its own:
// the copy kept in *last when it is the same.
func own(last *string, s string) string {
	if *last != s {
		*last = strings.Clone(s)
	}
	return *last
}

// clientIP is gin's ClientIP for the current request (trustedProxies).
func (l *warriorListener) clientIP(c *warriorConn) string {
	st := &c.S
	if !st.remoteRead {
		st.remoteRead = true
		// RemoteAddr, not NetConn().RemoteAddr(): NetConn promotes a
		// connection accepted raw (internal/http1/raw_linux.go).
		_, st.remoteTrusted, st.remoteIP = l.trusted.remote(c.RemoteAddr().String())
	}
	if !st.remoteTrusted {
		return st.remoteIP
	}
	for _, field := range []int{fieldForwardedFor, fieldRealIP} {
		if ip, ok := l.trusted.forwarded(c.Head.Fields[field].First); ok {
			return strings.Clone(ip)
		}
	}
	return st.remoteIP
}

// appendHead writes a response head as net/http writes it for gin's
// answer: the status line, the handler's headers (sorted), then Date,
// Content-Length and Connection. now is the Date.
func appendWarriorHead(b []byte, status int, contentType, retryAfter string, contentLength int, keep bool, now time.Time) []byte {
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
	b = http1.AppendDate(b, now)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(contentLength), 10)
	b = append(b, "\r\n"...)
	if !keep {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// handOff gives the connection, with the bytes read and not answered, to
// net/http, which sets its own deadlines from here.
func (l *warriorListener) handOff(c *warriorConn) {
	l.handedOff.Add(1)
	nc, pending := c.Detach()
	rc := &replayConn{Conn: nc, pending: pending}
	if !l.handoff.give(rc) {
		_ = rc.Close()
	}
}
