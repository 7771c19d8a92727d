// Package opentrackertest runs Debian's opentracker on 127.0.0.1 as an
// external tracker for tests and benchmarks (package opentracker starts
// it), and announces fake peers to it over UDP from other loopback source
// addresses (127.0.0.2 and up, so each peer has its own IP; every packet
// goes to 127.0.0.1).
package opentrackertest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/hoardproject/hoard/internal/opentracker"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// Tracker is a running opentracker.
type Tracker struct {
	*opentracker.Process
}

// Start runs opentracker whitelisting hashes until the test ends. It
// fails the test, with the reason, when the binary is missing or it does
// not start.
func Start(tb testing.TB, hashes [][20]byte) *Tracker {
	tb.Helper()
	p, err := opentracker.Start(context.Background(), opentracker.Binary, tb.TempDir(), hashes)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	return &Tracker{p}
}

// PeerAddr is the n-th fake peer's address (n >= 0): 127.0.0.(2+n) while
// that fits, then on into 127.0.x.y, port 10000+n%50000.
func PeerAddr(n int) netip.AddrPort {
	ip := 2 + n
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(ip >> 16), byte(ip >> 8), byte(ip)}), uint16(10000+n%50000))
}

// Announce announces fake peers from..from+n-1 (PeerAddr) as leechers of
// hash to the tracker over UDP, each from its own source address.
func (t *Tracker) Announce(tb testing.TB, hash [20]byte, from, n int) {
	tb.Helper()
	for i := from; i < from+n; i++ {
		if err := t.Process.Announce(hash, PeerAddr(i), wire.EventStarted); err != nil {
			tb.Fatalf("announcing fake peer %d: %v", i, err)
		}
	}
}
