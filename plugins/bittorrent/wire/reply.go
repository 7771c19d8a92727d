package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
)

// The client side of an HTTP announce: scoring announces to external
// trackers the operator registered and reads their bencoded replies. A
// reply is untrusted input, so the reader below is a bounded, allocation-
// light walk that only understands what it needs (failure reason,
// interval, complete, incomplete, peers, peers6) and skips the rest with
// a nesting limit; the caller bounds the body's size.

// HTTPAnnounceResponse is a parsed bencoded announce reply.
type HTTPAnnounceResponse struct {
	// FailureReason is the tracker's "failure reason", if any; the other
	// fields are then unset.
	FailureReason string
	Interval      int64
	Complete      int64 // seeders
	Incomplete    int64 // leechers
	// Peers are the peers of "peers" (compact or a list of dictionaries)
	// and "peers6", appended to the slice the caller passed in. Entries
	// of a dictionary list whose ip is not a literal address (a host
	// name) are skipped: a reply must not make us resolve names.
	Peers []netip.AddrPort
	// Skipped counts those skipped entries.
	Skipped int
	// Over counts the peers past the cap the caller set, not kept.
	Over int
}

// Reply parse errors.
var (
	ErrReplyNotDict      = errors.New("announce reply is not a bencoded dictionary")
	ErrReplyTruncated    = errors.New("announce reply is truncated or malformed")
	ErrReplyTooDeep      = errors.New("announce reply nests too deep")
	ErrReplyTrailingData = errors.New("announce reply has data after its dictionary")
	ErrReplyBadPeers     = errors.New("announce reply's peers are malformed")
)

// maxReplyDepth bounds the nesting of skipped values.
const maxReplyDepth = 32

// ParseHTTPAnnounceResponse parses a bencoded announce reply into r. The
// peers are appended to r.Peers (reset it to reuse its capacity); at most
// maxPeers are kept, the rest only counted in r.Skipped (maxPeers <= 0
// keeps all).
func ParseHTTPAnnounceResponse(body []byte, r *HTTPAnnounceResponse, maxPeers int) error {
	r.FailureReason, r.Interval, r.Complete, r.Incomplete, r.Skipped, r.Over = "", 0, 0, 0, 0, 0
	p := replyParser{b: body, maxPeers: maxPeers}
	if len(body) == 0 || body[0] != 'd' {
		return ErrReplyNotDict
	}
	p.i = 1
	for {
		key, done, err := p.dictKey()
		if err != nil {
			return err
		}
		if done {
			break
		}
		switch string(key) {
		case "failure reason":
			v, err := p.str()
			if err != nil {
				return err
			}
			r.FailureReason = string(v)
		case "interval":
			r.Interval, err = p.int()
		case "complete":
			r.Complete, err = p.int()
		case "incomplete":
			r.Incomplete, err = p.int()
		case "peers":
			err = p.peers(r, false)
		case "peers6":
			err = p.peers(r, true)
		default:
			err = p.skip(0)
		}
		if err != nil {
			return err
		}
	}
	if len(bytes.TrimSpace(p.b[p.i:])) > 0 {
		return ErrReplyTrailingData
	}
	return nil
}

type replyParser struct {
	b        []byte
	i        int
	maxPeers int
}

// dictKey reads the next key of the dictionary being walked; done is
// true, with its closing 'e' read, at its end. The caller reads the value.
func (p *replyParser) dictKey() (key []byte, done bool, err error) {
	if p.i >= len(p.b) {
		return nil, false, ErrReplyTruncated
	}
	if p.b[p.i] == 'e' {
		p.i++
		return nil, true, nil
	}
	key, err = p.str()
	return key, false, err
}

// str reads <len>:<bytes>.
func (p *replyParser) str() ([]byte, error) {
	colon := bytes.IndexByte(p.b[p.i:min(len(p.b), p.i+12)], ':')
	if colon < 1 {
		return nil, ErrReplyTruncated
	}
	n, err := strconv.Atoi(string(p.b[p.i : p.i+colon]))
	if err != nil || n < 0 || n > len(p.b)-p.i-colon-1 {
		return nil, ErrReplyTruncated
	}
	start := p.i + colon + 1
	p.i = start + n
	return p.b[start:p.i], nil
}

// int reads i<n>e.
func (p *replyParser) int() (int64, error) {
	if p.i >= len(p.b) || p.b[p.i] != 'i' {
		return 0, ErrReplyTruncated
	}
	end := bytes.IndexByte(p.b[p.i+1:min(len(p.b), p.i+23)], 'e')
	if end < 1 {
		return 0, ErrReplyTruncated
	}
	n, err := strconv.ParseInt(string(p.b[p.i+1:p.i+1+end]), 10, 64)
	if err != nil {
		return 0, ErrReplyTruncated
	}
	p.i += end + 2
	return n, nil
}

// skip passes over one value of any type.
func (p *replyParser) skip(depth int) error {
	if depth > maxReplyDepth {
		return ErrReplyTooDeep
	}
	if p.i >= len(p.b) {
		return ErrReplyTruncated
	}
	switch c := p.b[p.i]; {
	case c == 'i':
		_, err := p.int()
		return err
	case c == 'l' || c == 'd':
		p.i++
		for {
			if p.i >= len(p.b) {
				return ErrReplyTruncated
			}
			if p.b[p.i] == 'e' {
				p.i++
				return nil
			}
			if c == 'd' {
				if _, err := p.str(); err != nil {
					return err
				}
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
		}
	case c >= '0' && c <= '9':
		_, err := p.str()
		return err
	}
	return ErrReplyTruncated
}

func (p *replyParser) keep(r *HTTPAnnounceResponse, ap netip.AddrPort) {
	if p.maxPeers > 0 && len(r.Peers) >= p.maxPeers {
		r.Over++
		return
	}
	r.Peers = append(r.Peers, ap)
}

// peers reads a compact string (6 or 18 bytes a peer) or, for "peers", a
// list of {"ip":…, "port":…} dictionaries.
func (p *replyParser) peers(r *HTTPAnnounceResponse, v6 bool) error {
	if p.i >= len(p.b) {
		return ErrReplyTruncated
	}
	if p.b[p.i] != 'l' {
		s, err := p.str()
		if err != nil {
			return err
		}
		size := 6
		if v6 {
			size = 18
		}
		if len(s)%size != 0 {
			return ErrReplyBadPeers
		}
		for i := 0; i < len(s); i += size {
			var addr netip.Addr
			if v6 {
				addr = netip.AddrFrom16([16]byte(s[i : i+16])).Unmap()
			} else {
				addr = netip.AddrFrom4([4]byte(s[i : i+4]))
			}
			p.keep(r, netip.AddrPortFrom(addr, binary.BigEndian.Uint16(s[i+size-2:i+size])))
		}
		return nil
	}
	if v6 {
		return ErrReplyBadPeers
	}
	p.i++
	for {
		if p.i >= len(p.b) {
			return ErrReplyTruncated
		}
		if p.b[p.i] == 'e' {
			p.i++
			return nil
		}
		if p.b[p.i] != 'd' {
			return ErrReplyBadPeers
		}
		p.i++
		var ip []byte
		port, hasPort := int64(-1), false
		for {
			key, done, err := p.dictKey()
			if err != nil {
				return err
			}
			if done {
				break
			}
			switch string(key) {
			case "ip":
				ip, err = p.str()
			case "port":
				port, err = p.int()
				hasPort = true
			default:
				err = p.skip(1)
			}
			if err != nil {
				return err
			}
		}
		addr, err := netip.ParseAddr(string(ip))
		if !hasPort || port < 0 || port > 65535 || err != nil || addr.Zone() != "" {
			r.Skipped++
			continue
		}
		p.keep(r, netip.AddrPortFrom(addr.Unmap(), uint16(port)))
	}
}
