package swarm

import (
	"fmt"
	"net/netip"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Peers are stored as entries ready to send: one byte N, the 20-byte peer
// id, then the N-byte compact address (BEP 23 / BEP 7: 4 or 16 address
// bytes, then the port big-endian). announce.lua returns the picked
// entries concatenated, so choosing peers costs the script no formatting.

// compactAddr packs an address; IPv4-mapped IPv6 addresses are stored as
// IPv4 so one client is one peer whichever socket it came in on.
func compactAddr(addr netip.AddrPort) []byte {
	ip := addr.Addr().Unmap()
	out := ip.AsSlice()
	port := addr.Port()
	return append(out, byte(port>>8), byte(port))
}

// peerEntry is a peer as the role hashes store it.
func peerEntry(id bittorrent.PeerID, addr netip.AddrPort) []byte {
	compact := compactAddr(addr)
	entry := make([]byte, 0, 1+len(id)+len(compact))
	entry = append(entry, byte(len(compact)))
	entry = append(entry, id[:]...)
	return append(entry, compact...)
}

// parseCompactAddr unpacks a stored address.
func parseCompactAddr(b string) (netip.AddrPort, bool) {
	switch len(b) {
	case 6:
		ip := netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[3]})
		return netip.AddrPortFrom(ip, uint16(b[4])<<8|uint16(b[5])), true
	case 18:
		var a [16]byte
		copy(a[:], b[:16])
		return netip.AddrPortFrom(netip.AddrFrom16(a), uint16(b[16])<<8|uint16(b[17])), true
	}
	return netip.AddrPort{}, false
}

// unpackPeers reads announce.lua's concatenated peer entries.
func unpackPeers(packed string) ([]bittorrent.Peer, error) {
	entries, err := splitEntries(packed)
	if err != nil {
		return nil, err
	}
	peers := make([]bittorrent.Peer, 0, len(entries))
	for _, entry := range entries {
		if peer, ok := entryPeer(entry); ok {
			peers = append(peers, peer)
		}
	}
	return peers, nil
}

// splitEntries cuts concatenated peer entries (announce.lua's and
// refresh.lua's replies) into one string per entry.
func splitEntries(packed string) ([]string, error) {
	if packed == "" {
		return nil, nil
	}
	const idLen = len(bittorrent.PeerID{})
	entries := make([]string, 0, len(packed)/(1+idLen+6))
	for i := 0; i < len(packed); {
		end := i + 1 + idLen + int(packed[i])
		if end > len(packed) {
			return nil, fmt.Errorf("%w: truncated peer list", errBadReply)
		}
		entries = append(entries, packed[i:end])
		i = end
	}
	return entries, nil
}

// entryPeer reads one stored entry; false for one announce.lua never
// writes, which is never handed out.
func entryPeer(entry string) (bittorrent.Peer, bool) {
	const idLen = len(bittorrent.PeerID{})
	var peer bittorrent.Peer
	if len(entry) < 1+idLen {
		return peer, false
	}
	addr, ok := parseCompactAddr(entry[1+idLen:])
	if !ok {
		return peer, false
	}
	copy(peer.ID[:], entry[1:1+idLen])
	peer.Addr = addr
	return peer, true
}

// compactLen is the stored compact length of the peers family wants (the
// first byte of a peer entry), 0 for any family.
func compactLen(family bittorrent.PeerFamily) int {
	switch family {
	case bittorrent.IPv4Only:
		return 6
	case bittorrent.IPv6Only:
		return 18
	}
	return 0
}
