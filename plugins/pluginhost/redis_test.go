package pluginhost_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

func TestOneFrontendRunsEachPeriod(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		c := &controlled{}
		var hosts []*pluginhost.Host
		for range 3 {
			logger, _ := newTestLogger(t)
			h, err := pluginhost.NewHost(pluginhost.Options{
				Plugins: []pluginhost.Spec{{Name: "sched"}}, Builtins: map[string]plugins.Factory{"sched": c.factory},
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
func gatherTicks(t *testing.T, h *pluginhost.Host, result string) float64 {
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
