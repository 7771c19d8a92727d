package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"slices"
)

// ProtocolID is the magic connection id of a BEP 15 connect request.
const ProtocolID uint64 = 0x41727101980

// Action is a BEP 15 action.
type Action uint32

// The BEP 15 actions.
const (
	ActionConnect  Action = 0
	ActionAnnounce Action = 1
	ActionScrape   Action = 2
	ActionError    Action = 3
)

// Packet sizes and limits.
const (
	// UDPHeaderLen is connection id + action + transaction id: the least a
	// packet must have to be answered at all.
	UDPHeaderLen = 16
	// UDPAnnounceLen is an announce request without BEP 41 options.
	UDPAnnounceLen = 98
	// MaxUDPScrapeHashes is how many hashes fit a scrape request in one
	// 1500-byte Ethernet frame; opentracker answers at most 74 too.
	MaxUDPScrapeHashes = 74
	// MaxUDPPeers4 and MaxUDPPeers6 keep an announce response within one
	// 1500-byte frame (opentracker's limits).
	MaxUDPPeers4 = 200
	MaxUDPPeers6 = 74
	// maxURLData bounds concatenated BEP 41 URL data.
	maxURLData = 1024
)

// BEP 41 option types.
const (
	optEndOfOptions = 0
	optNOP          = 1
	optURLData      = 2
)

// UDP parse errors. ErrUDPTooShort means the packet has no transaction id
// and must be dropped without a reply; the others are answered with an
// error packet carrying their text.
var (
	ErrUDPTooShort         = errors.New("packet shorter than a UDP tracker header")
	ErrUDPBadProtocolID    = errors.New("connect request without the BEP 15 protocol id")
	ErrUDPTruncated        = errors.New("truncated packet")
	ErrUDPBadAction        = errors.New("unknown action")
	ErrUDPBadEvent         = errors.New("unknown event")
	ErrUDPBadOption        = errors.New("truncated BEP 41 option")
	ErrUDPURLDataTooLong   = errors.New("BEP 41 URL data too long")
	ErrUDPNoInfoHash       = errors.New("scrape without info hashes")
	ErrUDPTooManyHashes    = errors.New("too many info hashes in one scrape")
	ErrUDPScrapeMisaligned = errors.New("scrape body is not a whole number of 20-byte info hashes")
)

// UDPRequest is a parsed BEP 15 request. Which fields are set depends on
// Action. Reuse one per reader goroutine: InfoHashes and the URL-data
// buffer keep their capacity.
type UDPRequest struct {
	ConnectionID  uint64
	Action        Action
	TransactionID uint32

	// Announce.
	InfoHash   [20]byte
	PeerID     [20]byte
	Downloaded uint64
	Left       uint64
	Uploaded   uint64
	Event      Event
	IPv4       [4]byte // 0.0.0.0 unless the client names an address
	Key        uint32
	NumWant    int32 // -1 asks for the default
	Port       uint16
	// URLData is the concatenated BEP 41 URL-data options, e.g.
	// "/<passkey>/announce". It may alias the packet.
	URLData []byte

	// Scrape. BEP 41 options cannot follow a scrape (its length is the
	// count of hashes), so a UDP scrape never carries a passkey.
	InfoHashes [][20]byte

	urlBuf   []byte
	urlInBuf bool // URLData is urlBuf, not a slice of the packet
}

// ParseUDPRequest parses one request packet into r. For every error but
// ErrUDPTooShort, r.Action and r.TransactionID are set so the caller can
// send an error packet.
func ParseUDPRequest(packet []byte, r *UDPRequest) error {
	r.URLData = nil
	r.urlInBuf = false
	r.InfoHashes = r.InfoHashes[:0]
	if len(packet) < UDPHeaderLen {
		return ErrUDPTooShort
	}
	r.ConnectionID = binary.BigEndian.Uint64(packet[0:8])
	r.Action = Action(binary.BigEndian.Uint32(packet[8:12]))
	r.TransactionID = binary.BigEndian.Uint32(packet[12:16])
	switch r.Action {
	case ActionConnect:
		if r.ConnectionID != ProtocolID {
			return ErrUDPBadProtocolID
		}
		return nil
	case ActionAnnounce:
		return r.parseAnnounce(packet)
	case ActionScrape:
		body := packet[UDPHeaderLen:]
		switch {
		case len(body) == 0:
			return ErrUDPNoInfoHash
		case len(body)%20 != 0:
			return ErrUDPScrapeMisaligned
		case len(body)/20 > MaxUDPScrapeHashes:
			return ErrUDPTooManyHashes
		}
		for i := 0; i < len(body); i += 20 {
			r.InfoHashes = append(r.InfoHashes, [20]byte(body[i:i+20]))
		}
		return nil
	}
	return ErrUDPBadAction
}

func (r *UDPRequest) parseAnnounce(p []byte) error {
	if len(p) < UDPAnnounceLen {
		return ErrUDPTruncated
	}
	r.InfoHash = [20]byte(p[16:36])
	r.PeerID = [20]byte(p[36:56])
	r.Downloaded = binary.BigEndian.Uint64(p[56:64])
	r.Left = binary.BigEndian.Uint64(p[64:72])
	r.Uploaded = binary.BigEndian.Uint64(p[72:80])
	event := binary.BigEndian.Uint32(p[80:84])
	if event > uint32(EventStopped) {
		return ErrUDPBadEvent
	}
	r.Event = Event(event)
	r.IPv4 = [4]byte(p[84:88])
	r.Key = binary.BigEndian.Uint32(p[88:92])
	r.NumWant = int32(binary.BigEndian.Uint32(p[92:96]))
	r.Port = binary.BigEndian.Uint16(p[96:98])
	return r.parseOptions(p[UDPAnnounceLen:])
}

// parseOptions reads BEP 41 options. Unknown option types carry a length
// byte and are skipped; URL-data options are concatenated.
func (r *UDPRequest) parseOptions(opts []byte) error {
	for i := 0; i < len(opts); {
		switch opts[i] {
		case optEndOfOptions:
			return nil
		case optNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return ErrUDPBadOption
		}
		n := int(opts[i+1])
		if i+2+n > len(opts) {
			return ErrUDPBadOption
		}
		if opts[i] == optURLData {
			if err := r.addURLData(opts[i+2 : i+2+n]); err != nil {
				return err
			}
		}
		i += 2 + n
	}
	return nil
}

func (r *UDPRequest) addURLData(chunk []byte) error {
	if len(r.URLData)+len(chunk) > maxURLData {
		return ErrUDPURLDataTooLong
	}
	switch {
	case len(chunk) == 0:
	case len(r.URLData) == 0:
		r.URLData = chunk // the common case: one option, no copy
	default:
		if !r.urlInBuf {
			r.urlBuf = append(r.urlBuf[:0], r.URLData...)
			r.urlInBuf = true
		}
		r.urlBuf = append(r.urlBuf, chunk...)
		r.URLData = r.urlBuf
	}
	return nil
}

// AppendUDPRequest appends r as a request packet: the client side of
// ParseUDPRequest, for tests and the load generator. A connect request
// always carries ProtocolID; an announce carries r.URLData as BEP 41
// options of up to 255 bytes each.
func AppendUDPRequest(dst []byte, r *UDPRequest) []byte {
	connID := r.ConnectionID
	if r.Action == ActionConnect {
		connID = ProtocolID
	}
	dst = binary.BigEndian.AppendUint64(dst, connID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.Action))
	dst = binary.BigEndian.AppendUint32(dst, r.TransactionID)
	switch r.Action {
	case ActionAnnounce:
		dst = append(dst, r.InfoHash[:]...)
		dst = append(dst, r.PeerID[:]...)
		dst = binary.BigEndian.AppendUint64(dst, r.Downloaded)
		dst = binary.BigEndian.AppendUint64(dst, r.Left)
		dst = binary.BigEndian.AppendUint64(dst, r.Uploaded)
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.Event))
		dst = append(dst, r.IPv4[:]...)
		dst = binary.BigEndian.AppendUint32(dst, r.Key)
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.NumWant))
		dst = binary.BigEndian.AppendUint16(dst, r.Port)
		for rest := r.URLData; len(rest) > 0; {
			n := min(len(rest), math.MaxUint8)
			dst = append(dst, optURLData, byte(n))
			dst = append(dst, rest[:n]...)
			rest = rest[n:]
		}
	case ActionScrape:
		for _, h := range r.InfoHashes {
			dst = append(dst, h[:]...)
		}
	}
	return dst
}

func appendUDPHeader(dst []byte, action Action, tx uint32) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(action))
	return binary.BigEndian.AppendUint32(dst, tx)
}

// AppendUDPConnect appends a connect response.
func AppendUDPConnect(dst []byte, tx uint32, connID uint64) []byte {
	dst = appendUDPHeader(dst, ActionConnect, tx)
	return binary.BigEndian.AppendUint64(dst, connID)
}

// AppendUDPAnnounce appends an announce response. Only peers of the
// socket's family are written (BEP 15: 6-byte peers on IPv4, 18-byte on
// IPv6), at most MaxUDPPeers4 or MaxUDPPeers6 of them.
func AppendUDPAnnounce[L PeerList](dst []byte, tx uint32, r *AnnounceReply, peers L, ipv6 bool) []byte {
	dst = appendUDPHeader(dst, ActionAnnounce, tx)
	dst = binary.BigEndian.AppendUint32(dst, uint32(clampInt32(r.Interval)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(clampInt32(r.Incomplete)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(clampInt32(r.Complete)))
	limit := MaxUDPPeers4
	if ipv6 {
		limit = MaxUDPPeers6
	}
	n := min(peers.Len(), limit)
	if ipv6 {
		dst = slices.Grow(dst, 18*n)
	} else {
		dst = slices.Grow(dst, 6*n)
	}
	for i, written := 0, 0; i < peers.Len() && written < limit; i++ {
		_, ap := peers.At(i)
		if addr, is4, ok := peerAddr(ap); ok && is4 != ipv6 {
			dst = appendCompact(dst, addr, is4, ap.Port())
			written++
		}
	}
	return dst
}

// AppendUDPScrape appends a scrape response: one entry per requested hash,
// in request order.
func AppendUDPScrape(dst []byte, tx uint32, counts []ScrapeCounts) []byte {
	dst = appendUDPHeader(dst, ActionScrape, tx)
	for _, c := range counts {
		dst = binary.BigEndian.AppendUint32(dst, uint32(clampInt32(c.Complete)))
		dst = binary.BigEndian.AppendUint32(dst, uint32(clampInt32(c.Downloaded)))
		dst = binary.BigEndian.AppendUint32(dst, uint32(clampInt32(c.Incomplete)))
	}
	return dst
}

// AppendUDPError appends an error response; clients show message to the
// user.
func AppendUDPError(dst []byte, tx uint32, message string) []byte {
	dst = appendUDPHeader(dst, ActionError, tx)
	return append(dst, message...)
}

func clampInt32(n int64) int32 {
	return int32(min(max(n, 0), math.MaxInt32))
}

// UDPResponse is a parsed response packet, the client side of the
// Append* writers (for tests and the load generator).
type UDPResponse struct {
	Action        Action
	TransactionID uint32
	ConnectionID  uint64 // connect
	Interval      int32  // announce
	Leechers      int32  // announce
	Seeders       int32  // announce
	// Peers are the announce's compact peers, 6 or 18 bytes each depending
	// on the socket family; they alias the packet.
	Peers   []byte
	Scrape  []ScrapeCounts // scrape, reused across parses
	Message string         // error
}

// ParseUDPResponse parses one response packet into r.
func ParseUDPResponse(packet []byte, r *UDPResponse) error {
	r.Peers = nil
	r.Scrape = r.Scrape[:0]
	r.Message = ""
	if len(packet) < 8 {
		return ErrUDPTooShort
	}
	r.Action = Action(binary.BigEndian.Uint32(packet[0:4]))
	r.TransactionID = binary.BigEndian.Uint32(packet[4:8])
	body := packet[8:]
	switch r.Action {
	case ActionConnect:
		if len(body) < 8 {
			return ErrUDPTruncated
		}
		r.ConnectionID = binary.BigEndian.Uint64(body)
	case ActionAnnounce:
		if len(body) < 12 {
			return ErrUDPTruncated
		}
		r.Interval = int32(binary.BigEndian.Uint32(body[0:4]))
		r.Leechers = int32(binary.BigEndian.Uint32(body[4:8]))
		r.Seeders = int32(binary.BigEndian.Uint32(body[8:12]))
		r.Peers = body[12:]
	case ActionScrape:
		if len(body)%12 != 0 {
			return ErrUDPTruncated
		}
		for i := 0; i < len(body); i += 12 {
			r.Scrape = append(r.Scrape, ScrapeCounts{
				Complete:   int64(binary.BigEndian.Uint32(body[i : i+4])),
				Downloaded: int64(binary.BigEndian.Uint32(body[i+4 : i+8])),
				Incomplete: int64(binary.BigEndian.Uint32(body[i+8 : i+12])),
			})
		}
	case ActionError:
		r.Message = string(body)
	default:
		return ErrUDPBadAction
	}
	return nil
}

// ParseCompactPeers decodes compact peers (6 bytes each, or 18 with ipv6)
// and appends them to dst; a trailing partial entry is an error.
func ParseCompactPeers(dst []netip.AddrPort, b []byte, ipv6 bool) ([]netip.AddrPort, error) {
	size := 6
	if ipv6 {
		size = 18
	}
	if len(b)%size != 0 {
		return dst, ErrUDPTruncated
	}
	for i := 0; i < len(b); i += size {
		var addr netip.Addr
		if ipv6 {
			addr = netip.AddrFrom16([16]byte(b[i : i+16]))
		} else {
			addr = netip.AddrFrom4([4]byte(b[i : i+4]))
		}
		port := binary.BigEndian.Uint16(b[i+size-2 : i+size])
		dst = append(dst, netip.AddrPortFrom(addr, port))
	}
	return dst, nil
}
