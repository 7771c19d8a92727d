package http1

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the connection-serving loop both hot-path listeners share
// (hoard's warrior listener, the BitTorrent plugin's announce listener):
// it accepts, hands each connection to a pooled worker goroutine, reads
// request heads into a pooled buffer under net/http's timeouts, and calls
// the Handler once per head. The handler parses, answers with one Write,
// or takes the connection away (Detach). Stop closes idle connections at
// once and lets busy ones finish their answer.
//
// What a new connection costs is paid here once for both: no TCP
// keep-alive probes (Listen), no accept before the request's bytes are
// there (Listen's TCP_DEFER_ACCEPT), no goroutine start (workers serve
// connection after connection), no buffer allocation (the Conn and its
// buffers are pooled), and deadlines moved only when they would move by
// more than a slack, so a connection's timers are set about once each.
//
// S is the handler's state per connection (Conn.S): zeroed when the
// connection ends, so nothing of one client is seen by the next.
type Server[S any] struct {
	cfg     ServerConfig
	handler Handler[S]
	pool    sync.Pool

	// baseCtx is every request's context: cancelled when Wait gives up
	// waiting for the requests in flight.
	baseCtx context.Context
	cancel  context.CancelFunc
	closing atomic.Bool
	wg      sync.WaitGroup // the accept loop, the connections and the workers
	// handoff gives an accepted connection to a worker waiting for one
	// (unbuffered: a send succeeds only if one waits); idleWorkers counts
	// those waiting, and quit, closed by Close, ends them.
	handoff     chan *Conn[S]
	idleWorkers atomic.Int32
	quit        chan struct{}
	// promotions counts the connections accepted raw that had to wait
	// (raw_linux.go).
	promotions atomic.Int64

	mu      sync.Mutex
	ln      net.Listener
	raw     *rawAccept // nil: connections are accepted by ln.Accept
	conns   map[*Conn[S]]struct{}
	stopped bool
	// forced: Wait gave up on the connections and closed them; one
	// promoted after (adopt) is closed at once.
	forced bool
}

// ServerConfig is a Server's limits. Every timeout is required.
type ServerConfig struct {
	// ReadHeaderTimeout bounds the wait for a request's head: from its
	// first byte, or for a connection's first request from the accept
	// (no idle wait before the first, as net/http has it).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the wait for a body (Conn.ReadBody).
	ReadTimeout time.Duration
	// WriteTimeout bounds an answer's write.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for a kept-alive connection's next
	// request.
	IdleTimeout time.Duration
	// MaxHead is the longest head read; a longer one goes to
	// Handler.HeadTooLarge.
	MaxHead int
	// Logger gets the accept loop's warnings.
	Logger *slog.Logger
	// Name prefixes the log lines ("http", "bittorrent http").
	Name string
	// AcceptEnded, if set, is told the error that ended the accept loop
	// for good (not a Close, not a temporary one).
	AcceptEnded func(error)
	// AcceptRaw accepts a TCP listener's connections raw on Linux
	// (raw_linux.go): a connection that is answered and closed without
	// waiting skips net's per-connection work, and one that would wait
	// is promoted to a net.Conn, which costs it about twelve syscalls
	// more than net's accept. So it is for clients that send a request
	// in one write (torrent clients' GET announces), not for clients
	// that write a head and its body apart: seesaw's Tornado client
	// sends a POST's head and body with two sends, and in a loopback
	// probe 180 of its 400 requests found only the head and were
	// promoted (docs/warrior-path.md).
	AcceptRaw bool
}

// Handler answers a Server's requests.
type Handler[S any] interface {
	// ServeRequest is called with a whole head at the start of
	// c.Input(headLen) (blank lines before it skipped). It parses it,
	// reads a body if it takes one (ReadBody), answers (Write), and
	// returns whether the connection stays open for another request. It
	// may Detach the connection instead (then its result is ignored).
	ServeRequest(c *Conn[S], headLen int) (keep bool)
	// HeadTooLarge is called when a head grows past MaxHead, with the
	// refusal net/http would answer (ErrTargetTooLong or ErrTooLarge).
	// The connection closes after it unless detached.
	HeadTooLarge(c *Conn[S], err *HeadError)
}

const (
	// initialBuffer is a connection's input buffer at first: a request's
	// head and body (an announce, a seesaw call: a few hundred bytes)
	// several times over.
	initialBuffer = 4 << 10
	// maxPooledOut bounds the response buffer a pooled Conn keeps.
	maxPooledOut = 64 << 10
	// MaxIdleWorkers bounds the goroutines kept waiting for a connection
	// after serving one: enough for the connections a busy listener
	// accepts while its workers finish their last, few enough that a
	// burst of connections leaves no crowd of idle goroutines behind.
	MaxIdleWorkers = 64
)

// Connection states, for Close: an idle connection waits for a request
// and is closed at once; a busy one finishes its request first.
const (
	connBusy int32 = iota
	connIdle
)

// NewServer is a Server for handler, not yet serving.
func NewServer[S any](cfg ServerConfig, handler Handler[S]) *Server[S] {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server[S]{cfg: cfg, handler: handler, conns: map[*Conn[S]]struct{}{},
		handoff: make(chan *Conn[S]), quit: make(chan struct{})}
	s.pool.New = func() any { return &Conn[S]{base: make([]byte, initialBuffer)} }
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Start serves ln in the background until Close. ln is the server's from
// here: Close closes it. (With AcceptRaw, on Linux the loop accepts from a copy of ln's
// socket, which Close closes too: closing ln alone does not stop it.)
func (s *Server[S]) Start(ln net.Listener) {
	var raw *rawAccept
	if s.cfg.AcceptRaw {
		raw = newRawAccept(ln)
	}
	s.mu.Lock()
	s.ln, s.raw = ln, raw
	s.mu.Unlock()
	s.wg.Add(1)
	go s.acceptLoop(ln, raw)
}

// Context is every request's context: cancelled when Wait gives up on
// the requests in flight.
func (s *Server[S]) Context() context.Context { return s.baseCtx }

// Closing reports whether Close was called.
func (s *Server[S]) Closing() bool { return s.closing.Load() }

// acceptLoop hands each connection to a worker until the listener
// closes. A temporary accept error (out of file descriptors) backs off
// from 5 ms to 1 s, as net/http's Serve does; any other ends the loop and
// goes to AcceptEnded.
//
// With AcceptRaw, on Linux a TCP listener's connections are accepted raw (raw_linux.go):
// the socket and its peer's address, nothing of net's until the
// connection would wait.
func (s *Server[S]) acceptLoop(ln net.Listener, raw *rawAccept) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		var (
			nc     net.Conn
			fd     int
			remote netip.AddrPort
			err    error
		)
		if raw != nil {
			fd, remote, err = raw.next()
		} else {
			nc, err = ln.Accept()
		}
		if err != nil {
			if s.closing.Load() {
				return
			}
			var temp interface{ Temporary() bool }
			if errors.As(err, &temp) && temp.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn(s.cfg.Name+": accept failed, retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			if s.cfg.AcceptEnded != nil {
				s.cfg.AcceptEnded(err)
			}
			return
		}
		backoff = 0
		var c *Conn[S]
		if raw != nil {
			c = s.newRawConn(fd, remote)
		} else {
			c = s.newConn(nc)
		}
		if !s.track(c) {
			c.close()
			continue
		}
		s.dispatch(c)
	}
}

// dispatch gives c to a worker that waits for one, or starts one. A
// worker serves connection after connection, so a client opening a
// connection per request does not pay a goroutine's start and its
// stack's growth (the request path's depth) per request.
func (s *Server[S]) dispatch(c *Conn[S]) {
	select {
	case s.handoff <- c:
	default:
		s.wg.Add(1)
		go s.worker(c)
	}
}

// worker serves c, then waits for the next connection unless
// MaxIdleWorkers already wait or the server closes.
func (s *Server[S]) worker(c *Conn[S]) {
	defer s.wg.Done()
	for {
		c.serve()
		if s.idleWorkers.Add(1) > MaxIdleWorkers {
			s.idleWorkers.Add(-1)
			return
		}
		select {
		case c = <-s.handoff:
			s.idleWorkers.Add(-1)
		case <-s.quit:
			s.idleWorkers.Add(-1)
			return
		}
	}
}

// Promotions counts the connections accepted raw (on Linux) that were
// promoted to a net.Conn to wait: a kept-alive connection once, one that
// closes after its answer never, unless its request or answer did not
// fit one call.
func (s *Server[S]) Promotions() int64 { return s.promotions.Load() }

// IdleWorkers counts the workers waiting for a connection.
func (s *Server[S]) IdleWorkers() int { return int(s.idleWorkers.Load()) }

// track registers a new connection, unless the server is closing.
func (s *Server[S]) track(c *Conn[S]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	c.tracked = true
	return true
}

// forget removes a connection closed or detached.
func (s *Server[S]) forget(c *Conn[S]) {
	if !c.tracked {
		return
	}
	c.tracked = false
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// OpenConnections counts the connections being served.
func (s *Server[S]) OpenConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops accepting, ends the idle workers and closes the idle
// connections; the busy ones close after their answer. Safe to call
// twice, or before Start.
func (s *Server[S]) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.closing.Store(true)
	close(s.quit)
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	if s.raw != nil {
		s.raw.close()
	}
	for c := range s.conns {
		// A raw connection (nc nil) never waits, so it is never closed
		// under its reader: it sees closing before its next read, or is
		// closed when promoted (adopt).
		if c.state.Load() == connIdle && c.nc != nil {
			_ = c.nc.Close()
		}
	}
	return err
}

// adopt sets the net.Conn of a connection promoted from raw, under mu so
// that Close and Wait see it, and closes it at once when Close would
// have closed it (idle, the server stopping) or Wait has closed the rest.
func (s *Server[S]) adopt(c *Conn[S], nc net.Conn) error {
	s.promotions.Add(1)
	s.mu.Lock()
	c.nc = nc
	closed := s.forced || (s.stopped && c.state.Load() == connIdle)
	s.mu.Unlock()
	if closed {
		_ = nc.Close()
		return net.ErrClosed
	}
	return nil
}

// Wait waits, after Close, for the connections being served until ctx
// ends, then cancels their requests' context and closes them.
func (s *Server[S]) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		s.mu.Lock()
		s.forced = true
		for c := range s.conns {
			if c.nc != nil {
				_ = c.nc.Close()
			}
		}
		s.mu.Unlock()
		<-done
	}
	s.cancel()
}

func (s *Server[S]) newConn(nc net.Conn) *Conn[S] {
	c := s.pool.Get().(*Conn[S])
	c.srv, c.nc, c.in = s, nc, c.base
	return c
}

// newRawConn is a connection over a socket accepted raw (raw_linux.go).
func (s *Server[S]) newRawConn(fd int, remote netip.AddrPort) *Conn[S] {
	c := s.pool.Get().(*Conn[S])
	c.srv, c.raw, c.fd, c.remote, c.in = s, true, fd, remote, c.base
	return c
}

// NewConn is a connection of s over nc that no accept loop tracks, for
// tests that drive a handler over a scripted net.Conn. Serve it with
// ServeConn.
func (s *Server[S]) NewConn(nc net.Conn) *Conn[S] { return s.newConn(nc) }

// ServeConn serves c on this goroutine until it ends, then closes it.
func (s *Server[S]) ServeConn(c *Conn[S]) { c.serve() }

// Conn is one client connection of a Server.
type Conn[S any] struct {
	// S is the handler's state for this connection.
	S S
	// Head is the handler's to parse the request into (kept with the
	// Conn so the parse allocates nothing).
	Head RequestHead
	// Out is the handler's to build answers in (kept with the Conn).
	Out []byte

	srv *Server[S]
	// nc is the connection, or nil while it is raw: then fd is its
	// socket, read and written without waiting (raw_linux.go), until
	// promote gives it an nc. nc is set under srv.mu (adopt), for Close.
	nc       net.Conn
	raw      bool
	fd       int
	remote   netip.AddrPort // the peer, of a connection accepted raw
	state    atomic.Int32
	tracked  bool // in srv.conns
	detached bool // taken by the handler: no longer the loop's to close
	served   int  // requests answered

	base []byte // the input buffer kept in the pool
	in   []byte // base, or a larger one for this connection
	r, w int    // unread input is in[r:w]
	body int    // body bytes after the current head (ReadBody)

	// The deadlines set on nc.
	readDeadline, writeDeadline time.Time

	// writeFinal's answer being sent, its error, and its callback (bound
	// once per pooled Conn, so sending allocates no closure).
	pending    []byte
	pendingErr error
	sendMore   func(fd uintptr) bool
}

// NetConn is the connection's socket. Writing to it directly skips the
// write deadline: call ArmWrite first. A raw connection is promoted to a
// net.Conn for it (fifteen syscalls): for the peer's address, call
// RemoteAddr instead.
func (c *Conn[S]) NetConn() net.Conn {
	if c.raw {
		_ = c.promote()
	}
	return c.nc
}

// RemoteAddr is the peer's address (invalid when the connection is not a
// TCP one), without promoting a raw connection.
func (c *Conn[S]) RemoteAddr() netip.AddrPort {
	if c.remote.IsValid() {
		return c.remote
	}
	if tcp, ok := c.nc.RemoteAddr().(*net.TCPAddr); ok {
		return tcp.AddrPort()
	}
	return netip.AddrPort{}
}

// read reads into b: without waiting while the connection is raw, which
// returns errWouldWait once it has promoted it (then read again).
func (c *Conn[S]) read(b []byte) (int, error) {
	if c.raw {
		return c.rawRead(b)
	}
	return c.nc.Read(b)
}

// Served counts the requests this connection answered before the
// current one.
func (c *Conn[S]) Served() int { return c.served }

// Closing reports whether the server is stopping (Server.Close).
func (c *Conn[S]) Closing() bool { return c.srv.closing.Load() }

// Context is the server's request context.
func (c *Conn[S]) Context() context.Context { return c.srv.baseCtx }

// Input is the next n bytes of the request read: the head, then the
// body once ReadBody has them. Its bytes are valid until the handler
// returns (or ReadBody moves them).
func (c *Conn[S]) Input(n int) []byte { return c.in[c.r : c.r+n] }

// serve answers requests until the client closes, a timeout passes, the
// server stops, the handler ends it or takes the connection.
func (c *Conn[S]) serve() {
	defer c.close()
	for {
		headLen, herr := c.readHead()
		if herr != nil {
			var he *HeadError
			if errors.As(herr, &he) {
				c.srv.handler.HeadTooLarge(c, he)
			}
			return
		}
		c.body = 0
		keep := c.srv.handler.ServeRequest(c, headLen)
		if c.detached {
			return
		}
		c.r += headLen + c.body
		c.served++
		if !keep {
			return
		}
	}
}

// readHead waits for a whole request head in the buffer and returns its
// length from c.r, or ErrTargetTooLong/ErrTooLarge when it grows past
// MaxHead. Blank lines before a request are skipped, as net/http does.
func (c *Conn[S]) readHead() (int, error) {
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
			end, resume := HeadEnd(c.in[c.r:c.w], scanned)
			if end > 0 && end <= c.srv.cfg.MaxHead {
				return end, nil
			}
			if end > 0 || c.w-c.r > c.srv.cfg.MaxHead {
				return 0, c.tooLarge()
			}
			scanned = resume
		}
		if c.r == c.w {
			// Between requests: Close may close an idle connection. It
			// checks the state after setting closing, and this checks
			// closing after setting the state, so one sees the other.
			c.state.Store(connIdle)
			if c.srv.closing.Load() {
				return 0, net.ErrClosed
			}
		}
		// A raw connection's read does not wait, so it needs no
		// deadline: one is set once it is promoted to wait.
		if c.raw {
			// no deadline
		} else if now := time.Now(); c.r == c.w {
			if c.served == 0 {
				// No idle wait before a connection's first request: a
				// client that connects and sends nothing holds a worker
				// for ReadHeaderTimeout, as with net/http.
				if !waited {
					waited = true
					c.setReadDeadline(now, c.srv.cfg.ReadHeaderTimeout)
				}
			} else {
				c.setReadDeadline(now, c.srv.cfg.IdleTimeout)
			}
		} else if !waited {
			waited = true
			c.setReadDeadline(now, c.srv.cfg.ReadHeaderTimeout)
		}
		c.makeRoom(c.w - c.r + 1)
		n, err := c.read(c.in[c.w:])
		c.w += n
		if n > 0 && c.state.Load() == connIdle {
			c.state.Store(connBusy)
		}
		if err == errWouldWait {
			continue
		}
		if err != nil && n == 0 {
			return 0, err
		}
	}
}

// tooLarge says which limit a head passed: the request line (414) or the
// headers (431).
func (c *Conn[S]) tooLarge() *HeadError {
	if bytes.IndexByte(c.in[c.r:min(c.w, c.r+c.srv.cfg.MaxHead)], '\n') < 0 {
		return ErrTargetTooLong
	}
	return ErrTooLarge
}

// makeRoom makes space after c.w for at least one read: moving the unread
// bytes to the front, or growing this connection's buffer so that need
// bytes from c.r fit.
func (c *Conn[S]) makeRoom(need int) {
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

// ReadBody waits, under ReadTimeout, until the n bytes after the head are
// in the buffer (Input(headLen+n) then holds both); !ok when the client
// goes or the timeout passes (net/http closes such a connection without
// an answer too). moved: the input moved to make room, so strings parsed
// from the head point to old bytes and must be parsed again.
func (c *Conn[S]) ReadBody(headLen, n int) (moved, ok bool) {
	c.body = n
	need := headLen + n
	if c.w-c.r >= need {
		return false, true
	}
	if len(c.in)-c.r < need {
		c.makeRoom(need)
		moved = true
	}
	if !c.raw {
		c.setReadDeadline(time.Now(), c.srv.cfg.ReadTimeout)
	}
	for c.w-c.r < need {
		m, err := c.read(c.in[c.w:])
		c.w += m
		if err == errWouldWait {
			c.setReadDeadline(time.Now(), c.srv.cfg.ReadTimeout)
			continue
		}
		if err != nil && c.w-c.r < need {
			return moved, false
		}
	}
	return moved, true
}

// Write sends b, the whole answer, with one write under WriteTimeout.
func (c *Conn[S]) Write(b []byte) error {
	if c.raw {
		n, err := c.rawSend(b, 0)
		if err != errWouldWait {
			return err
		}
		b = b[n:]
	}
	c.ArmWrite()
	_, err := c.nc.Write(b)
	return err
}

// Answer sends b, the whole answer to the request whose head is headLen
// bytes (and whose body ReadBody read), under WriteTimeout, and returns
// whether the connection stays open: keep, and the write went. When it
// closes and no byte past this request was read, the answer goes out with
// the close's FIN (writeFinal): one segment instead of two. Bytes already
// read past it (a pipelined request after a closing one) take a plain
// write, since closing with input unread resets the connection and a
// reset would drop an answer still held. writeFinal sets the write
// deadline only if the kernel does not take the answer at once, which on
// a new connection it always does: no timer for it.
func (c *Conn[S]) Answer(b []byte, headLen int, keep bool) bool {
	if !keep && c.w-c.r == headLen+c.body {
		if ok, _ := c.writeFinal(b); ok {
			return false
		}
	}
	return c.Write(b) == nil && keep
}

// ArmWrite sets the write deadline for an answer written to NetConn
// (promoting a raw connection).
func (c *Conn[S]) ArmWrite() {
	if c.raw {
		_ = c.promote()
	}
	timeout := c.srv.cfg.WriteTimeout
	if d := time.Now().Add(timeout); d.Sub(c.writeDeadline) > slack(timeout) {
		c.writeDeadline = d
		_ = c.nc.SetWriteDeadline(d)
	}
}

// deadlineSlack: a deadline is moved only when it would move by more
// than this (or an eighth of its timeout, for short ones). Moving one is
// a timer update, twice per request on a kept-alive connection; so an
// idle connection may be closed up to this much before IdleTimeout, a
// write given up up to this much before WriteTimeout.
const deadlineSlack = time.Second

func slack(timeout time.Duration) time.Duration { return min(deadlineSlack, timeout/8) }

// setReadDeadline makes the read deadline now+timeout, unless the one set
// is within the slack after it. A shorter timeout than the one set (the
// header's after the idle one) always moves it.
func (c *Conn[S]) setReadDeadline(now time.Time, timeout time.Duration) {
	d := now.Add(timeout)
	if diff := d.Sub(c.readDeadline); diff >= 0 && diff <= slack(timeout) {
		return
	}
	c.readDeadline = d
	_ = c.nc.SetReadDeadline(d)
}

// Detach takes the connection from the loop, with the bytes read and not
// yet answered (from the current head on): the caller owns and closes it
// from here, its deadlines cleared.
func (c *Conn[S]) Detach() (nc net.Conn, pending []byte) {
	if c.raw {
		_ = c.promote()
	}
	// Forgotten first: from here Close and Wait leave it alone.
	c.srv.forget(c)
	c.detached = true
	_ = c.nc.SetDeadline(time.Time{})
	return c.nc, bytes.Clone(c.in[c.r:c.w])
}

// Refuse answers a request the handler will not serve the way net/http's
// server does: status, reason, close. It then stops writing and reads
// what the client still sends for a moment, so that closing with unread
// input does not reset the connection before the client has read the
// answer (a reset may drop the answer; SO_LINGER would too).
func (c *Conn[S]) Refuse(e *HeadError) {
	text := e.Text()
	c.Out = AppendStatusLine(c.Out[:0], e.Status)
	c.Out = append(c.Out, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	c.Out = strconv.AppendInt(c.Out, int64(len(text)), 10)
	c.Out = append(c.Out, "\r\nConnection: close\r\n\r\n"...)
	c.Out = append(c.Out, text...)
	if err := c.Write(c.Out); err != nil {
		return
	}
	if tc, ok := c.NetConn().(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = tc.SetReadDeadline(time.Now().Add(refuseLinger))
		_, _ = io.CopyN(io.Discard, tc, int64(c.srv.cfg.MaxHead))
	}
}

// refuseLinger bounds how long a refused connection's input is read
// before closing.
const refuseLinger = 500 * time.Millisecond

// close closes the connection (unless detached) and returns its struct
// to the pool: once forgotten, nothing else holds it.
func (c *Conn[S]) close() {
	switch {
	case c.detached:
	case c.raw:
		c.closeRaw()
	case c.nc != nil:
		_ = c.nc.Close()
	}
	c.srv.forget(c)
	out := c.Out[:0]
	if cap(out) > maxPooledOut {
		out = nil
	}
	srv := c.srv
	*c = Conn[S]{base: c.base, Out: out, sendMore: c.sendMore}
	srv.pool.Put(c)
}

// failedConn stands for a raw connection whose promotion failed: every
// call fails with the promotion's error.
type failedConn struct{ err error }

func (f failedConn) Read([]byte) (int, error)         { return 0, f.err }
func (f failedConn) Write([]byte) (int, error)        { return 0, f.err }
func (f failedConn) Close() error                     { return nil }
func (f failedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (f failedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f failedConn) SetDeadline(time.Time) error      { return f.err }
func (f failedConn) SetReadDeadline(time.Time) error  { return f.err }
func (f failedConn) SetWriteDeadline(time.Time) error { return f.err }
