package bittorrent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/http1"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// wireConn is a test client speaking raw bytes to the listener and
// reading its answers with net/http's response parser, so every answer is
// also checked to be one a Go client reads.
type wireConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialWire(t *testing.T, addr string) *wireConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	// A bound for a listener that never answers: the test fails, it does
	// not hang.
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	return &wireConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *wireConn) send(raw string) {
	c.t.Helper()
	_, err := io.WriteString(c.nc, raw)
	require.NoError(c.t, err)
}

// read reads one response to a request with method.
func (c *wireConn) read(method string) (*http.Response, []byte) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	require.NoError(c.t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	require.NoError(c.t, resp.Body.Close())
	return resp, body
}

// closed asserts the listener closed the connection: nothing more comes,
// and not because the test's own deadline passed.
func (c *wireConn) closed() {
	c.t.Helper()
	n, err := c.br.Read(make([]byte, 1))
	require.Zero(c.t, n)
	require.Error(c.t, err)
	var ne net.Error
	require.False(c.t, errors.As(err, &ne) && ne.Timeout(), "the listener kept the connection open")
}

func announceLine(version string, extra ...string) string {
	return "GET /announce?" + announceQuery(nil) + " " + version + "\r\n" + strings.Join(extra, "") + "\r\n"
}

func TestHTTPKeepAliveAndClose(t *testing.T) {
	fake := newFakeSwarms()
	srv, _ := startHTTP(t, fake, nil)

	// HTTP/1.1 keeps the connection by default.
	c := dialWire(t, srv.Addr())
	for i := range 3 {
		c.send(announceLine("HTTP/1.1", "Host: t\r\n"))
		resp, body := c.read(http.MethodGet)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.False(t, resp.Close, "request %d", i)
		require.Equal(t, strconv.Itoa(len(body)), resp.Header.Get("Content-Length"))
		require.Contains(t, decode(t, body), "peers")
	}
	// Connection: close is honoured, in any case and among other tokens.
	c.send(announceLine("HTTP/1.1", "Host: t\r\nConnection: TE, Close\r\n"))
	resp, _ := c.read(http.MethodGet)
	require.True(t, resp.Close)
	c.closed()

	// HTTP/1.0 closes unless keep-alive is asked, and needs no Host.
	c = dialWire(t, srv.Addr())
	c.send(announceLine("HTTP/1.0"))
	resp, _ = c.read(http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, resp.Close)
	c.closed()

	c = dialWire(t, srv.Addr())
	for range 2 {
		c.send(announceLine("HTTP/1.0", "Connection: keep-alive\r\n"))
		resp, _ = c.read(http.MethodGet)
		require.False(t, resp.Close)
		require.Equal(t, "keep-alive", resp.Header.Get("Connection"), "a 1.0 client must be told")
	}
	require.Equal(t, 7, fake.announceCount())
}

func decode(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, bencode.Unmarshal(body, &out), "%q", body)
	return out
}

// TestHTTPPipelinedRequestsAreAnsweredInOrder: requests sent together
// (after blank lines old clients add) are answered one by one, in order.
func TestHTTPPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	fake := newFakeSwarms()
	fake.addPeer(testHash, otherPeer, "192.0.2.7:6881", true)
	srv, _ := startHTTP(t, fake, nil)
	c := dialWire(t, srv.Addr())
	host := "Host: t\r\n"
	c.send("\r\n" + announceLine("HTTP/1.1", host) +
		"GET /nothing HTTP/1.1\r\n" + host + "\r\n" +
		"HEAD /scrape HTTP/1.1\r\n" + host + "\r\n" +
		"GET /scrape?info_hash=" + string(wire20(testHash)) + " HTTP/1.1\r\n" + host + "\r\n" +
		"GET /announce.php HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n")
	resp, body := c.read(http.MethodGet)
	require.Contains(t, decode(t, body), "peers")
	resp, body = c.read(http.MethodGet)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "404 page not found\n", string(body))
	resp, body = c.read(http.MethodHead)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, body)
	_, body = c.read(http.MethodGet)
	require.Contains(t, decode(t, body), "files")
	resp, body = c.read(http.MethodGet)
	require.Equal(t, failureUnknownPath, decode(t, body)["failure reason"])
	require.True(t, resp.Close)
	c.closed()
}

// wire20 percent-encodes a hash for a query.
func wire20(h InfoHash) []byte {
	var b []byte
	for _, x := range h {
		b = append(b, '%', "0123456789ABCDEF"[x>>4], "0123456789ABCDEF"[x&15])
	}
	return b
}

func TestHTTPAbsoluteFormTarget(t *testing.T) {
	fake := newFakeSwarms()
	srv, _ := startHTTP(t, fake, nil)
	c := dialWire(t, srv.Addr())
	c.send("GET http://tracker.example:6969/pk1/announce?" + announceQuery(nil) + " HTTP/1.1\r\nHost: tracker.example:6969\r\n\r\n")
	resp, body := c.read(http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, decode(t, body), "peers")
	require.Equal(t, "pk1", fake.lastAnnounce().Passkey)
}

// TestHTTPRefusals: each head the listener will not route gets its status
// and a reason, changes nothing, and the connection closes.
func TestHTTPRefusals(t *testing.T) {
	fake := newFakeSwarms()
	srv, _ := startHTTP(t, fake, nil)
	q := "/announce?" + announceQuery(nil)
	long := strings.Repeat("a", maxHeadBytes)
	for name, tc := range map[string]struct {
		raw    string
		status int
		reason string
	}{
		"no Host in 1.1":    {"GET " + q + " HTTP/1.1\r\n\r\n", 400, http1.ErrNoHost.Reason},
		"two Hosts":         {"GET " + q + " HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, http1.ErrHosts.Reason},
		"bad Host":          {"GET " + q + " HTTP/1.1\r\nHost: a b\r\n\r\n", 400, http1.ErrBadHost.Reason},
		"HTTP/2.0":          {"GET " + q + " HTTP/2.0\r\n\r\n", 505, http1.ErrVersionUnknown.Reason},
		"garbage version":   {"GET " + q + " HTTX/1.1\r\n\r\n", 400, http1.ErrVersion.Reason},
		"no version":        {"GET " + q + "\r\n\r\n", 400, http1.ErrRequestLine.Reason},
		"header sans colon": {"GET " + q + " HTTP/1.1\r\nHost: a\r\nnonsense\r\n\r\n", 400, http1.ErrLine.Reason},
		"space in name":     {"GET " + q + " HTTP/1.1\r\nHost : a\r\n\r\n", 400, http1.ErrLine.Reason},
		"folded header":     {"GET " + q + " HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n", 400, http1.ErrFolding.Reason},
		"control in value":  {"GET " + q + " HTTP/1.1\r\nHost: a\r\nX: b\x01\r\n\r\n", 400, http1.ErrLine.Reason},
		"bad escape":        {"GET /announce%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400, http1.ErrTarget.Reason},
		"body":              {"GET " + q + " HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", 413, errHeadBody.Reason},
		"bad length":        {"GET " + q + " HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400, http1.ErrContentLength.Reason},
		"two lengths":       {"GET " + q + " HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 1\r\n\r\n", 400, http1.ErrContentLength.Reason},
		"chunked":           {"POST /announce HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501, errHeadChunked.Reason},
		"CONNECT":           {"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", 405, http1.ErrConnect.Reason},
		"target too long":   {"GET /" + long + " HTTP/1.1\r\nHost: a\r\n\r\n", 414, http1.ErrTargetTooLong.Reason},
		"headers too large": {"GET " + q + " HTTP/1.1\r\nHost: a\r\nX: " + long + "\r\n\r\n", 431, http1.ErrTooLarge.Reason},
	} {
		t.Run(name, func(t *testing.T) {
			c := dialWire(t, srv.Addr())
			c.send(tc.raw)
			resp, body := c.read(http.MethodGet)
			require.Equal(t, tc.status, resp.StatusCode)
			require.True(t, resp.Close)
			require.Equal(t, strconv.Itoa(tc.status)+" "+http.StatusText(tc.status)+": "+tc.reason, string(body))
			c.closed()
		})
	}
	require.Zero(t, fake.announceCount(), "nothing reached the swarms")

	// An empty body is no body.
	c := dialWire(t, srv.Addr())
	c.send("GET " + q + " HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
	resp, _ := c.read(http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 1, fake.announceCount())
}

// TestHTTPHeaderLimitsAreTheHeads: a head just under the limit is read
// whole, one just over is refused, whichever reads it arrives in.
func TestHTTPHeaderLimitsAreTheHeads(t *testing.T) {
	fake := newFakeSwarms()
	srv, _ := startHTTP(t, fake, nil)
	start := announceLine("HTTP/1.1", "Host: a\r\n")
	start = start[:len(start)-2]
	pad := maxHeadBytes - len(start) - len("X: \r\n\r\n")
	c := dialWire(t, srv.Addr())
	c.send(start + "X: " + strings.Repeat("p", pad) + "\r\n\r\n")
	resp, _ := c.read(http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode, "exactly maxHeadBytes")

	c = dialWire(t, srv.Addr())
	c.send(start)
	c.send("X: " + strings.Repeat("p", pad+1))
	c.send("\r\n\r\n")
	resp, _ = c.read(http.MethodGet)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
}

// TestHTTPTimeouts: a head that stops arriving is dropped after
// ReadHeaderTimeout, a kept connection after IdleTimeout, each by closing.
func TestHTTPTimeouts(t *testing.T) {
	fake := newFakeSwarms()
	// Each timeout alone is short, so the other cannot be what closes.
	srv, _ := startHTTP(t, fake, func(c *HTTPConfig) {
		c.ReadHeaderTimeout = 50 * time.Millisecond
		c.IdleTimeout = time.Hour
	})
	c := dialWire(t, srv.Addr())
	c.send("GET /announce HTTP/1.1\r\nHost: a\r\n")
	c.closed()
	// A new connection that sends nothing has ReadHeaderTimeout for its
	// first request, as with net/http, not the idle wait.
	c = dialWire(t, srv.Addr())
	c.closed()
	c = dialWire(t, srv.Addr())
	c.send("\r\n") // blank lines before a request do not restart it
	c.closed()

	srv, _ = startHTTP(t, fake, func(c *HTTPConfig) {
		c.ReadHeaderTimeout = time.Hour
		c.IdleTimeout = 50 * time.Millisecond
	})
	c = dialWire(t, srv.Addr())
	c.send(announceLine("HTTP/1.1", "Host: a\r\n"))
	resp, _ := c.read(http.MethodGet)
	require.False(t, resp.Close)
	c.closed()
	require.Equal(t, 1, fake.announceCount())
}

// TestHTTPWriteTimeout: a client that sends requests and never reads is
// cut off after WriteTimeout rather than holding its goroutine and
// buffers.
func TestHTTPWriteTimeout(t *testing.T) {
	fake := newFakeSwarms()
	for i := range 100 {
		fake.addPeer(testHash, PeerID([]byte(strings.Repeat("p", 16)+strconv.Itoa(1000+i))), "192.0.2.7:"+strconv.Itoa(1000+i), true)
	}
	srv, _ := startHTTP(t, fake, func(c *HTTPConfig) {
		c.WriteTimeout = 50 * time.Millisecond
		c.ReadHeaderTimeout = time.Hour // only the write timeout may end it
		c.IdleTimeout = time.Hour
	})
	nc, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer nc.Close()
	// 3,000 answers of about 6 KB (dictionary peers) are more than the
	// sockets buffer, so the listener's writes block.
	req := bytes.Repeat([]byte("GET /announce?"+announceQuery(func(q *wire.AnnounceQuery) { q.Compact, q.NumWant = false, 100 })+" HTTP/1.1\r\nHost: a\r\n\r\n"), 3000)
	go func() { _, _ = nc.Write(req) }()
	require.Eventually(t, func() bool { return srv.openConnections() == 0 && fake.announceCount() > 0 },
		10*time.Second, 10*time.Millisecond, "the connection was dropped")
	require.Less(t, fake.announceCount(), 3000, "not every request was answered")
}

// blockingSwarms holds every announce until release is closed.
type blockingSwarms struct {
	*fakeSwarms
	entered chan struct{}
	release chan struct{}
}

func (b *blockingSwarms) Announce(ctx context.Context, req *AnnounceRequest) (*AnnounceResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.fakeSwarms.Announce(ctx, req)
}

// TestHTTPStopWaitsForRequestsInFlight: Stop closes the listener and the
// idle connections at once, lets a request being answered finish (its
// connection then closes), and returns after it.
func TestHTTPStopWaitsForRequestsInFlight(t *testing.T) {
	swarms := &blockingSwarms{fakeSwarms: newFakeSwarms(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: swarms, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	idle := dialWire(t, srv.Addr())
	idle.send("GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n")
	idle.read(http.MethodGet)

	busy := dialWire(t, srv.Addr())
	busy.send(announceLine("HTTP/1.1", "Host: a\r\n"))
	<-swarms.entered
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop() }()
	idle.closed()
	_, err = net.Dial("tcp", srv.Addr())
	require.Error(t, err, "the listener is closed")
	select {
	case <-stopped:
		t.Fatal("Stop returned with a request in flight")
	default:
	}
	close(swarms.release)
	resp, body := busy.read(http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, decode(t, body), "peers")
	require.True(t, resp.Close, "the connection closes after the answer")
	busy.closed()
	require.NoError(t, <-stopped)
	require.NoError(t, srv.Stop(), "twice")
}

func TestHTTPFullScrapeServed(t *testing.T) {
	fake := newFakeSwarms()
	srv, _ := startHTTP(t, fake, func(c *HTTPConfig) {
		c.FullScrape = FullScrapeConfig{Source: &countingSource{n: 300}, PerAddress: time.Nanosecond}
	})
	check := func(plain []byte) {
		t.Helper()
		files, ok := decode(t, plain)["files"].(map[string]any)
		require.True(t, ok)
		require.Len(t, files, 300)
	}
	// gzip: the shared body as it is, with its length, and the connection
	// kept.
	c := dialWire(t, srv.Addr())
	c.send("GET /scrape HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
	resp, body := c.read(http.MethodGet)
	require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
	require.Equal(t, "Accept-Encoding", resp.Header.Get("Vary"))
	require.False(t, resp.Close)
	zr, err := gzip.NewReader(bytes.NewReader(body))
	require.NoError(t, err)
	plain, err := io.ReadAll(zr)
	require.NoError(t, err)
	check(plain)
	c.send("HEAD /scrape HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
	resp, body = c.read(http.MethodHead)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, body)

	// Without gzip: decompressed on the way, ended by closing.
	c = dialWire(t, srv.Addr())
	c.send("GET /scrape HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body = c.read(http.MethodGet)
	require.Empty(t, resp.Header.Get("Content-Encoding"))
	require.True(t, resp.Close)
	check(body)
	require.Equal(t, uint64(2), srv.Stats().FullScrapes)
}

// TestHTTPWorkersServeConnectionAfterConnection: a connection per
// announce is served by the worker that served the last one, not a new
// goroutine each; the workers kept waiting are bounded by http1.MaxIdleWorkers
// after a burst; Stop ends them.
func TestHTTPWorkersServeConnectionAfterConnection(t *testing.T) {
	fake := newFakeSwarms()
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	idle := func() int { return srv.conns.IdleWorkers() }
	for i := range 5 {
		c := dialWire(t, srv.Addr())
		c.send(announceLine("HTTP/1.1", "Host: a\r\n", "Connection: close\r\n"))
		resp, _ := c.read(http.MethodGet)
		require.True(t, resp.Close)
		c.closed()
		require.Eventually(t, func() bool { return idle() == 1 }, 5*time.Second, time.Millisecond,
			"after connection %d one worker waits, the one that served them all", i+1)
	}
	require.Equal(t, 5, fake.announceCount())

	// A burst of connections open at once needs a worker each; once they
	// close, at most http1.MaxIdleWorkers of those wait for more.
	burst := make([]*wireConn, http1.MaxIdleWorkers+6)
	for i := range burst {
		burst[i] = dialWire(t, srv.Addr())
		burst[i].send("GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n")
		burst[i].read(http.MethodGet)
	}
	require.Equal(t, len(burst), srv.openConnections())
	for _, c := range burst {
		_ = c.nc.Close()
	}
	require.Eventually(t, func() bool { return srv.openConnections() == 0 && idle() == http1.MaxIdleWorkers },
		5*time.Second, time.Millisecond, "%d workers wait", idle())
	require.Equal(t, http1.MaxIdleWorkers, idle(), "the workers past the bound ended")

	require.NoError(t, srv.Stop())
	require.Zero(t, idle(), "Stop ends the waiting workers")
	require.NoError(t, srv.Stop(), "twice")
}
