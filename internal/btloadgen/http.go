package btloadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// maxBody bounds a response body; an announce reply is a few KB at most.
const maxBody = 1 << 20

// The HTTP client is a minimal HTTP/1.1 one written for this purpose:
// net/http's client costs several times more CPU per request, and on a
// shared machine the generator's CPU is taken from the tracker under test.
type httpConn struct {
	conn     net.Conn
	br       *bufio.Reader
	body     []byte
	used     bool
	stopKill func() bool
}

func (r *run) dialHTTP(ctx context.Context) (*httpConn, error) {
	d := net.Dialer{KeepAlive: -1} // BitTorrent clients set no TCP keep-alive; it costs syscalls
	dialCtx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	conn, err := d.DialContext(dialCtx, "tcp", r.target.String())
	if err != nil {
		return nil, err
	}
	c := &httpConn{conn: conn, br: bufio.NewReaderSize(conn, 4096), body: make([]byte, 0, 4096)}
	// End a blocked read or write as soon as the run ends.
	c.stopKill = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return c, nil
}

func (c *httpConn) close() {
	c.stopKill()
	_ = c.conn.Close()
}

func (r *run) httpWorker(ctx context.Context, rng *rand.Rand, stats *workerStats, closeEach bool) {
	var c *httpConn
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	req := make([]byte, 0, 512)
	for r.next(ctx) {
		a := r.pick(rng)
		req = r.appendHTTPRequest(req[:0], &a, closeEach)
		start := time.Now()
		var peers int
		var err error
		for attempt := 0; ; attempt++ {
			if c == nil {
				if c, err = r.dialHTTP(ctx); err != nil {
					break
				}
			}
			reused := c.used
			var keep bool
			peers, keep, err = c.roundTrip(req, r.cfg.Timeout)
			c.used = true
			if err != nil || closeEach || !keep {
				c.close()
				c = nil
			}
			// A kept-alive connection the server has since closed fails
			// before any reply: retry once on a new one, as net/http does.
			if err != nil && reused && attempt == 0 && staleConnection(err) {
				continue
			}
			break
		}
		if err != nil {
			stats.fail(ctx, err)
			continue
		}
		stats.ok(time.Since(start), peers)
	}
}

// errNoReply marks a connection that closed before sending anything.
var errNoReply = errors.New("connection closed before a reply")

func staleConnection(err error) bool {
	return errors.Is(err, errNoReply) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (r *run) appendHTTPRequest(dst []byte, a *announce, closeEach bool) []byte {
	dst = append(dst, "GET "...)
	dst = append(dst, a.path...)
	if strings.IndexByte(a.path, '?') >= 0 {
		dst = append(dst, '&')
	} else {
		dst = append(dst, '?')
	}
	q := wire.AnnounceQuery{
		InfoHash: a.infoHash, PeerID: a.peerID, Port: a.port, Left: a.left,
		Uploaded: a.uploaded, Downloaded: a.downloaded,
		Compact: true, NumWant: r.cfg.NumWant, Key: strconv.FormatUint(uint64(a.key), 16), Event: a.event,
	}
	dst = wire.AppendAnnounceQuery(dst, &q)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, r.cfg.Target...)
	dst = append(dst, "\r\nUser-Agent: hoard-loadgen/1\r\nAccept-Encoding: identity\r\n"...)
	if closeEach {
		dst = append(dst, "Connection: close\r\n"...)
	}
	if a.ip.IsValid() {
		dst = append(dst, "X-Forwarded-For: "...)
		dst = a.ip.AppendTo(dst)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// roundTrip writes one request and reads its response. It returns the
// number of compact peers and whether the connection may be reused.
func (c *httpConn) roundTrip(req []byte, timeout time.Duration) (peers int, keepAlive bool, err error) {
	if err := c.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, false, err
	}
	if _, err := c.conn.Write(req); err != nil {
		return 0, false, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return 0, false, errNoReply
		}
		return 0, false, fmt.Errorf("reading status line: %w", err)
	}
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	statusText, _, _ := bytes.Cut(rest, []byte(" "))
	status, err := strconv.Atoi(string(bytes.TrimSpace(statusText)))
	if err != nil || !bytes.HasPrefix(proto, []byte("HTTP/1.")) {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	keepAlive = string(proto) == "HTTP/1.1"
	contentLength, chunked := -1, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return 0, false, fmt.Errorf("reading headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if contentLength, err = strconv.Atoi(string(value)); err != nil || contentLength < 0 || contentLength > maxBody {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			switch {
			case bytes.EqualFold(value, []byte("close")):
				keepAlive = false
			case bytes.EqualFold(value, []byte("keep-alive")):
				keepAlive = true
			}
		}
	}
	body := c.body[:0]
	switch {
	case chunked:
		body, err = readChunked(c.br, body)
	case contentLength >= 0:
		body = append(body, make([]byte, contentLength)...)
		_, err = io.ReadFull(c.br, body)
	default:
		keepAlive = false // the body ends when the connection does
		body, err = readAll(c.br, body)
	}
	c.body = body
	if err != nil {
		return 0, false, fmt.Errorf("reading body: %w", err)
	}
	if status != 200 {
		return 0, false, fmt.Errorf("HTTP %d: %.100q", status, body)
	}
	peers, err = checkAnnounceBody(body)
	return peers, keepAlive, err
}

func readAll(r io.Reader, dst []byte) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			if len(dst) >= maxBody {
				return dst, errors.New("body too long")
			}
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

func readChunked(br *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return dst, err
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		size, err := strconv.ParseUint(string(sizeText), 16, 32)
		if err != nil || len(dst)+int(size) > maxBody {
			return dst, fmt.Errorf("bad chunk size %q", line)
		}
		if size == 0 {
			for { // trailers, up to the blank line
				line, err := br.ReadSlice('\n')
				if err != nil {
					return dst, err
				}
				if len(bytes.TrimSpace(line)) == 0 {
					return dst, nil
				}
			}
		}
		start := len(dst)
		dst = append(dst, make([]byte, size)...)
		if _, err := io.ReadFull(br, dst[start:]); err != nil {
			return dst, err
		}
		if _, err := br.Discard(2); err != nil { // CRLF
			return dst, err
		}
	}
}

var failurePrefix = []byte("d14:failure reason")

// checkAnnounceBody accepts a bencoded announce reply and counts its
// compact peers; a failure reason becomes the error.
func checkAnnounceBody(body []byte) (int, error) {
	if rest, ok := bytes.CutPrefix(body, failurePrefix); ok {
		reason, _ := bencodedString(rest)
		return 0, fmt.Errorf("failure reason: %s", reason)
	}
	if len(body) == 0 || body[0] != 'd' || body[len(body)-1] != 'e' {
		return 0, fmt.Errorf("not a bencoded dictionary: %.100q", body)
	}
	peers := 0
	if i := bytes.Index(body, []byte("5:peers")); i >= 0 {
		if s, ok := bencodedString(body[i+len("5:peers"):]); ok {
			peers += len(s) / 6
		}
	}
	if i := bytes.Index(body, []byte("6:peers6")); i >= 0 {
		if s, ok := bencodedString(body[i+len("6:peers6"):]); ok {
			peers += len(s) / 18
		}
	}
	return peers, nil
}

// bencodedString reads a <len>:<bytes> string at the start of b.
func bencodedString(b []byte) ([]byte, bool) {
	lenText, rest, ok := bytes.Cut(b, []byte(":"))
	if !ok {
		return nil, false
	}
	n, err := strconv.Atoi(string(lenText))
	if err != nil || n < 0 || n > len(rest) {
		return nil, false
	}
	return rest[:n], true
}
