package bittorrent

import (
	"bytes"
	"net/url"
	"strings"
	"unsafe"
)

// requestHead is what the tracker reads of one HTTP/1.x request: its
// request line and the few headers that change the answer. Its strings are
// views into the connection's input buffer, valid until the next request is
// read: whatever outlives the request (a passkey handed to the Swarms) is
// copied by the handler.
type requestHead struct {
	method   string
	path     string // percent-decoded, as net/http's URL.Path
	rawQuery string // still percent-encoded
	minor    int    // HTTP/1.<minor>: 0 or 1
	host     string
	hosts    int
	// close: the connection ends after this answer (HTTP/1.1 with
	// "Connection: close", or HTTP/1.0 without "keep-alive").
	close      bool
	acceptGzip bool
	// proxy is the last value of the configured proxy header; proxies
	// counts its lines (0: absent).
	proxy   string
	proxies int
}

// headError is a request the listener refuses before routing it: the
// status and a reason for a human, then the connection closes.
type headError struct {
	status int
	reason string
}

func (e *headError) Error() string { return e.reason }

// Refusals of the head. Each reason says what was wrong, never echoing
// the request.
var (
	errHeadRequestLine    = &headError{400, "malformed request line"}
	errHeadMethod         = &headError{400, "malformed method"}
	errHeadVersion        = &headError{400, "malformed HTTP version"}
	errHeadVersionUnknown = &headError{505, "only HTTP/1.0 and HTTP/1.1 are served"}
	errHeadTarget         = &headError{400, "malformed request target"}
	errHeadConnect        = &headError{405, "CONNECT is not served: this is a tracker, not a proxy"}
	errHeadLine           = &headError{400, "malformed header line"}
	errHeadFolding        = &headError{400, "obsolete header line folding is not accepted"}
	errHeadNoHost         = &headError{400, "missing required Host header"}
	errHeadHosts          = &headError{400, "too many Host headers"}
	errHeadBadHost        = &headError{400, "malformed Host header"}
	errHeadContentLength  = &headError{400, "malformed Content-Length"}
	errHeadBody           = &headError{413, "request bodies are not accepted: announce and scrape are GET requests"}
	errHeadChunked        = &headError{501, "Transfer-Encoding is not supported: announce and scrape have no body"}
	errHeadTargetTooLong  = &headError{414, "request target too long"}
	errHeadTooLarge       = &headError{431, "request header fields too large"}
)

// parseRequestHead parses head, one request's lines up to and including
// the blank line that ends them (leading blank lines already skipped),
// into h. proxyHeader names the proxy header to keep ("" keeps none).
// It allocates nothing unless the path is percent-encoded or the target is
// in absolute form. It accepts a subset of what net/http's server accepts
// and reads it the same (FuzzParseRequestHead checks both).
func parseRequestHead(head []byte, proxyHeader string, h *requestHead) *headError {
	*h = requestHead{}
	line, rest := nextLine(head)
	if err := h.parseRequestLine(line); err != nil {
		return err
	}
	keepAlive, closeAsked, contentLength := false, false, -1
	for {
		line, rest = nextLine(rest)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errHeadFolding
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(name) == 0 {
			return errHeadLine
		}
		for _, c := range name {
			if !tokenByte(c) {
				return errHeadLine
			}
		}
		value = bytes.TrimRight(bytes.TrimLeft(value, " \t"), " \t")
		for _, c := range value {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return errHeadLine
			}
		}
		v := unsafe.String(unsafe.SliceData(value), len(value))
		switch {
		case asciiEqualFold(name, "Host"):
			h.host = v
			h.hosts++
		case asciiEqualFold(name, "Connection"):
			keepAlive = keepAlive || hasToken(v, "keep-alive")
			closeAsked = closeAsked || hasToken(v, "close")
		case asciiEqualFold(name, "Content-Length"):
			n, ok := parseContentLength(v)
			if !ok || (contentLength >= 0 && n != contentLength) {
				return errHeadContentLength
			}
			contentLength = n
		case asciiEqualFold(name, "Transfer-Encoding"):
			return errHeadChunked
		case asciiEqualFold(name, "Accept-Encoding"):
			h.acceptGzip = h.acceptGzip || acceptsGzip(v)
		}
		if proxyHeader != "" && asciiEqualFold(name, proxyHeader) {
			h.proxy = v
			h.proxies++
		}
	}
	switch {
	case h.hosts > 1:
		return errHeadHosts
	case h.hosts == 0 && h.minor >= 1:
		return errHeadNoHost
	case !validHost(h.host):
		return errHeadBadHost
	case contentLength > 0:
		return errHeadBody
	}
	h.close = closeAsked || (h.minor == 0 && !keepAlive)
	return nil
}

// parseRequestLine reads "METHOD SP target SP HTTP/1.x".
func (h *requestHead) parseRequestLine(line []byte) *headError {
	method, rest, ok1 := bytes.Cut(line, []byte{' '})
	target, proto, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 {
		return errHeadRequestLine
	}
	if len(method) == 0 {
		return errHeadMethod
	}
	for _, c := range method {
		if !tokenByte(c) {
			return errHeadMethod
		}
	}
	switch string(proto) {
	case "HTTP/1.1":
		h.minor = 1
	case "HTTP/1.0":
		h.minor = 0
	default:
		if len(proto) == len("HTTP/X.Y") && bytes.HasPrefix(proto, []byte("HTTP/")) &&
			digit(proto[5]) && proto[6] == '.' && digit(proto[7]) {
			return errHeadVersionUnknown
		}
		return errHeadVersion
	}
	h.method = unsafe.String(unsafe.SliceData(method), len(method))
	if h.method == "CONNECT" {
		return errHeadConnect
	}
	if len(target) == 0 {
		return errHeadTarget
	}
	for _, c := range target {
		if c < ' ' || c == 0x7f {
			return errHeadTarget
		}
	}
	raw := unsafe.String(unsafe.SliceData(target), len(target))
	if raw[0] != '/' {
		// Absolute form ("http://host/announce?…", from proxies) and the
		// asterisk: rare, so net/url reads them, exactly as net/http does.
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			return errHeadTarget
		}
		h.path, h.rawQuery = u.Path, u.RawQuery
		return nil
	}
	path, query, _ := strings.Cut(raw, "?")
	if strings.IndexByte(path, '%') >= 0 {
		unescaped, err := url.PathUnescape(path)
		if err != nil {
			return errHeadTarget
		}
		path = unescaped
	}
	h.path, h.rawQuery = path, query
	return nil
}

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

// headEnd returns the length of the head at the start of b (through the
// blank line that ends it), or -1 when b does not hold all of it yet.
// from is where the previous call stopped looking, so bytes arriving in
// pieces are scanned once; the second result is where to resume.
func headEnd(b []byte, from int) (end, resume int) {
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

// tokenByte reports whether c may appear in a method or header name
// (RFC 9110's tchar).
func tokenByte(c byte) bool {
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
func parseContentLength(v string) (int, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if !digit(v[i]) {
			return 0, false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n, true
}
