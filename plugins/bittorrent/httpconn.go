package bittorrent

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/internal/http1"
)

// The listener speaks HTTP/1.x itself instead of through net/http's
// Server: an announce is one short GET answered with a few hundred bytes,
// and net/http's per-request machinery (a background reader, header maps,
// a request context, a buffered response writer) cost more plugin CPU than
// the announce. One goroutine per connection reads requests from one
// buffer, answers each with one write, in order, and keeps the connection
// while the client wants it.

// maxHeadBytes bounds a request's line and headers, as net/http's
// MaxHeaderBytes did (announce URLs are a few hundred bytes).
const maxHeadBytes = 16 << 10

// connInitialBuffer is a connection's input buffer at first: a typical
// announce's head and a few pipelined ones. It grows, for that
// connection, up to maxHeadBytes when a head needs it.
const connInitialBuffer = 4 << 10

// Connection states, for Stop: an idle connection waits for a request
// and is closed at once; an active one finishes its request first.
const (
	connActive int32 = iota
	connIdle
)

// connPool keeps closed connections' structs with their buffers: a
// client opening a connection per announce would otherwise allocate the
// struct, its input buffer and its response buffer (grown append by
// append) for every announce.
var connPool = sync.Pool{New: func() any { return &httpConn{base: make([]byte, connInitialBuffer)} }}

// maxPooledOut bounds the response buffer a pooled connection keeps.
const maxPooledOut = 64 << 10

// newHTTPConn is a connection's struct, from the pool.
func newHTTPConn(s *HTTPServer, nc net.Conn) *httpConn {
	c := connPool.Get().(*httpConn)
	c.srv, c.nc, c.in = s, nc, c.base
	if tcp, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		c.remote = tcp.AddrPort()
	}
	return c
}

// httpConn is one client connection.
type httpConn struct {
	srv    *HTTPServer
	nc     net.Conn
	remote netip.AddrPort
	state  atomic.Int32

	base []byte // the input buffer kept in the pool
	in   []byte // base, or a larger one for this connection
	r, w int    // unread input is in[r:w]
	out  []byte // the response being written
	head requestHead
	// answered is how many requests this connection has had answered: the
	// first request's head must come within ReadHeaderTimeout of the
	// accept, as net/http has it, not after an idle wait.
	answered int
}

// serve answers requests until the client closes, a timeout passes, a
// request is refused, or the server stops.
func (c *httpConn) serve() {
	defer c.close()
	for {
		head, err := c.readHead()
		if err != nil {
			var he *headError
			if errors.As(err, &he) {
				c.refuse(he)
			}
			return
		}
		herr := parseRequestHead(c.in[c.r:c.r+head], c.srv.proxyHeader, &c.head)
		c.r += head
		if herr != nil {
			c.refuse(herr)
			return
		}
		keep := c.answer()
		c.answered++
		if !keep {
			return
		}
	}
}

// readHead waits for a whole request head in the buffer and returns its
// length from c.r. Blank lines before a request are skipped, as net/http
// does for old clients.
func (c *httpConn) readHead() (int, error) {
	scanned := 0
	waited := false // the header deadline is set
	for {
		for c.r < c.w && (c.in[c.r] == '\r' || c.in[c.r] == '\n') && scanned == 0 {
			c.r++
		}
		if c.r == c.w {
			c.r, c.w = 0, 0
		}
		if c.r < c.w {
			end, resume := http1.HeadEnd(c.in[c.r:c.w], scanned)
			if end > 0 {
				if end > maxHeadBytes {
					return 0, c.tooLarge()
				}
				return end, nil
			}
			scanned = resume
			if c.w-c.r > maxHeadBytes {
				return 0, c.tooLarge()
			}
		}
		now := time.Now()
		if c.r == c.w {
			// Between requests: the connection is idle, and Stop may
			// close it. It checks the state after setting closing, and
			// this checks closing after setting the state, so one of
			// them sees the other.
			c.state.Store(connIdle)
			if c.srv.closing.Load() {
				return 0, net.ErrClosed
			}
			if c.answered == 0 {
				// A new connection: no idle wait before its first
				// request, so a client that connects and sends nothing
				// holds a worker for ReadHeaderTimeout, not IdleTimeout.
				if !waited {
					waited = true
					_ = c.nc.SetReadDeadline(now.Add(c.srv.cfg.ReadHeaderTimeout))
				}
			} else {
				_ = c.nc.SetReadDeadline(now.Add(c.srv.cfg.IdleTimeout))
			}
		} else if !waited {
			waited = true
			_ = c.nc.SetReadDeadline(now.Add(c.srv.cfg.ReadHeaderTimeout))
		}
		c.makeRoom()
		n, err := c.nc.Read(c.in[c.w:])
		c.w += n
		if n > 0 && c.state.Load() == connIdle {
			// A request began. Its header deadline is set only if this
			// read did not bring the whole head, as it nearly always does:
			// a deadline is a timer update per call.
			c.state.Store(connActive)
		}
		if err != nil && n == 0 {
			return 0, err
		}
	}
}

// makeRoom makes space after c.w: moving the unread bytes to the front,
// or growing this connection's buffer up to what one head may need.
func (c *httpConn) makeRoom() {
	if c.w < len(c.in) {
		return
	}
	if c.r > 0 {
		c.w = copy(c.in, c.in[c.r:c.w])
		c.r = 0
		return
	}
	bigger := make([]byte, min(2*len(c.in), maxHeadBytes+connInitialBuffer))
	c.w = copy(bigger, c.in[c.r:c.w])
	c.r = 0
	c.in = bigger
}

// tooLarge says which limit a head passed: the request line (414) or the
// headers (431).
func (c *httpConn) tooLarge() error {
	if bytes.IndexByte(c.in[c.r:min(c.w, c.r+maxHeadBytes)], '\n') < 0 {
		return http1.ErrTargetTooLong
	}
	return http1.ErrTooLarge
}

// answer routes the parsed request and writes the response with one
// write. It returns whether the connection stays open: the client wants
// it, the server is not stopping (checked once the answer is ready, so a
// request Stop waited for closes its connection) and the write went.
func (c *httpConn) answer() bool {
	h := &c.head
	req := trackerRequest{method: h.Method, path: h.Path, rawQuery: h.RawQuery, remote: c.remote,
		proxy: h.Fields[0].Last, proxies: h.Fields[0].Lines, ctx: c.srv.baseCtx}
	bufp := httpBufPool.Get().(*[]byte)
	ans := c.srv.route(&req, (*bufp)[:0])
	defer func() {
		if cap(ans.body) <= 64<<10 { // don't let one huge response pin memory
			*bufp = ans.body[:0]
			httpBufPool.Put(bufp)
		}
	}()
	keep := !h.Close && !c.srv.closing.Load()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.WriteTimeout))
	if ans.full != nil {
		return c.writeFullScrape(ans.full, keep)
	}
	c.out = http1.AppendStatusLine(c.out[:0], ans.status)
	c.out = append(c.out, "Content-Type: text/plain; charset=utf-8\r\n"...)
	switch ans.status {
	case http.StatusNotFound:
		c.out = append(c.out, "X-Content-Type-Options: nosniff\r\n"...)
	case http.StatusMethodNotAllowed:
		c.out = append(c.out, "Allow: GET, HEAD\r\n"...)
	}
	c.out = c.appendTail(c.out, len(ans.body), keep)
	if h.Method != http.MethodHead {
		c.out = append(c.out, ans.body...)
	}
	_, err := c.nc.Write(c.out)
	return err == nil && keep
}

// appendTail ends a response head: the body's length and whether the
// connection stays.
func (c *httpConn) appendTail(b []byte, contentLength int, keep bool) []byte {
	if contentLength >= 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(contentLength), 10)
		b = append(b, "\r\n"...)
	}
	switch {
	case !keep:
		b = append(b, "Connection: close\r\n"...)
	case c.head.Minor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	return append(b, "\r\n"...)
}

// writeFullScrape sends the shared gzipped full scrape: as it is to a
// client that accepts gzip, else decompressed on the way (never held
// whole), its end marked by closing the connection.
func (c *httpConn) writeFullScrape(body []byte, keep bool) bool {
	c.out = http1.AppendStatusLine(c.out[:0], http.StatusOK)
	c.out = append(c.out, "Content-Type: text/plain; charset=utf-8\r\nVary: Accept-Encoding\r\n"...)
	head := c.head.Method == http.MethodHead
	if c.head.AcceptGzip {
		c.out = append(c.out, "Content-Encoding: gzip\r\n"...)
		c.out = c.appendTail(c.out, len(body), keep)
		bufs := net.Buffers{c.out}
		if !head {
			bufs = append(bufs, body)
		}
		_, err := bufs.WriteTo(c.nc)
		return err == nil && keep
	}
	c.out = c.appendTail(c.out, -1, false)
	if _, err := c.nc.Write(c.out); err != nil || head {
		return false
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err == nil {
		_, err = io.Copy(c.nc, zr)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		c.srv.cfg.Logger.Warn("full scrape not sent whole", "remote", c.remote, "err", err)
	}
	return false
}

// refuse answers a request the listener will not route, the way
// net/http's server does: status, reason, close. It then stops writing
// and reads what the client still sends for a moment, so that closing
// with unread input does not reset the connection before the client has
// read the answer.
func (c *httpConn) refuse(e *headError) {
	c.srv.cfg.Logger.LogAttrs(c.srv.baseCtx, slog.LevelDebug, "bittorrent http: request refused",
		slog.Int("status", e.Status), slog.String("reason", e.Reason), slog.Any("remote", c.remote))
	text := e.Text()
	c.out = http1.AppendStatusLine(c.out[:0], e.Status)
	c.out = append(c.out, "Content-Type: text/plain; charset=utf-8\r\n"...)
	c.out = c.appendTail(c.out, len(text), false)
	c.out = append(c.out, text...)
	now := time.Now()
	_ = c.nc.SetWriteDeadline(now.Add(c.srv.cfg.WriteTimeout))
	if _, err := c.nc.Write(c.out); err != nil {
		return
	}
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = tc.SetReadDeadline(now.Add(refuseLinger))
		_, _ = io.CopyN(io.Discard, tc, maxHeadBytes)
	}
}

// refuseLinger bounds how long a refused connection's input is read
// before closing.
const refuseLinger = 500 * time.Millisecond

// close closes the connection and returns its struct to the pool: once
// forgotten, nothing else holds it.
func (c *httpConn) close() {
	_ = c.nc.Close()
	c.srv.forget(c)
	out := c.out[:0]
	if cap(out) > maxPooledOut {
		out = nil
	}
	*c = httpConn{base: c.base, out: out}
	connPool.Put(c)
}
