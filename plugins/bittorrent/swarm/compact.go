package swarm

import (
	"net/netip"
)

// Peers are stored as their compact form (BEP 23 / BEP 7): 4 or 16
// address bytes, then the port big-endian. The listeners render exactly
// these bytes, so a stored peer needs no work beyond a copy.

// compactAddr packs an address; IPv4-mapped IPv6 addresses are stored as
// IPv4 so one client is one peer whichever socket it came in on.
func compactAddr(addr netip.AddrPort) []byte {
	ip := addr.Addr().Unmap()
	out := ip.AsSlice()
	port := addr.Port()
	return append(out, byte(port>>8), byte(port))
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
