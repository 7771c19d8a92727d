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

	"github.com/hoardproject/hoard/internal/http1"
)

// The listener speaks HTTP/1.x itself instead of through net/http's
// Server: an announce is one short GET answered with a few hundred bytes,
// and net/http's per-request machinery (a background reader, header maps,
// a request context, a buffered response writer) cost more plugin CPU than
// the announce. The connection loop (accept, workers, buffers, timeouts,
// Stop) is http1.Server, shared with hoard's warrior listener; what is
// the tracker's own is here: it answers each head, in order, with one
// write, and keeps the connection while the client wants it.

// maxHeadBytes bounds a request's line and headers, as net/http's
// MaxHeaderBytes did (announce URLs are a few hundred bytes).
const maxHeadBytes = 16 << 10

// connState is what the listener keeps per connection (http1.Conn.S).
type connState struct {
	remote netip.AddrPort // the socket's peer, read at the first request
}

type httpConn = http1.Conn[connState]

// httpHandler answers the connections' requests.
type httpHandler struct{ s *HTTPServer }

// ServeRequest parses a head and answers it; a head the parser refuses
// is answered as net/http would and closes the connection.
func (h httpHandler) ServeRequest(c *httpConn, headLen int) bool {
	readRemote(c)
	if herr := parseRequestHead(c.Input(headLen), h.s.proxyHeader, &c.Head); herr != nil {
		h.refuse(c, herr)
		return false
	}
	return h.s.answer(c, headLen)
}

// HeadTooLarge refuses a head past maxHeadBytes (414 or 431).
func (h httpHandler) HeadTooLarge(c *httpConn, err *headError) {
	readRemote(c)
	h.refuse(c, err)
}

// readRemote reads the socket's peer once per connection (RemoteAddr:
// NetConn would promote a connection accepted raw).
func readRemote(c *httpConn) {
	if c.Served() == 0 {
		c.S.remote = c.RemoteAddr()
	}
}

// answer routes the parsed request and writes the response with one
// write. It returns whether the connection stays open: the client wants
// it, the server is not stopping (checked once the answer is ready, so a
// request Stop waited for closes its connection) and the write went.
func (s *HTTPServer) answer(c *httpConn, headLen int) bool {
	h := &c.Head
	req := trackerRequest{method: h.Method, path: h.Path, rawQuery: h.RawQuery, remote: c.S.remote,
		proxy: h.Fields[0].Last, proxies: h.Fields[0].Lines, ctx: c.Context()}
	bufp := httpBufPool.Get().(*[]byte)
	ans := s.route(&req, (*bufp)[:0])
	defer func() {
		if cap(ans.body) <= 64<<10 { // don't let one huge response pin memory
			*bufp = ans.body[:0]
			httpBufPool.Put(bufp)
		}
	}()
	keep := !h.Close && !c.Closing()
	if ans.full != nil {
		return s.writeFullScrape(c, ans.full, keep)
	}
	c.Out = http1.AppendStatusLine(c.Out[:0], ans.status)
	c.Out = append(c.Out, "Content-Type: text/plain; charset=utf-8\r\n"...)
	switch ans.status {
	case http.StatusNotFound:
		c.Out = append(c.Out, "X-Content-Type-Options: nosniff\r\n"...)
	case http.StatusMethodNotAllowed:
		c.Out = append(c.Out, "Allow: GET, HEAD\r\n"...)
	}
	c.Out = appendTail(c, c.Out, len(ans.body), keep)
	if h.Method != http.MethodHead {
		c.Out = append(c.Out, ans.body...)
	}
	return c.Answer(c.Out, headLen, keep)
}

// appendTail ends a response head: the body's length and whether the
// connection stays.
func appendTail(c *httpConn, b []byte, contentLength int, keep bool) []byte {
	if contentLength >= 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(contentLength), 10)
		b = append(b, "\r\n"...)
	}
	switch {
	case !keep:
		b = append(b, "Connection: close\r\n"...)
	case c.Head.Minor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	return append(b, "\r\n"...)
}

// writeFullScrape sends the shared gzipped full scrape: as it is to a
// client that accepts gzip, else decompressed on the way (never held
// whole), its end marked by closing the connection.
func (s *HTTPServer) writeFullScrape(c *httpConn, body []byte, keep bool) bool {
	c.Out = http1.AppendStatusLine(c.Out[:0], http.StatusOK)
	c.Out = append(c.Out, "Content-Type: text/plain; charset=utf-8\r\nVary: Accept-Encoding\r\n"...)
	head := c.Head.Method == http.MethodHead
	c.ArmWrite()
	nc := c.NetConn()
	if c.Head.AcceptGzip {
		c.Out = append(c.Out, "Content-Encoding: gzip\r\n"...)
		c.Out = appendTail(c, c.Out, len(body), keep)
		bufs := net.Buffers{c.Out}
		if !head {
			bufs = append(bufs, body)
		}
		_, err := bufs.WriteTo(nc)
		return err == nil && keep
	}
	c.Out = appendTail(c, c.Out, -1, false)
	if _, err := nc.Write(c.Out); err != nil || head {
		return false
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err == nil {
		_, err = io.Copy(nc, zr)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		s.cfg.Logger.Warn("full scrape not sent whole", "remote", c.S.remote, "err", err)
	}
	return false
}

// refuse answers a request the listener will not route, the way
// net/http's server does (http1.Conn.Refuse), and logs it for debugging.
func (h httpHandler) refuse(c *httpConn, e *headError) {
	h.s.cfg.Logger.LogAttrs(c.Context(), slog.LevelDebug, "bittorrent http: request refused",
		slog.Int("status", e.Status), slog.String("reason", e.Reason), slog.Any("remote", c.S.remote))
	c.Refuse(e)
}
