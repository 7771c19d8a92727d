package bittorrent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// BenchmarkHTTPAnnounceKeepAlive is one announce over a kept-alive
// loopback connection: the whole listener, socket calls included.
// Allocations are the process's, the server's goroutines included.
func BenchmarkHTTPAnnounceKeepAlive(b *testing.B) {
	benchHTTPAnnounce(b, false)
}

// BenchmarkHTTPAnnounceNewConnection is one announce on a new connection
// each, as opentracker's clients and many others send them.
func BenchmarkHTTPAnnounceNewConnection(b *testing.B) {
	benchHTTPAnnounce(b, true)
}

func benchHTTPAnnounce(b *testing.B, reconnect bool) {
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Stop() }()
	conn := ""
	if reconnect {
		conn = "Connection: close\r\n"
	}
	req := []byte("GET " + benchTarget + " HTTP/1.1\r\nHost: " + srv.Addr() + "\r\n" + conn + "\r\n")
	var c *rawHTTPClient
	b.ReportAllocs()
	for b.Loop() {
		if c == nil {
			if c, err = dialRaw(srv.Addr()); err != nil {
				b.Fatal(err)
			}
		}
		status, body, err := c.roundTrip(req)
		if err != nil || status != 200 || len(body) < 100 {
			b.Fatalf("status %d, %d bytes, %v", status, len(body), err)
		}
		if reconnect {
			c.close()
			c = nil
		}
	}
	if c != nil {
		c.close()
	}
}

// benchTarget is a private-mode announce as the benchmarks send it.
var benchTarget = "/0123456789abcdef0123456789abcdef/announce?" + announceQuery(func(q *wire.AnnounceQuery) {
	q.Key = "DEADBEEF"
	q.Event = wire.EventStarted
})

// rawHTTPClient sends requests as bytes and reads responses with a
// fixed buffer, so that it allocates nothing per request and the
// benchmarks count the server's allocations.
type rawHTTPClient struct {
	nc   net.Conn
	br   *bufio.Reader
	body []byte
}

func dialRaw(addr string) (*rawHTTPClient, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawHTTPClient{nc: nc, br: bufio.NewReaderSize(nc, 8<<10), body: make([]byte, 0, 8<<10)}, nil
}

// roundTrip writes req and reads one response: its status and body (by
// Content-Length), valid until the next call.
func (c *rawHTTPClient) roundTrip(req []byte) (int, []byte, error) {
	if _, err := c.nc.Write(req); err != nil {
		return 0, nil, err
	}
	return c.readResponse()
}

func (c *rawHTTPClient) readResponse() (int, []byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, errors.New("malformed status line")
	}
	status := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	length := -1
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(": ")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, err
			}
		}
	}
	if length < 0 {
		return 0, nil, errors.New("no Content-Length")
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.br, c.body); err != nil {
		return 0, nil, err
	}
	return status, c.body, nil
}

func (c *rawHTTPClient) close() { _ = c.nc.Close() }
