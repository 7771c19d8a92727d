package btplugin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

func TestLimitSettingsAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p, err := btpluginNew()
		require.NoError(t, err)
		require.NoError(t, configure(p, b, `{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_rate":-1,"passkey_misses":-1}}`))
		for _, c := range []struct{ settings, want string }{
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_rate":-2}}`, "limits.announce_rate"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_burst":-1}}`, "AnnounceBurst"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"passkey_misses":-3}}`, "limits.passkey_misses"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"passkey_miss_window":"soon"}}`, "passkey_miss_window"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"addresses":-1}}`, "MaxAddresses"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"annouce_rate":1}}`, "annouce_rate"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"max_peers_per_torrent":-2}}`, "limits.max_peers_per_torrent"},
		} {
			err := configure(p, b, c.settings)
			require.ErrorContains(t, err, c.want)
			require.NoError(t, p.Health(t.Context()), "still configured")
		}
		require.NoError(t, p.Close(t.Context()))
	})
}

// TestLimitRefusalsReachTheHostsMetrics: run by the plugin host as hoard
// serve runs it, the refusals of the limits come out of the host's
// Prometheus collector (hoard's /metrics) as hoard_bittorrent_*.
func TestLimitRefusalsReachTheHostsMetrics(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		trackers := make(chan *btplugin.Tracker, 1)
		factory := func(ctx context.Context, l *slog.Logger) (plugins.Plugin, error) {
			p, err := btplugin.New(ctx, l)
			select {
			case trackers <- p.(*btplugin.Tracker):
			default:
			}
			return p, err
		}
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "bittorrent", Settings: json.RawMessage(`{"http":"127.0.0.1:0","udp4":"","udp6":"",
				"limits":{"announce_rate":0.001,"announce_burst":3,"max_peers_per_torrent":2}}`)}},
			Builtins: map[string]plugins.Factory{"bittorrent": factory},
			Redis:    b.Client, RedisURL: b.URL, Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine),
			// Stats are polled with health: often, so the test need not wait.
			Logger: quiet, HealthInterval: 50 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(ctx))
		t.Cleanup(func() { _ = h.Stop() })
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, h.WaitRunning(waitCtx, "bittorrent"))
		tr := <-trackers
		d, err := tr.Describe(ctx)
		require.NoError(t, err)
		base := "http://" + d.Listeners[0].Address
		client := httpFrom(t, "127.0.0.1")
		hash := hashOf(3)
		require.Empty(t, announceHTTP(t, client, base, "", hash, "-GO0001-000000000001", 7001))
		require.Empty(t, announceHTTP(t, client, base, "", hash, "-GO0001-000000000002", 7002))
		require.Equal(t, "your address has 2 peers on this torrent already: stop one, or wait for old ones to time out",
			announceHTTP(t, client, base, "", hash, "-GO0001-000000000003", 7003))
		require.Equal(t, "too many announces from your address: announce less often and try again later",
			announceHTTP(t, client, base, "", hash, "-GO0001-000000000001", 7001))

		registry := prometheus.NewRegistry()
		registry.MustRegister(h.Collector())
		counter := func(name string) float64 {
			families, err := registry.Gather()
			require.NoError(t, err)
			sum := -1.0
			for _, f := range families {
				if f.GetName() == name {
					sum = 0
					for _, m := range f.GetMetric() {
						sum += m.GetCounter().GetValue()
					}
				}
			}
			return sum
		}
		require.Eventually(t, func() bool {
			return counter("hoard_bittorrent_rate_limited_total") == 1 && counter("hoard_bittorrent_peer_limit_refused_total") == 1
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, 0.0, counter("hoard_bittorrent_passkey_blocked_total"))
		require.Equal(t, 0.0, counter("hoard_bittorrent_passkey_misses_total"))
	})
}
