package plugins_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
	"github.com/hoardproject/hoard/queues"
)

func TestReclaimSweepDeliversExpiredClaimsOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		clock := newFakeClock(t0)
		engine := queues.NewEngine(b.Client, queues.Options{Clock: queues.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)})
		logger, _ := newTestLogger(t)
		h, err := plugins.NewHost(plugins.Options{
			Plugins:  []plugins.Spec{{Name: "example", Settings: []byte(`{"tick_period":"24h"}`)}},
			Builtins: map[string]plugins.Factory{"example": exampleplugin.New},
			Redis:    b.Client, Queues: plugins.EngineQueues(engine), Clock: clock, Logger: logger,
			ReclaimSweepInterval: 10 * time.Second, HealthInterval: time.Hour,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(ctx))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(ctx, "example"))

		// Two items go out at t0 with a one-minute reclaim TTL: the tick's
		// own item and one no item type of the plugin owns.
		require.Eventually(t, func() bool {
			counts, err := engine.Counts(ctx, "example")
			return err == nil && counts.TodoTotal() == 1
		}, eventually, poll, "the first tick's item is queued")
		_, err = engine.Enqueue(ctx, "example", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "other:x"}})
		require.NoError(t, err)
		claimed, err := engine.Claim(ctx, queues.ClaimRequest{Project: "example", Downloader: "tester", Count: 2})
		require.NoError(t, err)
		require.Len(t, claimed.Items, 2)

		reclaims := func() float64 {
			v, _ := metric(liveStats(t, h, "example"), "reclaims_total")
			return v
		}
		cursor := func() int64 {
			v, _ := b.Client.HGet(ctx, "hoard:plugin:{example}:reclaim_cursor", "example").Int64()
			return v
		}
		// sweep advances the host's clock one interval and waits for that
		// sweep to have moved the cursor to the new now.
		sweep := func() {
			clock.Advance(10 * time.Second)
			now := clock.Now().UnixMilli()
			require.Eventually(t, func() bool { return cursor() == now }, eventually, poll)
		}
		for clock.Now().Before(t0.Add(50 * time.Second)) {
			sweep()
			require.Zero(t, reclaims(), "nothing expired at %s", clock.Now().Sub(t0))
		}
		sweep() // t0+60s: the deadline
		require.Eventually(t, func() bool { return reclaims() == 1 }, eventually, poll, "only the plugin's item is delivered")
		for range 3 {
			sweep()
		}
		require.Equal(t, 1.0, reclaims(), "each expiry is delivered once")
	})
}

func TestOneFrontendRunsEachPeriod(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		c := &controlled{}
		var hosts []*plugins.Host
		for range 3 {
			logger, _ := newTestLogger(t)
			h, err := plugins.NewHost(plugins.Options{
				Plugins: []plugins.Spec{{Name: "sched"}}, Builtins: map[string]plugins.Factory{"sched": c.factory},
				Redis: b.Client, Logger: logger,
			})
			require.NoError(t, err)
			require.NoError(t, h.Start(t.Context()))
			defer h.Stop()
			hosts = append(hosts, h)
		}
		ran, skipped := 0.0, 0.0
		require.Eventually(t, func() bool {
			ran, skipped = 0, 0
			for _, h := range hosts {
				ran += gatherTicks(t, h, "ok")
				skipped += gatherTicks(t, h, "skipped")
			}
			return ran+skipped == 3
		}, eventually, poll)
		require.Equal(t, 1.0, ran, "one frontend ran the period's tick")
		require.Equal(t, 2.0, skipped)
		require.Len(t, c.tickLog(), 1)
	})
}

// gatherTicks sums hoard_plugin_ticks_total{result=...} over the host's
// jobs (0 before any job ran).
func gatherTicks(t *testing.T, h *plugins.Host, result string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(h.Collector()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "hoard_plugin_ticks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" && lp.GetValue() == result {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
