package btplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anacrolix/torrent/tracker"
	"github.com/anacrolix/torrent/types"
	"github.com/anacrolix/torrent/types/infohash"
	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// cityDB writes a one-network city database (81.2.69.0/24 is London).
func cityDB(t *testing.T) string {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "hoard-test-city"})
	require.NoError(t, err)
	_, network, err := net.ParseCIDR("81.2.69.0/24")
	require.NoError(t, err)
	require.NoError(t, tree.Insert(network, mmdbtype.Map{
		"country": mmdbtype.Map{"iso_code": mmdbtype.String("GB")},
		"city":    mmdbtype.Map{"names": mmdbtype.Map{"en": mmdbtype.String("London")}},
		"postal":  mmdbtype.Map{"code": mmdbtype.String("SW1A")},
	}))
	path := filepath.Join(t.TempDir(), "city.mmdb")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = tree.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path
}

// TestAnnouncesRegisterUniqueIPMetrics: with "metrics" on, the tracker's
// own listeners feed the metrics: HTTP announces (through a trusted
// proxy header) from a located address and from one the database does not
// know, and a UDP announce over IPv6 from ::1; repeats count once, a refused announce not at all, and Stats
// carries the totals only.
func TestAnnouncesRegisterUniqueIPMetrics(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		settings := fmt.Sprintf(`{"http":"127.0.0.1:0","udp4":"","udp6":"[::1]:0","proxy_header":"X-Forwarded-For",
			"trusted_proxies":["127.0.0.1/32"],"metrics":{"enabled":true,"geoip_db":%q,"batch":4}}`, cityDB(t))
		tr, addrs := startTracker(t, b, settings)

		hash := [20]byte{0xb7, 'm', 'e', 't', 'r', 'i', 'c', 's'}
		httpAnnounce := func(from, peer string, port uint16) string {
			q := wire.AnnounceQuery{InfoHash: hash, Port: port, Left: 1, Compact: true, NumWant: -1}
			copy(q.PeerID[:], peer)
			req, err := http.NewRequest("GET", "http://"+addrs["http"]+"/announce?"+string(wire.AppendAnnounceQuery(nil, &q)), nil)
			require.NoError(t, err)
			req.Header.Set("X-Forwarded-For", from)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return string(body)
		}
		for range 3 {
			require.NotContains(t, httpAnnounce("81.2.69.7", "-GO0001-london000001", 7001), "failure reason")
		}
		require.NotContains(t, httpAnnounce("10.0.0.2", "-GO0001-private00002", 7002), "failure reason")
		require.Contains(t, httpAnnounce("81.2.69.8", "-GO0001-refused00003", 0), "failure reason", "port 0 is refused")

		cl, err := tracker.NewClient("udp://"+addrs["udp6"]+"/announce", tracker.NewClientOpts{Slogger: quiet})
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var peer types.PeerID
		copy(peer[:], "-AN0001-udp6-0000004")
		_, err = cl.Announce(ctx, tracker.AnnounceRequest{InfoHash: infohash.T(hash), PeerId: peer, Left: 1,
			Event: tracker.Started, NumWant: -1, Port: 7004}, tracker.AnnounceOpt{})
		require.NoError(t, err)

		rec := tr.Metrics()
		require.NotNil(t, rec)
		waitFor(t, "the recorder to register 5 announces", func() bool {
			s := rec.Stats()
			return s.Queued == 0 && s.Registered+s.Skipped == 5
		})
		s := rec.Stats()
		require.Equal(t, uint64(5), s.Observed, "the refused announce is not observed")
		require.Equal(t, uint64(3), s.Registered, "81.2.69.7, 10.0.0.2 and ::1")
		require.Equal(t, uint64(2), s.Skipped, "the London peer's repeats")

		report, err := rec.Store().Report(t.Context(), nil, "", 0)
		require.NoError(t, err)
		require.Equal(t, int64(3), report.Users)
		require.Equal(t, []ipmetrics.PlaceCount{{Country: "unknown", Users: 2}, {Country: "GB", Users: 1}}, report.Countries)
		require.Contains(t, report.Cities, ipmetrics.PlaceCount{Country: "GB", Name: "London", Users: 1})
		h := bittorrent.InfoHash(hash)
		onTorrent, err := rec.Store().Report(t.Context(), &h, "", 0)
		require.NoError(t, err)
		require.Equal(t, int64(3), onTorrent.Users)

		stats, err := tr.Stats(t.Context())
		require.NoError(t, err)
		got := map[string]float64{}
		for _, m := range stats.Metrics {
			got[m.Name] = m.Value
			require.NotContains(t, m.Labels, "country", "no series per place in /metrics")
		}
		require.Equal(t, 3.0, got["unique_users"])
		require.Equal(t, 3.0, got["unique_users_this_month"])
		require.Equal(t, 2.0, got["metrics_cache_skipped_total"])
		require.Zero(t, got["metrics_dropped_total"])
	})
}

// TestMetricsSettingsAreChecked: a bad metrics setting or a database that
// cannot be opened fails Configure with a clear error, and the tracker
// keeps serving as it was configured before.
func TestMetricsSettingsAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p, err := btpluginNew()
		require.NoError(t, err)
		require.NoError(t, configure(p, b, `{"http":"127.0.0.1:0","udp4":"","udp6":""}`))
		for _, c := range []struct{ settings, want string }{
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","metrics":{"enabled":true,"queue":-5}}`, "queue"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","metrics":{"enabled":true,"geoip_db":"/nonexistent/city.mmdb"}}`, "/nonexistent/city.mmdb"},
		} {
			err := configure(p, b, c.settings)
			require.ErrorContains(t, err, c.want)
			require.NoError(t, p.Health(t.Context()), "still configured")
			require.NotNil(t, p.Store())
			require.Nil(t, p.Metrics())
		}
		require.NoError(t, p.Close(t.Context()))
	})
}

func btpluginNew() (*btplugin.Tracker, error) {
	p, err := btplugin.New(context.Background(), quiet)
	if err != nil {
		return nil, err
	}
	return p.(*btplugin.Tracker), nil
}

func configure(tr *btplugin.Tracker, b redistest.Backend, settings string) error {
	return tr.Configure(context.Background(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(settings)})
}
