package bittorrent

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
)

// BenchmarkGuardAllowAnnounce is the guard's cost on the announce path:
// one token taken from a known address's bucket, run in parallel over
// many addresses as the listeners' workers do.
func BenchmarkGuardAllowAnnounce(b *testing.B) {
	for _, addresses := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("addresses=%d", addresses), func(b *testing.B) {
			g, err := NewGuard(GuardConfig{AnnounceRate: 1e9, AnnounceBurst: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Uint32
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) * 7919
				for pb.Next() {
					i++
					n := i % addresses
					g.allowAnnounce(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}))
				}
			})
		})
	}
}

// BenchmarkGuardMemory reports the heap the guard holds per address when
// it is full (the "addresses" setting's cost).
func BenchmarkGuardMemory(b *testing.B) {
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g, err := NewGuard(GuardConfig{})
		if err != nil {
			b.Fatal(err)
		}
		for i := range DefaultGuardAddresses {
			g.allowAnnounce(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(g.tracked()), "B/address")
		b.ReportMetric(float64(g.tracked()), "addresses")
		runtime.KeepAlive(g)
	}
}
