package main

import (
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestCLIBitTorrentMetrics drives `hoard bt metrics` against a real server
// over metrics registered by the tracker's scripts in two months.
func TestCLIBitTorrentMetrics(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		// The admin's store reads with the same clock the registrations
		// used, so "the last months" are the test's.
		clk := clock.NewFake(time.Date(2026, 1, 30, 12, 0, 0, 0, time.UTC))
		store := ipmetrics.NewStore(b.Client, clk, 0)
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet,
			PluginAPI: newBTAPI(nil, &btadmin.MetricsAdmin{Store: store})}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()

		hash := bittorrent.InfoHash(sha1.Sum([]byte("metrics.iso")))
		other := bittorrent.InfoHash(sha1.Sum([]byte("other.iso")))
		register := func(ip string, h bittorrent.InfoHash, cc, city, pc string) {
			_, err := store.Register(t.Context(), []ipmetrics.Registration{{IP: netip.MustParseAddr(ip), Hash: h,
				Loc: ipmetrics.Location{Country: cc, City: city, Postcode: pc}, Global: true, Torrent: true}})
			require.NoError(t, err)
		}
		register("10.0.0.1", hash, "GB", "London", "SW1A")
		register("10.0.0.2", hash, "GB", "London", "SW1A")
		clk.Advance(3 * 24 * time.Hour) // February
		register("2001:db8::1", hash, "US", "St. Louis", "63101")
		register("10.0.0.1", other, "GB", "London", "SW1A") // known IP, new torrent

		out, err := runCLI(t, ts.URL, "bt", "metrics", "--months", "3")
		require.NoError(t, err, out)
		require.Regexp(t, `users \(all torrents, all time\)\s+3\n`, out)
		require.Regexp(t, `(?s)MONTH\s+USERS\n2025-12\s+0\n2026-01\s+2\n2026-02\s+1\n`, out)
		require.Regexp(t, `(?s)COUNTRY\s+USERS\nGB\s+2\nUS\s+1\n`, out)
		require.Regexp(t, `(?s)COUNTRY\s+CITY\s+USERS\nGB\s+London\s+2\nUS\s+St\. Louis\s+1\n`, out)
		require.Regexp(t, `(?s)COUNTRY\s+POSTCODE\s+USERS\nGB\s+SW1A\s+2\nUS\s+63101\s+1`, out)

		out, err = runCLI(t, ts.URL, "bt", "metrics", "--month", "2026-02", "--torrent", hex.EncodeToString(other[:]), "-n", "1")
		require.NoError(t, err, out)
		require.Regexp(t, `users \(torrent [0-9a-f]{40}, 2026-02\)\s+1\n`, out)
		require.Regexp(t, `(?s)COUNTRY\s+USERS\nGB\s+1\n\n`, out)

		_, err = runCLI(t, ts.URL, "bt", "metrics", "--month", "February")
		require.ErrorContains(t, err, `month="February": want YYYY-MM (HTTP 400)`)
		_, err = runCLI(t, ts.URL, "bt", "metrics", "--torrent", "abc")
		require.ErrorContains(t, err, "want 40 hex characters (HTTP 400)")
		_, err = runCLI(t, ts.URL, "bt", "metrics", "-n", "0")
		require.ErrorContains(t, err, "top=\"0\": want a whole number from 1 to 1000 (HTTP 400)")
	})
}
