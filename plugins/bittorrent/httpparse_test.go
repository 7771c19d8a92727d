package bittorrent

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// headSeeds are requests as clients send them, and near misses.
var headSeeds = []string{
	"GET /announce?info_hash=%aa%00%26%25%ff%01%02%03%04%05%06%07%08%09%0a%0b%0c%0d%0e%0f&peer_id=-qB4520-abcdefghijkl&port=6881&left=100&compact=1 HTTP/1.1\r\nHost: t:6969\r\nUser-Agent: qBittorrent/4.5.2\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
	"GET /pk/announce?info_hash=x HTTP/1.0\r\n\r\n",
	"GET /announce HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	"HEAD /scrape HTTP/1.1\r\nhost: a\r\nX-Forwarded-For: 192.0.2.1, 198.51.100.2\r\nx-forwarded-for: 203.0.113.9\r\n\r\n",
	"GET http://t:6969/announce?x=1 HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET /a%20b/announce HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET /announce%zz HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET / HTTP/1.1\nHost: t\n\n",
	"POST /announce HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: t\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n",
	"GET / HTTP/2.0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]:6969\r\nConnection: upgrade, Keep-Alive\r\n\r\n",
	"\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\nGET /scrape HTTP/1.1\r\nHost: t\r\n\r\n",
}

// FuzzParseRequestHead: whatever arrives, the parser neither panics nor
// hangs, and a head it accepts is one net/http's server accepts (so
// nothing malformed gets through) and reads to the same method, path,
// query, version, Host, keep-alive and headers.
func FuzzParseRequestHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.TrimLeft(data, "\r\n")
		var h requestHead
		_ = parseRequestHead(data, "X-Forwarded-For", &h) // any bytes: no panic
		end, _ := headEnd(data, 0)
		if end < 0 {
			return
		}
		head := data[:end]
		if err := parseRequestHead(head, "X-Forwarded-For", &h); err != nil {
			require.NotEmpty(t, err.reason)
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		require.NoError(t, err, "accepted what net/http refuses: %q", head)
		// The server's own checks after ReadRequest, on the headers as
		// read before ReadRequest moves Host out of them.
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
		_, err = tp.ReadLine()
		require.NoError(t, err)
		mime, err := tp.ReadMIMEHeader()
		require.NoError(t, err)
		if req.ProtoAtLeast(1, 1) {
			require.Len(t, mime["Host"], 1, "%q", head)
		}
		for name, values := range req.Header {
			for _, c := range []byte(name) {
				require.True(t, tokenByte(c), "header name %q", name)
			}
			for _, v := range values {
				require.NotContains(t, v, "\x00")
			}
		}
		require.Equal(t, req.Method, h.method)
		require.Equal(t, req.URL.Path, h.path, "%q", head)
		require.Equal(t, req.URL.RawQuery, h.rawQuery, "%q", head)
		require.Equal(t, 1, req.ProtoMajor)
		require.Equal(t, req.ProtoMinor, h.minor)
		require.Equal(t, req.Close, h.close, "%q", head)
		if strings.HasPrefix(req.RequestURI, "/") {
			require.Equal(t, req.Host, h.host)
		}
		forwarded := req.Header.Values("X-Forwarded-For")
		require.Equal(t, len(forwarded), h.proxies)
		if len(forwarded) > 0 {
			require.Equal(t, forwarded[len(forwarded)-1], h.proxy)
		}
		gzipOK := false
		for _, v := range req.Header.Values("Accept-Encoding") {
			gzipOK = gzipOK || acceptsGzip(v)
		}
		require.Equal(t, gzipOK, h.acceptGzip)
		require.Zero(t, req.ContentLength, "a body got through")
	})
}

// FuzzHTTPConn feeds bytes, in pieces the fuzzer chooses, through a
// connection's whole loop: it ends when the input does, without panics,
// and every answer it writes is a well-formed HTTP/1.1 response, at most
// one per request.
func FuzzHTTPConn(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s), uint8(7))
	}
	f.Add([]byte(strings.Repeat("GET /announce HTTP/1.1\r\nHost: t\r\n\r\n", 5)), uint8(50))
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger(),
		ProxyHeader: "X-Forwarded-For", TrustedProxies: nil})
	require.Error(f, err, "a proxy header needs trusted proxies")
	srv, err = NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger()})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		nc := &scriptedConn{in: data, piece: max(int(piece), 1)}
		c := newHTTPConn(srv, nc)
		require.True(t, srv.track(c))
		done := make(chan struct{})
		go func() { c.serve(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second): // far beyond any input's work
			t.Fatalf("the connection loop hangs on %q in pieces of %d", data, piece)
		}
		require.LessOrEqual(t, len(nc.writes), bytes.Count(data, []byte("\n")), "more answers than requests")
		for _, w := range nc.writes {
			// One write is one whole response: its head, then its body or
			// (to HEAD) none.
			br := bufio.NewReader(bytes.NewReader(w))
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
			require.NoError(t, err, "%q", w)
			require.Equal(t, 1, resp.ProtoMajor)
			rest := br.Buffered()
			require.True(t, rest == 0 || int64(rest) == resp.ContentLength, "%q", w)
		}
	})
}

// scriptedConn is a net.Conn that reads in from pieces of at most piece
// bytes, then EOF, and keeps each write.
type scriptedConn struct {
	in     []byte
	piece  int
	writes [][]byte
}

func (c *scriptedConn) Read(b []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.in[:min(len(c.in), c.piece)])
	c.in = c.in[n:]
	return n, nil
}

func (c *scriptedConn) Write(b []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(b))
	return len(b), nil
}
func (c *scriptedConn) Close() error                     { return nil }
func (c *scriptedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(time.Time) error { return nil }

var _ net.Conn = (*scriptedConn)(nil)

// TestParseRequestHeadAllocatesNothing: a typical announce's head (origin
// form, no percent-encoding in the path) is read without allocating.
func TestParseRequestHeadAllocatesNothing(t *testing.T) {
	head := []byte(headSeeds[0])
	var h requestHead
	allocs := testing.AllocsPerRun(100, func() {
		if err := parseRequestHead(head, "X-Forwarded-For", &h); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, "/announce", h.path)
	require.True(t, h.close)
	require.True(t, h.acceptGzip)
}
