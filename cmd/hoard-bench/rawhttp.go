package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The lean warrior client's pieces: a strict HTTP/1.1 response reader, the
// item name read from a request's JSON reply, the done body's JSON string
// written as seesaw's Python writes it, and a latency histogram. Each
// works in buffers its caller reuses, so a round trip allocates nothing:
// what the client costs the machine is what a client must do, not what a
// general-purpose library does besides (issue 23: on one 2-core machine
// the net/http generator took more CPU per round trip than hoard).

// maxResponseBody bounds a reply's body: a multi=N claim of the longest
// names is far below it.
const maxResponseBody = 16 << 20

// rawResponse is one response read by readRawResponse. body is a view
// into the buffer passed in.
type rawResponse struct {
	status int
	// close: the server said Connection: close; the connection is done.
	close bool
	body  []byte
}

var errResponseSyntax = errors.New("malformed HTTP response")

func responseError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errResponseSyntax}, args...)...)
}

// readRawResponse reads one HTTP/1.1 response from r, its body into buf
// (grown when short; the grown buffer is returned for the next call). It
// accepts only what it is sure net/http's ReadResponse reads the same way
// (FuzzReadRawResponseAgreesWithNetHTTP) and refuses the rest with an
// error: a head of CRLF-ended lines, HTTP/1.1, a 3-digit status from 200
// to 599 (a claim's client never expects 1xx, 204 or 304), header names
// that are tokens, values without control bytes, a body framed by exactly
// one Content-Length or by chunked transfer coding without extensions or
// trailers, no Content-Encoding (the client cannot decode one).
func readRawResponse(r *bufio.Reader, buf []byte) (rawResponse, []byte, error) {
	var resp rawResponse
	line, err := readCRLFLine(r)
	if err != nil {
		return resp, buf, err
	}
	// "HTTP/1.1 200" then the end or a space and the reason.
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return resp, buf, responseError("status line %q", line)
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return resp, buf, responseError("status line %q", line)
		}
		resp.status = resp.status*10 + int(c-'0')
	}
	if resp.status < 200 || resp.status > 599 || resp.status == 204 || resp.status == 304 {
		return resp, buf, responseError("unexpected status %d", resp.status)
	}
	if !validFieldValue(line[12:]) {
		return resp, buf, responseError("status line %q", line)
	}
	contentLength, chunked := int64(-1), false
	for {
		line, err := readCRLFLine(r)
		if err != nil {
			return resp, buf, err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return resp, buf, responseError("header line %q", line)
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !validFieldValue(value) {
			return resp, buf, responseError("header line %q", line)
		}
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if contentLength >= 0 {
				return resp, buf, responseError("more than one Content-Length")
			}
			if contentLength, err = parseDecimal(value); err != nil {
				return resp, buf, err
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			if chunked || !asciiEqualFold(value, "chunked") {
				return resp, buf, responseError("Transfer-Encoding %q", value)
			}
			chunked = true
		case asciiEqualFold(name, "Connection"):
			resp.close = resp.close || hasToken(value, "close")
		case asciiEqualFold(name, "Content-Encoding"), asciiEqualFold(name, "Trailer"):
			return resp, buf, responseError("unexpected %s: %q", name, value)
		}
	}
	switch {
	case chunked && contentLength >= 0:
		return resp, buf, responseError("both Content-Length and chunked")
	case chunked:
		resp.body, err = readChunked(r, buf[:0])
		if cap(resp.body) > cap(buf) {
			buf = resp.body[:0]
		}
		return resp, buf, err
	case contentLength < 0:
		return resp, buf, responseError("neither Content-Length nor chunked")
	}
	if cap(buf) < int(contentLength) {
		buf = make([]byte, contentLength)
	}
	resp.body = buf[:contentLength]
	if _, err := io.ReadFull(r, resp.body); err != nil {
		return resp, buf, fmt.Errorf("response body: %w", noEOF(err))
	}
	return resp, buf, nil
}

// readChunked appends a chunked body's data to dst: hex sizes alone on
// their lines, each chunk's data followed by CRLF, then 0 and an empty line.
func readChunked(r *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		line, err := readCRLFLine(r)
		if err != nil {
			return dst, err
		}
		if len(line) == 0 || len(line) > 8 {
			return dst, responseError("chunk size %q", line)
		}
		size := 0
		for _, c := range line {
			d, ok := hexDigit(c)
			if !ok {
				return dst, responseError("chunk size %q", line)
			}
			size = size<<4 | d
		}
		if size == 0 {
			if line, err = readCRLFLine(r); err != nil {
				return dst, err
			}
			if len(line) != 0 {
				return dst, responseError("trailer %q", line)
			}
			return dst, nil
		}
		if len(dst)+size > maxResponseBody {
			return dst, responseError("body past %d bytes", maxResponseBody)
		}
		dst = grow(dst, size)
		if _, err := io.ReadFull(r, dst[len(dst)-size:]); err != nil {
			return dst, fmt.Errorf("response chunk: %w", noEOF(err))
		}
		var crlf [2]byte
		if _, err := io.ReadFull(r, crlf[:]); err != nil {
			return dst, fmt.Errorf("response chunk: %w", noEOF(err))
		}
		if crlf != [2]byte{'\r', '\n'} {
			return dst, responseError("chunk not ended by CRLF")
		}
	}
}

// grow extends b by n bytes, keeping its contents.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// readCRLFLine returns the next line without its CRLF, a view into r's
// buffer valid until the next read. A line longer than the buffer, or one
// ended by a bare LF, is an error.
func readCRLFLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, responseError("line longer than %d bytes", r.Size())
		}
		return nil, fmt.Errorf("response head: %w", noEOF(err))
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, responseError("line %q not ended by CRLF", line)
	}
	return line[:len(line)-2], nil
}

// noEOF: a response cut short is io.ErrUnexpectedEOF, whichever byte it
// was cut at.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseDecimal(v []byte) (int64, error) {
	if len(v) == 0 || len(v) > 10 {
		return 0, responseError("Content-Length %q", v)
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, responseError("Content-Length %q", v)
		}
		n = n*10 + int64(c-'0')
	}
	if n > maxResponseBody {
		return 0, responseError("Content-Length %d past %d", n, maxResponseBody)
	}
	return n, nil
}

func hexDigit(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// isToken: RFC 9110's token characters, all of them, nothing else.
func isToken(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return len(b) > 0
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validFieldValue: no control bytes but tab.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// hasToken: token is one of the comma-separated elements of value.
func hasToken(value []byte, token string) bool {
	for len(value) > 0 {
		elem, rest, _ := bytes.Cut(value, []byte{','})
		if asciiEqualFold(trimOWS(elem), token) {
			return true
		}
		value = rest
	}
	return false
}

// jsonItemName decodes the item_name string of a request's reply, a JSON
// object, into dst (reused) and returns it. The whole reply is checked as
// JSON; keys are matched exactly and the last item_name wins, as seesaw's
// Python dict reads it (FuzzJSONItemNameAgreesWithEncodingJSON). A name
// that is not valid UTF-8 or holds an unpaired surrogate escape is
// refused: encoding/json and Python would each make something else of it.
func jsonItemName(data, dst []byte) ([]byte, error) {
	p := jsonParser{data: data}
	p.space()
	if !p.consume('{') {
		return dst, p.fail("not a JSON object")
	}
	found := false
	p.space()
	if !p.consume('}') {
		for {
			p.space()
			isName := p.peekString("\"item_name\"")
			if isName {
				p.i += len("\"item_name\"")
			} else if !p.skipString() {
				return dst, p.fail("bad key")
			}
			p.space()
			if !p.consume(':') {
				return dst, p.fail("no colon")
			}
			p.space()
			if isName {
				var ok bool
				if dst, ok = p.decodeString(dst[:0]); !ok {
					return dst, p.fail("item_name is not a JSON string of valid UTF-8")
				}
				found = true
			} else if !p.skipValue(0) {
				return dst, p.fail("bad value")
			}
			p.space()
			if p.consume('}') {
				break
			}
			if !p.consume(',') {
				return dst, p.fail("no comma")
			}
		}
	}
	p.space()
	if p.i != len(p.data) {
		return dst, p.fail("data after the object")
	}
	if !found {
		return dst, fmt.Errorf("reply %q has no item_name", data)
	}
	return dst, nil
}

type jsonParser struct {
	data []byte
	i    int
}

func (p *jsonParser) fail(what string) error {
	return fmt.Errorf("reply %q: %s at byte %d", p.data, what, p.i)
}

func (p *jsonParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) consume(c byte) bool {
	if p.i < len(p.data) && p.data[p.i] == c {
		p.i++
		return true
	}
	return false
}

// peekString: the next bytes are s, a key without escapes, ended there.
func (p *jsonParser) peekString(s string) bool {
	return len(p.data)-p.i >= len(s) && string(p.data[p.i:p.i+len(s)]) == s
}

// maxJSONDepth bounds nesting in skipped values (encoding/json's is 10,000).
const maxJSONDepth = 1000

func (p *jsonParser) skipValue(depth int) bool {
	if p.i >= len(p.data) || depth > maxJSONDepth {
		return false
	}
	switch c := p.data[p.i]; {
	case c == '"':
		return p.skipString()
	case c == '{', c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.i++
		p.space()
		if p.consume(end) {
			return true
		}
		for {
			p.space()
			if c == '{' {
				if !p.skipString() {
					return false
				}
				p.space()
				if !p.consume(':') {
					return false
				}
				p.space()
			}
			if !p.skipValue(depth + 1) {
				return false
			}
			p.space()
			if p.consume(end) {
				return true
			}
			if !p.consume(',') {
				return false
			}
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.skipNumber()
	}
}

func (p *jsonParser) literal(s string) bool {
	if !p.peekString(s) {
		return false
	}
	p.i += len(s)
	return true
}

func (p *jsonParser) digits() int {
	n := 0
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// skipNumber: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *jsonParser) skipNumber() bool {
	p.consume('-')
	if p.consume('0') {
		// no more integer digits after a leading zero
	} else if p.i < len(p.data) && p.data[p.i] >= '1' && p.data[p.i] <= '9' {
		p.digits()
	} else {
		return false
	}
	if p.consume('.') && p.digits() == 0 {
		return false
	}
	if p.consume('e') || p.consume('E') {
		if !p.consume('+') {
			p.consume('-')
		}
		if p.digits() == 0 {
			return false
		}
	}
	return true
}

// skipString passes a JSON string, checking its escapes and that it has
// no control bytes; its UTF-8 is not checked (decoders replace bad bytes).
func (p *jsonParser) skipString() bool {
	if !p.consume('"') {
		return false
	}
	for p.i < len(p.data) {
		c := p.data[p.i]
		p.i++
		switch {
		case c == '"':
			return true
		case c < ' ':
			return false
		case c == '\\':
			if p.i >= len(p.data) {
				return false
			}
			e := p.data[p.i]
			p.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if _, ok := p.hex4(); !ok {
					return false
				}
			default:
				return false
			}
		}
	}
	return false
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.data)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.i : p.i+4] {
		d, ok := hexDigit(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	p.i += 4
	return r, true
}

// decodeString appends the JSON string's value to dst.
func (p *jsonParser) decodeString(dst []byte) ([]byte, bool) {
	if !p.consume('"') {
		return dst, false
	}
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			return dst, true
		case c < ' ':
			return dst, false
		case c == '\\':
			p.i++
			if p.i >= len(p.data) {
				return dst, false
			}
			e := p.data[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return dst, false
				}
				if utf16.IsSurrogate(r) {
					// Only a high surrogate escape followed by a low one.
					if r >= 0xdc00 || !p.peekString(`\u`) {
						return dst, false
					}
					p.i += 2
					low, ok := p.hex4()
					if !ok {
						return dst, false
					}
					if r = utf16.DecodeRune(r, low); r == utf8.RuneError {
						return dst, false
					}
				}
				dst = utf8.AppendRune(dst, r)
			default:
				return dst, false
			}
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.data[p.i:])
			if r == utf8.RuneError && size == 1 {
				return dst, false
			}
			dst = append(dst, p.data[p.i:p.i+size]...)
			p.i += size
		}
	}
	return dst, false
}

// appendPythonJSONString appends s as a JSON string the way Python's
// json.dumps writes it by default (ensure_ascii): seesaw builds the done
// body so, so a non-ASCII or multi=N name (NUL-joined) reaches the server
// as \uXXXX escapes, lower-case hex, astral characters as surrogate pairs.
// s is valid UTF-8 (jsonItemName refuses anything else).
func appendPythonJSONString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	u := func(dst []byte, r rune) []byte {
		return append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= ' ' && c <= '~' {
			if c == '"' || c == '\\' {
				dst = append(dst, '\\')
			}
			dst = append(dst, c)
			i++
			continue
		}
		switch c {
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r > 0xffff {
				hi, lo := utf16.EncodeRune(r)
				dst = u(u(dst, hi), lo)
			} else {
				dst = u(dst, r)
			}
			i += size
			continue
		}
		i++
	}
	return append(dst, '"')
}

// latencyHistogram counts durations in buckets of at most 1/64 of their
// value (microseconds below 128 exactly), so a warrior records every
// round trip in a fixed array instead of a growing slice.
type latencyHistogram struct {
	counts [128 + 40*64]uint64
}

func latencyBucket(d time.Duration) int {
	v := uint64(max(d.Microseconds(), 0))
	if v < 128 {
		return int(v)
	}
	e := bits.Len64(v) - 7 // v in [64<<e, 128<<e)
	i := 128 + (e-1)*64 + int(v>>e-64)
	return min(i, len(latencyHistogram{}.counts)-1)
}

// bucketMicros is the middle of bucket i in microseconds.
func bucketMicros(i int) float64 {
	if i < 128 {
		return float64(i)
	}
	e := (i-128)/64 + 1
	low := uint64((i-128)%64+64) << e
	return float64(low) + float64(uint64(1)<<e-1)/2
}

func (h *latencyHistogram) add(d time.Duration) { h.counts[latencyBucket(d)]++ }

func (h *latencyHistogram) merge(o *latencyHistogram) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
}

// quantile in milliseconds, the sample at rank q·(n−1) as latencies.quantile
// takes it, to within its bucket.
func (h *latencyHistogram) quantile(q float64) float64 {
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q * float64(n-1))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			return bucketMicros(i) / 1000
		}
	}
	return 0
}
