package wire

import (
	"bytes"
	"net/netip"
	"slices"
)

// Peer is one peer to hand out.
type Peer struct {
	ID   [20]byte
	Addr netip.AddrPort
}

// PeerList lets a caller render its own peer type without copying it into
// a []Peer first. The writers take it as a type parameter, so passing a
// slice type does not box it.
type PeerList interface {
	Len() int
	At(i int) (id [20]byte, addr netip.AddrPort)
}

// Peers is a PeerList over a slice.
type Peers []Peer

// Len is the number of peers.
func (p Peers) Len() int { return len(p) }

// At returns the i-th peer.
func (p Peers) At(i int) ([20]byte, netip.AddrPort) { return p[i].ID, p[i].Addr }

// AnnounceReply is the part of an announce response that is not peers.
// Durations are in seconds, as the protocol carries them.
type AnnounceReply struct {
	Interval    int64
	MinInterval int64
	Complete    int64 // seeders
	Incomplete  int64 // leechers
	Downloaded  int64 // snatches
}

// ScrapeCounts is one torrent's scrape counts (BEP 48).
type ScrapeCounts struct {
	Complete   int64
	Incomplete int64
	Downloaded int64
}

// peerAddr returns the address to render and whether it is IPv4;
// ok is false for an address that cannot be rendered (the zero value).
// IPv4-mapped IPv6 addresses are IPv4 peers.
func peerAddr(ap netip.AddrPort) (addr netip.Addr, is4, ok bool) {
	addr = ap.Addr()
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	return addr, addr.Is4(), addr.IsValid()
}

// AppendCompactPeer appends the 6-byte (IPv4) or 18-byte (IPv6) compact
// form of addr (BEP 23, BEP 7). An IPv4-mapped IPv6 address is written as
// IPv4; the zero AddrPort writes nothing.
func AppendCompactPeer(dst []byte, ap netip.AddrPort) []byte {
	addr, is4, ok := peerAddr(ap)
	if !ok {
		return dst
	}
	return appendCompact(dst, addr, is4, ap.Port())
}

func appendCompact(dst []byte, addr netip.Addr, is4 bool, port uint16) []byte {
	if is4 {
		a := addr.As4()
		return append(dst, a[0], a[1], a[2], a[3], byte(port>>8), byte(port))
	}
	a := addr.As16()
	dst = append(dst, a[:]...)
	return append(dst, byte(port>>8), byte(port))
}

// AppendHTTPAnnounce appends a complete bencoded announce response. With
// compact, IPv4 peers go in "peers" (6 bytes each) and IPv6 peers in
// "peers6" (18 bytes each, present only when there are some); otherwise
// "peers" is a list of {ip, peer id, port} dictionaries with both families,
// without "peer id" when noPeerID. "downloaded" is included as opentracker
// does. Peers with an invalid address are skipped.
func AppendHTTPAnnounce[L PeerList](dst []byte, r *AnnounceReply, peers L, compact, noPeerID bool) []byte {
	dst = append(dst, "d8:complete"...)
	dst = AppendInt(dst, r.Complete)
	dst = append(dst, "10:downloaded"...)
	dst = AppendInt(dst, r.Downloaded)
	dst = append(dst, "10:incomplete"...)
	dst = AppendInt(dst, r.Incomplete)
	dst = append(dst, "8:interval"...)
	dst = AppendInt(dst, r.Interval)
	dst = append(dst, "12:min interval"...)
	dst = AppendInt(dst, r.MinInterval)
	n := peers.Len()
	if !compact {
		dst = append(dst, "5:peersl"...)
		for i := range n {
			id, ap := peers.At(i)
			addr, _, ok := peerAddr(ap)
			if !ok {
				continue
			}
			var ipText [64]byte
			ip := addr.WithZone("").AppendTo(ipText[:0])
			dst = append(dst, "d2:ip"...)
			dst = AppendBytes(dst, ip)
			if !noPeerID {
				dst = append(dst, "7:peer id20:"...)
				dst = append(dst, id[:]...)
			}
			dst = append(dst, "4:port"...)
			dst = AppendInt(dst, int64(ap.Port()))
			dst = append(dst, 'e')
		}
		return append(dst, "ee"...)
	}
	var n4, n6 int
	for i := range n {
		_, ap := peers.At(i)
		if _, is4, ok := peerAddr(ap); ok {
			if is4 {
				n4++
			} else {
				n6++
			}
		}
	}
	dst = slices.Grow(dst, 6*n4+18*n6+32)
	dst = append(dst, "5:peers"...)
	dst = AppendStringHeader(dst, 6*n4)
	dst = appendCompactFamily(dst, peers, true)
	if n6 > 0 {
		dst = append(dst, "6:peers6"...)
		dst = AppendStringHeader(dst, 18*n6)
		dst = appendCompactFamily(dst, peers, false)
	}
	return append(dst, 'e')
}

func appendCompactFamily[L PeerList](dst []byte, peers L, want4 bool) []byte {
	for i := range peers.Len() {
		_, ap := peers.At(i)
		if addr, is4, ok := peerAddr(ap); ok && is4 == want4 {
			dst = appendCompact(dst, addr, is4, ap.Port())
		}
	}
	return dst
}

// AppendHTTPScrape appends a complete bencoded scrape response (BEP 48):
// d5:filesd<hash>d8:complete…10:downloaded…10:incomplete…eee. hashes must
// be sorted and unique (SortUniqueHashes) because they are dictionary keys;
// counts[i] belongs to hashes[i].
func AppendHTTPScrape(dst []byte, hashes [][20]byte, counts []ScrapeCounts) []byte {
	dst = append(dst, ScrapeHead...)
	for i := range hashes {
		dst = AppendScrapeEntry(dst, hashes[i], counts[i])
	}
	return append(dst, ScrapeTail...)
}

// A scrape response is ScrapeHead, one AppendScrapeEntry per torrent in
// info-hash byte order, then ScrapeTail, so a full scrape can be written
// as a stream.
const (
	ScrapeHead = "d5:filesd"
	ScrapeTail = "ee"
)

// AppendScrapeEntry appends one torrent's entry of a scrape's files
// dictionary.
func AppendScrapeEntry(dst []byte, hash [20]byte, counts ScrapeCounts) []byte {
	dst = append(dst, "20:"...)
	dst = append(dst, hash[:]...)
	dst = append(dst, "d8:complete"...)
	dst = AppendInt(dst, counts.Complete)
	dst = append(dst, "10:downloaded"...)
	dst = AppendInt(dst, counts.Downloaded)
	dst = append(dst, "10:incomplete"...)
	dst = AppendInt(dst, counts.Incomplete)
	return append(dst, 'e')
}

// SortUniqueHashes sorts hashes by raw bytes and drops duplicates, in
// place, as a bencoded dictionary's keys must be.
func SortUniqueHashes(hashes [][20]byte) [][20]byte {
	slices.SortFunc(hashes, func(a, b [20]byte) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(hashes)
}
