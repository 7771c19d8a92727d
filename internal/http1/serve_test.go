package http1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pieceConn is a net.Conn reading its input in pieces of at most piece
// bytes, then EOF, and keeping what is written.
type pieceConn struct {
	in     []byte
	piece  int
	writes [][]byte
	closed bool
}

func (c *pieceConn) Read(b []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.in[:min(len(c.in), c.piece)])
	c.in = c.in[n:]
	return n, nil
}
func (c *pieceConn) Write(b []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(b))
	return len(b), nil
}
func (c *pieceConn) Close() error                     { c.closed = true; return nil }
func (c *pieceConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *pieceConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *pieceConn) SetDeadline(time.Time) error      { return nil }
func (c *pieceConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pieceConn) SetWriteDeadline(time.Time) error { return nil }

// echoHandler answers each head with the bytes of the request it read
// (head and body) as its body, and records them; a head past MaxHead is
// refused. Its state per connection counts the requests.
type echoHandler struct {
	mu       sync.Mutex
	remotes  []string // each request's RemoteAddr
	requests [][]byte
	tooLarge []*HeadError
	maxBody  int
	pad      int // bytes of 'x' after the echo
}

func (h *echoHandler) ServeRequest(c *Conn[int], headLen int) bool {
	c.S++
	h.mu.Lock()
	h.remotes = append(h.remotes, c.RemoteAddr().String())
	h.mu.Unlock()
	if ParseRequestHead(c.Input(headLen), nil, &c.Head) != nil {
		return false
	}
	n := max(int(c.Head.ContentLength), 0)
	if n > h.maxBody || c.Head.Chunked {
		return false
	}
	if _, ok := c.ReadBody(headLen, n); !ok {
		return false
	}
	req := c.Input(headLen + n)
	h.mu.Lock() // connections are served by several workers at once
	h.requests = append(h.requests, bytes.Clone(req))
	h.mu.Unlock()
	c.Out = AppendStatusLine(c.Out[:0], 200)
	c.Out = append(c.Out, "Content-Length: "+strconv.Itoa(len(req)+h.pad)+"\r\n\r\n"...)
	c.Out = append(c.Out, req...)
	c.Out = append(c.Out, bytes.Repeat([]byte{'x'}, h.pad)...)
	return c.Answer(c.Out, headLen, !c.Head.Close)
}

func (h *echoHandler) HeadTooLarge(c *Conn[int], err *HeadError) {
	h.mu.Lock()
	h.tooLarge = append(h.tooLarge, err)
	h.mu.Unlock()
	c.Refuse(err)
}

// testConfig accepts raw, as the plugin's listener does: the tests run
// the raw path and, wherever a connection waits, the promoted one
// (TestNetAcceptNeverPromotes runs net's accept, the warrior listener's).
func testConfig() ServerConfig {
	return ServerConfig{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		IdleTimeout: time.Second, MaxHead: 1 << 10, Name: "test", AcceptRaw: true}
}

// FuzzServeConn feeds bytes, in pieces the fuzzer chooses, through the
// connection loop: it ends without panics or hangs; what the handler was
// given, request after request, is the input in order with only blank
// lines between requests skipped (nothing lost, nothing read twice); and
// each write is one answer.
func FuzzServeConn(f *testing.F) {
	for _, s := range SampleHeads {
		f.Add([]byte(s), uint8(7))
	}
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: h\r\n\r\n"), uint8(3))
	f.Add([]byte("GET /"+strings.Repeat("x", 2000)+" HTTP/1.1\r\nHost: h\r\n\r\n"), uint8(200))
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		h := &echoHandler{maxBody: 4 << 10}
		s := NewServer[int](testConfig(), h)
		nc := &pieceConn{in: data, piece: max(int(piece), 1)}
		done := make(chan struct{})
		go func() { s.ServeConn(s.NewConn(nc)); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second): // far beyond any input's work
			t.Fatalf("the loop hangs on %q in pieces of %d", data, piece)
		}
		require.True(t, nc.closed, "the loop closes the connection")
		rest := data
		for _, req := range h.requests {
			rest = bytes.TrimLeft(rest, "\r\n")
			require.True(t, bytes.HasPrefix(rest, req), "request %q is not next in %q", req, rest)
			rest = rest[len(req):]
		}
		require.LessOrEqual(t, len(nc.writes), len(h.requests)+len(h.tooLarge))
		require.LessOrEqual(t, len(h.tooLarge), 1, "a head too large ends the connection")
	})
}

// TestConnReadsHeadsInItsPooledBuffer: a head that fits the pooled buffer
// is read there, not into a grown one (a connection per request would
// otherwise allocate a buffer per request); a longer one grows this
// connection's buffer up to MaxHead; one past it goes to HeadTooLarge,
// with 414 when the request line alone is too long, else 431.
func TestConnReadsHeadsInItsPooledBuffer(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHead = 3 * initialBuffer
	for _, tc := range []struct {
		head     string
		wantLen  int
		tooLarge *HeadError
	}{
		{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", initialBuffer, nil},
		{"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: " + strings.Repeat("p", initialBuffer) + "\r\n\r\n", 2 * initialBuffer, nil},
		{"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: " + strings.Repeat("p", cfg.MaxHead) + "\r\n\r\n", 0, ErrTooLarge},
		{"GET /" + strings.Repeat("p", cfg.MaxHead) + " HTTP/1.1\r\nHost: h\r\n\r\n", 0, ErrTargetTooLong},
	} {
		s := NewServer[int](cfg, &echoHandler{})
		c := s.NewConn(&pieceConn{in: []byte(tc.head), piece: 1000})
		require.Len(t, c.in, initialBuffer)
		n, err := c.readHead()
		if tc.tooLarge != nil {
			require.Equal(t, tc.tooLarge, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, len(tc.head), n)
		require.Len(t, c.in, tc.wantLen)
	}
}

// TestConnReturnsToThePoolEmpty: a closed connection's struct keeps only
// its buffers for the next connection: nothing of its server, socket,
// handler state, last head or unread input, its grown input buffer
// dropped for the initial one, and a response buffer past maxPooledOut
// not kept.
func TestConnReturnsToThePoolEmpty(t *testing.T) {
	s := NewServer[int](testConfig(), &echoHandler{})
	for _, outBytes := range []int{600, maxPooledOut + 1} {
		c := s.newConn(&pieceConn{})
		require.True(t, s.track(c))
		base := &c.in[0]
		c.S = 7
		c.in = make([]byte, 2*initialBuffer) // a head made it grow
		c.r, c.w, c.body, c.served = 3, 9, 2, 4
		c.Head = RequestHead{Method: "GET", Close: true, Fields: [MaxFields]Field{{Lines: 1}}}
		c.state.Store(connIdle)
		c.Out = append(c.Out[:0], make([]byte, outBytes)...)
		c.close()

		require.Zero(t, s.OpenConnections())
		require.Nil(t, c.srv)
		require.Nil(t, c.nc)
		require.Zero(t, c.S)
		require.Equal(t, RequestHead{}, c.Head)
		require.Equal(t, connBusy, c.state.Load())
		require.Zero(t, c.r+c.w+c.body+c.served)
		require.Nil(t, c.in, "the grown input buffer is dropped")
		require.Len(t, c.base, initialBuffer)
		require.Same(t, base, &c.base[0], "the pooled input buffer is kept")
		require.Empty(t, c.Out)
		if outBytes > maxPooledOut {
			require.Nil(t, c.Out, "a huge response buffer is not kept")
		} else {
			require.GreaterOrEqual(t, cap(c.Out), outBytes, "the response buffer is kept")
		}
	}
}

// TestListenAcceptsOnceARequestCame: on Linux a connection is accepted
// when its first bytes come, not at its handshake: of a silent client
// and a later one that sends, the sender is accepted first. The silent
// one is still accepted when the kernel stops deferring it, so the
// server's header timeout then applies to it.
func TestListenAcceptsOnceARequestCame(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_DEFER_ACCEPT is Linux's")
	}
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	silent, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer silent.Close()
	sender, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer sender.Close()
	_, err = io.WriteString(sender, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)

	first, err := ln.Accept()
	require.NoError(t, err)
	defer first.Close()
	require.Equal(t, sender.LocalAddr().String(), first.RemoteAddr().String(), "the sender is accepted first")
	require.NoError(t, first.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 16)
	_, err = io.ReadFull(first, buf)
	require.NoError(t, err)
	require.Equal(t, "GET / HTTP/1.1\r\n", string(buf))

	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(10*time.Second)))
	second, err := ln.Accept()
	require.NoError(t, err, "the silent client is accepted in the end")
	defer second.Close()
	require.Equal(t, silent.LocalAddr().String(), second.RemoteAddr().String())
}

// TestAnswerGoesWithTheClose: over TCP, a closing connection's last
// answer (sent with MSG_MORE on Linux, flushed by the close) arrives
// whole, then the end of the stream: for an answer of a few bytes, one
// far larger than the socket's buffers (the send waits for the client to
// read, under the write deadline), and after kept-alive answers. A
// request pipelined after the closing one is not answered, and the
// closing answer still arrives whole.
func TestAnswerGoesWithTheClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		pad  int
		send string
		want int // answers
	}{
		{"small", 0, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 1},
		{"large", 16 << 20, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 1},
		{"after keep-alive", 100, "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.0\r\n\r\n", 2},
		{"pipelined after close", 100, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &echoHandler{pad: tc.pad}
			cfg := testConfig()
			cfg.WriteTimeout = 10 * time.Second
			_, addr := startTestServer(t, cfg, h)
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer nc.Close()
			require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = io.WriteString(nc, tc.send)
			require.NoError(t, err)
			got, err := io.ReadAll(nc)
			require.NoError(t, err, "the stream ends cleanly, not with a reset")
			br := bufio.NewReader(bytes.NewReader(got))
			for i := range tc.want {
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err, "answer %d", i+1)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, resp.ContentLength, int64(len(body)))
				require.Equal(t, tc.pad, bytes.Count(body, []byte{'x'}))
			}
			require.Zero(t, br.Buffered(), "nothing after the last answer")
		})
	}
}

// TestFinalAnswerIsBoundedByWriteTimeout: a closing answer larger than
// the socket takes, to a client that does not read, is given up after
// WriteTimeout (the deadline set once the kernel stops taking it), and
// the connection closed.
func TestFinalAnswerIsBoundedByWriteTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.WriteTimeout = 50 * time.Millisecond
	s, addr := startTestServer(t, cfg, &echoHandler{pad: 64 << 20})
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	_, err = io.WriteString(nc, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.OpenConnections() == 1 }, 10*time.Second, time.Millisecond, "accepted")
	require.Eventually(t, func() bool { return s.OpenConnections() == 0 }, 10*time.Second, time.Millisecond,
		"the write was not given up")
	// What arrived is a part of the answer: the client never read, so
	// the kernel's buffers hold less than it.
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	n, _ := io.Copy(io.Discard, nc)
	require.Less(t, n, int64(64<<20))
}

// startTestServer serves h on a loopback port from Listen until the test
// ends, and returns the server and its address.
func startTestServer(t *testing.T, cfg ServerConfig, h *echoHandler) (*Server[int], string) {
	t.Helper()
	s := NewServer[int](cfg, h)
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	s.Start(ln)
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		s.Wait(context.Background())
	})
	return s, ln.Addr().String()
}

// TestRawConnectionsPromoteOnlyToWait: on Linux a connection is accepted
// raw and served without net's per-connection work while it need not
// wait: one request answered and closed is never promoted. One that
// waits (its head comes in two pieces, or it is kept alive for a next
// request) is promoted once and served as before. Every request sees the
// client's address.
func TestRawConnectionsPromoteOnlyToWait(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("connections are accepted raw on Linux only")
	}
	h := &echoHandler{}
	s, addr := startTestServer(t, testConfig(), h)
	exchange := func(nc net.Conn, want int) {
		t.Helper()
		got, err := io.ReadAll(nc)
		require.NoError(t, err)
		br := bufio.NewReader(bytes.NewReader(got))
		for i := range want {
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "answer %d", i+1)
			_, err = io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
		}
		require.Zero(t, br.Buffered())
	}
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = nc.Close() })
		require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
		return nc
	}

	closing := dial()
	_, err := io.WriteString(closing, "GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	exchange(closing, 1)
	require.Zero(t, s.Promotions(), "answered and closed without waiting")

	split := dial()
	_, err = io.WriteString(split, "GET /b HTTP/1.1\r\nHo")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Promotions() == 1 }, 10*time.Second, time.Millisecond,
		"promoted to wait for the rest of its head")
	_, err = io.WriteString(split, "st: h\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	exchange(split, 1)

	kept := dial()
	_, err = io.WriteString(kept, "GET /c HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Promotions() == 2 }, 10*time.Second, time.Millisecond,
		"promoted to wait for its next request")
	_, err = io.WriteString(kept, "GET /d HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	_, err = io.WriteString(kept, "GET /e HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	exchange(kept, 3)
	require.Equal(t, int64(2), s.Promotions(), "once per connection")

	h.mu.Lock()
	defer h.mu.Unlock()
	want := []string{closing.LocalAddr().String(), split.LocalAddr().String(),
		kept.LocalAddr().String(), kept.LocalAddr().String(), kept.LocalAddr().String()}
	require.Equal(t, want, h.remotes)
}

// TestCloseEndsAPromotedIdleConnection: Close closes a kept-alive
// connection waiting for its next request at once, however its promotion
// (to wait) and Close interleave: promoted before, Close closes it;
// promoted after, adopt does.
// TestNetAcceptNeverPromotes: without AcceptRaw (the warrior listener,
// whose Tornado clients write a POST's head and body apart) connections
// are net's from the accept: a head and body written apart, a kept-alive
// connection and a closing one are answered, and nothing is promoted.
func TestNetAcceptNeverPromotes(t *testing.T) {
	h := &echoHandler{maxBody: 100}
	cfg := testConfig()
	cfg.AcceptRaw = false
	s, addr := startTestServer(t, cfg, h)
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(nc, "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(nc)
	_, err = io.WriteString(nc, "hello")
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(body, []byte("\r\n\r\nhello")), "the body read after its head: %q", body)
	_, err = io.WriteString(nc, "GET /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "closed after the request that asked")
	require.Zero(t, s.Promotions(), "net's connections are never promoted")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, []string{nc.LocalAddr().String(), nc.LocalAddr().String()}, h.remotes)
}

func TestCloseEndsAPromotedIdleConnection(t *testing.T) {
	cfg := testConfig()
	cfg.IdleTimeout = time.Hour
	s := NewServer[int](cfg, &echoHandler{})
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	s.Start(ln)
	nc, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(nc, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return s.OpenConnections() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Wait(ctx)
	require.NoError(t, ctx.Err(), "the idle connection was closed by Close, not by Wait giving up")
	require.Zero(t, s.OpenConnections())
}
