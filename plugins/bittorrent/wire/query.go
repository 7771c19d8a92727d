package wire

import (
	"errors"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// Event is an announce's event, numbered as BEP 15 numbers it (the same
// numbering as bittorrent.Event).
type Event uint8

// The announce events.
const (
	EventNone      Event = 0
	EventCompleted Event = 1
	EventStarted   Event = 2
	EventStopped   Event = 3
)

// String is the event's name as an HTTP announce spells it.
func (e Event) String() string {
	switch e {
	case EventCompleted:
		return "completed"
	case EventStarted:
		return "started"
	case EventStopped:
		return "stopped"
	default:
		return ""
	}
}

// Limits on the free-form strings a client sends.
const (
	// MaxPasskeyLen bounds a passkey (Ocelot's are 32 characters).
	MaxPasskeyLen = 128
	// MaxKeyLen bounds the key parameter (clients send 8 hex digits or a
	// decimal int32).
	MaxKeyLen = 64
)

// AnnounceQuery is a parsed HTTP announce query (BEP 3, 7, 23).
type AnnounceQuery struct {
	InfoHash   [20]byte
	PeerID     [20]byte
	Port       uint16
	Uploaded   uint64 // 0 when absent
	Downloaded uint64 // 0 when absent
	Left       uint64
	Event      Event
	// Compact is true unless the client sent compact=0: almost every client
	// asks for compact peers, and the rest accept them (BEP 23).
	Compact bool
	// NoPeerID drops peer ids from a non-compact peer list.
	NoPeerID bool
	// NumWant is -1 when absent or negative: the listener's default applies.
	NumWant int
	Key     string
	// Passkey is the passkey query parameter; the listener also looks at
	// the path.
	Passkey string
	// IP is the ip parameter if it parsed (unmapped), else the zero Addr.
	// Listeners ignore it unless configured to trust it.
	IP netip.Addr
}

// Parse errors. Their text is what the client's user reads.
var (
	ErrMalformedQuery  = errors.New("malformed query string")
	ErrMissingInfoHash = errors.New("missing info_hash")
	ErrBadInfoHash     = errors.New("info_hash must be exactly 20 bytes")
	ErrMissingPeerID   = errors.New("missing peer_id")
	ErrBadPeerID       = errors.New("peer_id must be exactly 20 bytes")
	ErrMissingPort     = errors.New("missing port")
	ErrBadPort         = errors.New("port must be an integer from 0 to 65535")
	ErrMissingLeft     = errors.New("missing left")
	ErrBadLeft         = errors.New("left must be a non-negative integer")
	ErrBadUploaded     = errors.New("uploaded must be a non-negative integer")
	ErrBadDownloaded   = errors.New("downloaded must be a non-negative integer")
	ErrBadNumWant      = errors.New("numwant must be an integer")
	ErrBadEvent        = errors.New("event must be started, stopped, completed or empty")
	ErrBadKey          = errors.New("key is too long")
	ErrBadPasskey      = errors.New("malformed passkey")
)

// Which required or once-only fields a parse has seen.
const (
	seenInfoHash = 1 << iota
	seenPeerID
	seenPort
	seenLeft
	seenUploaded
	seenDownloaded
	seenEvent
	seenCompact
	seenNoPeerID
	seenNumWant
	seenKey
	seenPasskey
	seenIP
)

// ParseAnnounceQuery parses the raw (still percent-encoded) query of an
// HTTP announce into q. info_hash and peer_id are binary and must decode to
// exactly 20 bytes; port and left are required. When a parameter repeats,
// the first one counts. Unknown parameters are ignored. Strings in q alias
// raw when they needed no decoding.
func ParseAnnounceQuery(raw string, q *AnnounceQuery) error {
	*q = AnnounceQuery{Compact: true, NumWant: -1}
	var seen uint32
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		name, value, _ := strings.Cut(pair, "=")
		var bit uint32
		switch name {
		case "info_hash":
			bit = seenInfoHash
		case "peer_id":
			bit = seenPeerID
		case "port":
			bit = seenPort
		case "left":
			bit = seenLeft
		case "uploaded":
			bit = seenUploaded
		case "downloaded":
			bit = seenDownloaded
		case "event":
			bit = seenEvent
		case "compact":
			bit = seenCompact
		case "no_peer_id":
			bit = seenNoPeerID
		case "numwant":
			bit = seenNumWant
		case "key":
			bit = seenKey
		case "passkey":
			bit = seenPasskey
		case "ip":
			bit = seenIP
		default:
			continue
		}
		if seen&bit != 0 {
			continue
		}
		seen |= bit
		if err := q.set(bit, value); err != nil {
			return err
		}
	}
	switch {
	case seen&seenInfoHash == 0:
		return ErrMissingInfoHash
	case seen&seenPeerID == 0:
		return ErrMissingPeerID
	case seen&seenPort == 0:
		return ErrMissingPort
	case seen&seenLeft == 0:
		return ErrMissingLeft
	}
	return nil
}

func (q *AnnounceQuery) set(field uint32, value string) error {
	var err error
	switch field {
	case seenInfoHash:
		err = unescape20(&q.InfoHash, value, ErrBadInfoHash)
	case seenPeerID:
		err = unescape20(&q.PeerID, value, ErrBadPeerID)
	case seenPort:
		port, perr := strconv.ParseUint(value, 10, 16)
		if perr != nil {
			return ErrBadPort
		}
		q.Port = uint16(port)
	case seenLeft:
		q.Left, err = parseCounter(value, ErrBadLeft)
	case seenUploaded:
		q.Uploaded, err = parseCounter(value, ErrBadUploaded)
	case seenDownloaded:
		q.Downloaded, err = parseCounter(value, ErrBadDownloaded)
	case seenEvent:
		q.Event, err = parseEvent(value)
	case seenCompact:
		q.Compact = value != "0"
	case seenNoPeerID:
		q.NoPeerID = value != "" && value != "0"
	case seenNumWant:
		n, perr := strconv.ParseInt(value, 10, 64)
		if perr != nil {
			return ErrBadNumWant
		}
		q.NumWant = int(min(max(n, -1), math.MaxInt32))
	case seenKey:
		q.Key, err = unescapeBounded(value, MaxKeyLen, ErrBadKey)
	case seenPasskey:
		q.Passkey, err = unescapePasskey(value)
	case seenIP:
		// A bad ip parameter is ignored rather than refused: listeners
		// ignore the parameter by default, and refusing a client for a
		// field nobody reads would only break it.
		if s, ok := unescape(value); ok {
			if ip, perr := netip.ParseAddr(s); perr == nil {
				q.IP = ip.Unmap().WithZone("")
			}
		}
	}
	return err
}

func parseCounter(value string, bad error) (uint64, error) {
	n, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return 0, bad
	}
	return n, nil
}

func parseEvent(value string) (Event, error) {
	switch value {
	case "", "empty", "paused": // BEP 21 "paused" is a regular announce
		return EventNone, nil
	case "started":
		return EventStarted, nil
	case "stopped":
		return EventStopped, nil
	case "completed":
		return EventCompleted, nil
	}
	return EventNone, ErrBadEvent
}

// ParseScrapeQuery appends the info_hash parameters of a raw scrape query
// to hashes, keeping at most limit of them (opentracker also answers only
// the first ones), and returns the passkey parameter. Duplicates are kept;
// see SortUniqueHashes.
func ParseScrapeQuery(raw string, hashes [][20]byte, limit int) ([][20]byte, string, error) {
	var passkey string
	var seenPK bool
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		name, value, _ := strings.Cut(pair, "=")
		switch name {
		case "info_hash":
			if len(hashes) >= limit {
				continue
			}
			var h [20]byte
			if err := unescape20(&h, value, ErrBadInfoHash); err != nil {
				return hashes, "", err
			}
			hashes = append(hashes, h)
		case "passkey":
			if seenPK {
				continue
			}
			seenPK = true
			var err error
			if passkey, err = unescapePasskey(value); err != nil {
				return hashes, "", err
			}
		}
	}
	return hashes, passkey, nil
}

// QueryValue returns the first value of the named parameter in a raw
// query, percent-decoded.
func QueryValue(raw, name string) (value string, found bool, err error) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		n, v, _ := strings.Cut(pair, "=")
		if n != name {
			continue
		}
		s, ok := unescape(v)
		if !ok {
			return "", true, ErrMalformedQuery
		}
		return s, true, nil
	}
	return "", false, nil
}

// ValidPasskey reports whether s is a well-formed passkey: 1 to
// MaxPasskeyLen characters from [A-Za-z0-9._~-]. Keeping passkeys to
// URL-safe characters means they never need escaping in a path, and never
// carry the braces of a Redis hash tag.
func ValidPasskey(s string) bool {
	if len(s) == 0 || len(s) > MaxPasskeyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '~', c == '-':
		default:
			return false
		}
	}
	return true
}

func unescapePasskey(value string) (string, error) {
	s, ok := unescape(value)
	if !ok || !ValidPasskey(s) {
		return "", ErrBadPasskey
	}
	return s, nil
}

func unescapeBounded(value string, limit int, tooLong error) (string, error) {
	s, ok := unescape(value)
	if !ok {
		return "", ErrMalformedQuery
	}
	if len(s) > limit {
		return "", tooLong
	}
	return s, nil
}

// unescape percent-decodes a query value ('+' is a space, as in HTML
// forms). It returns value itself when nothing needed decoding, so the
// common case does not allocate.
func unescape(value string) (string, bool) {
	if strings.IndexByte(value, '%') < 0 && strings.IndexByte(value, '+') < 0 {
		return value, true
	}
	out := make([]byte, 0, len(value))
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch c {
		case '+':
			out = append(out, ' ')
		case '%':
			if i+2 >= len(value) {
				return "", false
			}
			hi, ok1 := unhex(value[i+1])
			lo, ok2 := unhex(value[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			out = append(out, hi<<4|lo)
			i += 2
		default:
			out = append(out, c)
		}
	}
	return string(out), true
}

// unescape20 percent-decodes value into dst, which it must fill exactly.
func unescape20(dst *[20]byte, value string, wrongSize error) error {
	n := 0
	for i := 0; i < len(value); i++ {
		if n == len(dst) {
			return wrongSize
		}
		c := value[i]
		switch c {
		case '+':
			c = ' '
		case '%':
			if i+2 >= len(value) {
				return ErrMalformedQuery
			}
			hi, ok1 := unhex(value[i+1])
			lo, ok2 := unhex(value[i+2])
			if !ok1 || !ok2 {
				return ErrMalformedQuery
			}
			c = hi<<4 | lo
			i += 2
		}
		dst[n] = c
		n++
	}
	if n != len(dst) {
		return wrongSize
	}
	return nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// AppendQueryEscape appends s percent-encoded for a query value: every byte
// but the unreserved ones (RFC 3986) is escaped, which is how clients send
// binary info_hash and peer_id.
func AppendQueryEscape(dst []byte, s string) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

// AppendAnnounceQuery appends q as a raw announce query, the client side of
// ParseAnnounceQuery (for tests and the load generator). NumWant is sent
// only when non-negative, key, passkey and ip only when set, and compact
// and no_peer_id as 1/0.
func AppendAnnounceQuery(dst []byte, q *AnnounceQuery) []byte {
	dst = append(dst, "info_hash="...)
	dst = AppendQueryEscape(dst, string(q.InfoHash[:]))
	dst = append(dst, "&peer_id="...)
	dst = AppendQueryEscape(dst, string(q.PeerID[:]))
	dst = append(dst, "&port="...)
	dst = strconv.AppendUint(dst, uint64(q.Port), 10)
	dst = append(dst, "&uploaded="...)
	dst = strconv.AppendUint(dst, q.Uploaded, 10)
	dst = append(dst, "&downloaded="...)
	dst = strconv.AppendUint(dst, q.Downloaded, 10)
	dst = append(dst, "&left="...)
	dst = strconv.AppendUint(dst, q.Left, 10)
	if q.Event != EventNone {
		dst = append(dst, "&event="...)
		dst = append(dst, q.Event.String()...)
	}
	if q.Compact {
		dst = append(dst, "&compact=1"...)
	} else {
		dst = append(dst, "&compact=0"...)
	}
	if q.NoPeerID {
		dst = append(dst, "&no_peer_id=1"...)
	}
	if q.NumWant >= 0 {
		dst = append(dst, "&numwant="...)
		dst = strconv.AppendInt(dst, int64(q.NumWant), 10)
	}
	if q.Key != "" {
		dst = append(dst, "&key="...)
		dst = AppendQueryEscape(dst, q.Key)
	}
	if q.Passkey != "" {
		dst = append(dst, "&passkey="...)
		dst = AppendQueryEscape(dst, q.Passkey)
	}
	if q.IP.IsValid() {
		dst = append(dst, "&ip="...)
		dst = q.IP.AppendTo(dst)
	}
	return dst
}
