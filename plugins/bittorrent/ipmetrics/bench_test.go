package ipmetrics_test

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

// BenchmarkObserve is what the metrics add to an announce's own path:
// Observe from parallel goroutines, as the listeners call it, with the
// batcher draining into a real redis-server. The loop offers far more
// than any announce rate, so the queue overflows and most observations
// are dropped: the figure is the cost of the call, not of registering.
func BenchmarkObserve(b *testing.B) {
	backend := redistest.Backends()[0]
	store := ipmetrics.NewStore(backend.Client, nil, 0)
	rec := ipmetrics.NewRecorder(ipmetrics.RecorderConfig{Store: store, Logger: quiet})
	if err := rec.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer rec.Stop()
	var next atomic.Uint32
	hash := bittorrent.InfoHash{1}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1) % 10_000
			rec.Observe(netip.AddrFrom4([4]byte{11, byte(n >> 16), byte(n >> 8), byte(n)}), hash)
		}
	})
}
