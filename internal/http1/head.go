// Package http1 reads HTTP/1.x request heads without net/http: the
// listeners that serve a hot path themselves (the BitTorrent plugin's
// announce and scrape, hoard's warrior calls) share this parser, so what
// one accepts the other does, and both are held to net/http's reading by
// one differential fuzz test (FuzzParseRequestHead).
package http1

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unsafe"
)

// MaxFields is how many headers a caller may ask ParseRequestHead to keep
// besides the ones every caller needs.
const MaxFields = 6

// RequestHead is what a listener reads of one HTTP/1.x request: its
// request line, the headers that decide how to read and answer it, and the
// ones the caller asked for. Its strings are views into the caller's input
// buffer, valid until the next request is read: whatever outlives the
// request is copied by the caller.
type RequestHead struct {
	Method   string
	Path     string // percent-decoded, as net/http's URL.Path
	RawQuery string // still percent-encoded
	Minor    int    // HTTP/1.<minor>: 0 or 1
	Host     string
	Hosts    int
	// Close: the connection ends after this answer (HTTP/1.1 with
	// "Connection: close", or HTTP/1.0 without "keep-alive").
	Close      bool
	AcceptGzip bool
	// ContentLength is the body's length; -1 when there is no
	// Content-Length header.
	ContentLength int64
	// Chunked: a Transfer-Encoding header was sent. The parser does not
	// read such bodies: a caller refuses them or hands them to net/http.
	Chunked bool
	// Fields holds the headers asked for, in the order asked.
	Fields [MaxFields]Field
}

// Field is one asked-for header: its first and last lines' values, and
// how many lines it had (0: absent).
type Field struct {
	First, Last string
	Lines       int
}

// HeadError is a head the parser refuses: the status net/http's server
// would answer and a reason for a human.
type HeadError struct {
	Status int
	Reason string
}

func (e *HeadError) Error() string { return e.Reason }

// Text is the refusal's body as net/http's server writes it: status,
// status text, reason.
func (e *HeadError) Text() string {
	return strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + ": " + e.Reason
}

// Refusals of the head. Each reason says what was wrong, never echoing
// the request.
var (
	ErrRequestLine    = &HeadError{400, "malformed request line"}
	ErrMethod         = &HeadError{400, "malformed method"}
	ErrVersion        = &HeadError{400, "malformed HTTP version"}
	ErrVersionUnknown = &HeadError{505, "only HTTP/1.0 and HTTP/1.1 are served"}
	ErrTarget         = &HeadError{400, "malformed request target"}
	ErrLine           = &HeadError{400, "malformed header line"}
	ErrFolding        = &HeadError{400, "obsolete header line folding is not accepted"}
	ErrNoHost         = &HeadError{400, "missing required Host header"}
	ErrHosts          = &HeadError{400, "too many Host headers"}
	ErrBadHost        = &HeadError{400, "malformed Host header"}
	ErrContentLength  = &HeadError{400, "malformed Content-Length"}
	ErrTargetTooLong  = &HeadError{414, "request target too long"}
	ErrTooLarge       = &HeadError{431, "request header fields too large"}
)

// ParseRequestHead parses head, one request's lines up to and including
// the blank line that ends them (leading blank lines already skipped),
// into h, keeping the headers named in fields (at most MaxFields, each
// matched ignoring case) in h.Fields. CONNECT is refused with the caller's
// connect error (none: it is read as any other method would be).
// It allocates nothing unless the path is percent-encoded or the target is
// in absolute form. It accepts a subset of what net/http's server accepts
// and reads it the same (FuzzParseRequestHead checks both); a head with
// Transfer-Encoding is read (Chunked) but its body is the caller's to
// refuse or hand on.
func ParseRequestHead(head []byte, fields []string, h *RequestHead) *HeadError {
	*h = RequestHead{ContentLength: -1}
	line, rest := nextLine(head)
	if err := h.parseRequestLine(line); err != nil {
		return err
	}
	keepAlive, closeAsked := false, false
	for {
		line, rest = nextLine(rest)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return ErrFolding
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(name) == 0 {
			return ErrLine
		}
		for _, c := range name {
			if !TokenByte(c) {
				return ErrLine
			}
		}
		value = bytes.TrimRight(bytes.TrimLeft(value, " \t"), " \t")
		for _, c := range value {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return ErrLine
			}
		}
		v := unsafe.String(unsafe.SliceData(value), len(value))
		switch {
		case asciiEqualFold(name, "Host"):
			h.Host = v
			h.Hosts++
		case asciiEqualFold(name, "Connection"):
			keepAlive = keepAlive || hasToken(v, "keep-alive")
			closeAsked = closeAsked || hasToken(v, "close")
		case asciiEqualFold(name, "Content-Length"):
			n, ok := parseContentLength(v)
			if !ok || (h.ContentLength >= 0 && n != h.ContentLength) {
				return ErrContentLength
			}
			h.ContentLength = n
		case asciiEqualFold(name, "Transfer-Encoding"):
			h.Chunked = true
		case asciiEqualFold(name, "Accept-Encoding"):
			h.AcceptGzip = h.AcceptGzip || AcceptsGzip(v)
		}
		for i, want := range fields {
			if asciiEqualFold(name, want) {
				f := &h.Fields[i]
				if f.Lines == 0 {
					f.First = v
				}
				f.Last = v
				f.Lines++
			}
		}
	}
	switch {
	case h.Hosts > 1:
		return ErrHosts
	case h.Hosts == 0 && h.Minor >= 1:
		return ErrNoHost
	case !validHost(h.Host):
		return ErrBadHost
	}
	h.Close = closeAsked || (h.Minor == 0 && !keepAlive)
	return nil
}

// parseRequestLine reads "METHOD SP target SP HTTP/1.x".
func (h *RequestHead) parseRequestLine(line []byte) *HeadError {
	method, rest, ok1 := bytes.Cut(line, []byte{' '})
	target, proto, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 {
		return ErrRequestLine
	}
	if len(method) == 0 {
		return ErrMethod
	}
	for _, c := range method {
		if !TokenByte(c) {
			return ErrMethod
		}
	}
	switch string(proto) {
	case "HTTP/1.1":
		h.Minor = 1
	case "HTTP/1.0":
		h.Minor = 0
	default:
		if len(proto) == len("HTTP/X.Y") && bytes.HasPrefix(proto, []byte("HTTP/")) &&
			digit(proto[5]) && proto[6] == '.' && digit(proto[7]) {
			return ErrVersionUnknown
		}
		return ErrVersion
	}
	h.Method = unsafe.String(unsafe.SliceData(method), len(method))
	if h.Method == "CONNECT" {
		// Its target is an authority, not a path: no caller serves it.
		return ErrConnect
	}
	if len(target) == 0 {
		return ErrTarget
	}
	for _, c := range target {
		if c < ' ' || c == 0x7f {
			return ErrTarget
		}
	}
	raw := unsafe.String(unsafe.SliceData(target), len(target))
	if raw[0] != '/' {
		// Absolute form ("http://host/announce?…", from proxies) and the
		// asterisk: rare, so net/url reads them, exactly as net/http does.
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			return ErrTarget
		}
		h.Path, h.RawQuery = u.Path, u.RawQuery
		return nil
	}
	path, query, _ := strings.Cut(raw, "?")
	if strings.IndexByte(path, '%') >= 0 {
		unescaped, err := url.PathUnescape(path)
		if err != nil {
			return ErrTarget
		}
		path = unescaped
	}
	h.Path, h.RawQuery = path, query
	return nil
}

// ErrConnect refuses CONNECT: these listeners are not proxies.
var ErrConnect = &HeadError{405, "CONNECT is not served: this is not a proxy"}

// nextLine splits off the first line of b, without its "\n" or "\r\n".
func nextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return b, nil
	}
	line, rest = b[:i], b[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

// HeadEnd returns the length of the head at the start of b (through the
// blank line that ends it), or -1 when b does not hold all of it yet.
// from is where the previous call stopped looking, so bytes arriving in
// pieces are scanned once; the second result is where to resume.
func HeadEnd(b []byte, from int) (end, resume int) {
	for i := from; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			break
		}
		i += j
		if i >= 1 && b[i-1] == '\n' || i >= 2 && b[i-1] == '\r' && b[i-2] == '\n' {
			return i + 1, i + 1
		}
		i++
	}
	return -1, max(len(b), from)
}

// TokenByte reports whether c may appear in a method or header name
// (RFC 9110's tchar).
func TokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func digit(c byte) bool { return '0' <= c && c <= '9' }

// validHost accepts the bytes net/http's server accepts in Host: those of
// a host, an IPv6 literal, a zone and a port.
func validHost(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || digit(c) || strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) >= 0) {
			return false
		}
	}
	return true
}

// asciiEqualFold compares a header name with a known one, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list v names token,
// ignoring case and the spaces around items.
func hasToken(v, token string) bool {
	for v != "" {
		var item string
		item, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.Trim(item, " \t"), token) {
			return true
		}
	}
	return false
}

// parseContentLength reads a Content-Length: decimal digits only.
func parseContentLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !digit(v[i]) {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

// AcceptsGzip reads an Accept-Encoding value loosely: "gzip" listed
// without q=0, in any case, with or without parameters.
func AcceptsGzip(value string) bool {
	for value != "" {
		var part string
		part, value, _ = strings.Cut(value, ",")
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		if q == "q=0" || q == "q=0.0" || q == "q=0.00" || q == "q=0.000" {
			continue
		}
		return true
	}
	return false
}

// AppendStatusLine writes "HTTP/1.1 <code> <text>\r\n", as net/http does.
func AppendStatusLine(b []byte, status int) []byte {
	if status == http.StatusOK {
		return append(b, "HTTP/1.1 200 OK\r\n"...)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	if text := http.StatusText(status); text != "" {
		b = append(b, text...)
	} else {
		// net/http's words for a code it has no text for (seesaw's 455).
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(status), 10)
	}
	return append(b, "\r\n"...)
}
