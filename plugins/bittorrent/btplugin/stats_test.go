package btplugin_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// TestStatsExportGlobalCounters: Stats carries the store's global
// counters, requests included, which counts the refused announce that
// swarm_announces leaves out.
func TestStatsExportGlobalCounters(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"","udp6":""}`)
		base := "http://" + addrs["http"]
		hash := [20]byte{0xb7, 's', 't', 'a', 't', 's'}
		fetch := func(path string, q *wire.AnnounceQuery) string {
			url := base + path
			if q != nil {
				url += "?" + string(wire.AppendAnnounceQuery(nil, q))
			}
			resp, err := http.Get(url)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return string(body)
		}
		announce := func(peer string, port uint16, left uint64) string {
			q := wire.AnnounceQuery{InfoHash: hash, Port: port, Left: left, Compact: true, NumWant: -1}
			copy(q.PeerID[:], peer)
			return fetch("/announce", &q)
		}
		require.NotContains(t, announce("-GO0001-seeder000001", 7001, 0), "failure reason")
		require.NotContains(t, announce("-GO0001-leecher00002", 7002, 10), "failure reason")
		require.Contains(t, announce("-GO0001-leecher00003", 0, 10), "failure reason", "port 0 is refused by the store")
		require.NotContains(t, fetch("/scrape?info_hash="+string(wire.AppendQueryEscape(nil, string(hash[:]))), nil), "failure reason")

		require.NoError(t, tr.Store().Flush(context.Background()))
		stats, err := tr.Stats(context.Background())
		require.NoError(t, err)
		global := map[string]float64{}
		for _, m := range stats.Metrics {
			if m.Labels == nil {
				// This process's own refusals are a counter; the rest are
				// every frontend's, read from Redis.
				want := plugins.Gauge
				switch m.Name {
				case "peer_limit_refused_total", "flood_refused_total", "flood_reported_total", "denied_total", "cheats_fired_total":
					want = plugins.Counter
				}
				require.Equal(t, want, m.Kind, m.Name)
				global[m.Name] = m.Value
			}
		}
		require.Equal(t, map[string]float64{
			"seeders": 1, "leechers": 1, "snatches": 0,
			"swarm_announces": 2, "swarm_scrapes": 1, "swarm_requests": 4,
			"peer_limit_refused_total": 0, "flood_refused_total": 0, "flood_reported_total": 0, "denied_total": 0,
			"cheats_fired_total": 0,
		}, global)
	})
}
