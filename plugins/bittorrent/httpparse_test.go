package bittorrent

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/http1"
)

// FuzzHTTPConn feeds bytes, in pieces the fuzzer chooses, through a
// connection's whole loop: it ends when the input does, without panics,
// and every answer it writes is a well-formed HTTP/1.1 response, at most
// one per request.
func FuzzHTTPConn(f *testing.F) {
	for _, s := range http1.SampleHeads {
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
		c := srv.conns.NewConn(nc)
		done := make(chan struct{})
		go func() { srv.conns.ServeConn(c); close(done) }()
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
