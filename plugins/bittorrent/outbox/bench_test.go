package outbox_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// BenchmarkAppend: one op is a batch of 100 events with fresh keys (one
// script call), on each backend; batch=1 is what one event per call costs
// (docs/at-least-once.md compares it with the host's event log).
func BenchmarkAppend(b *testing.B) {
	for _, backend := range redistest.Backends() {
		for _, batch := range []int{100, 1} {
			b.Run(fmt.Sprintf("%s/batch=%d", backend.Name, batch), func(b *testing.B) {
				ctx := context.Background()
				require.NoError(b, redistest.Flush(ctx, backend))
				ob := outbox.New(backend.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet})
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					require.NoError(b, ob.Append(ctx, events(fmt.Sprint("b", i), batch)))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
			})
		}
	}
}

// BenchmarkDeliver: one op is one DeliverOnce of a full batch (100
// events: claim, signed POST to a real receiver on 127.0.0.1, ack).
func BenchmarkDeliver(b *testing.B) {
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			require.NoError(b, redistest.Flush(ctx, backend))
			rcv := newReceiver(b, time.Now, func(int) int { return http.StatusOK })
			p := webhookPolicy(b, rcv.url(), "")
			ob := outbox.New(backend.Client, outbox.Config{Policy: p, Clock: clock.System{}, Logger: quiet})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				require.NoError(b, ob.Append(ctx, events(fmt.Sprint("d", i), 100)))
				b.StartTimer()
				round, err := ob.DeliverOnce(ctx)
				require.NoError(b, err)
				require.Equal(b, 100, round.Delivered)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/event")
		})
	}
}
