package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestCLIBitTorrentReaper drives `hoard bt reaper` against a real server:
// preview, extend (by torrent, by user, bad input) and counts.
func TestCLIBitTorrentReaper(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		admin, err := swarm.New(b.Client, swarm.Config{Logger: quiet})
		require.NoError(t, err)
		reap := reaper.New(b.Client, reaper.Config{Policy: reaper.DefaultPolicy(), Logger: quiet})
		ts := btCLIServer(t, b, admin, reap)

		hash := bittorrent.InfoHash(sha1.Sum([]byte("reaped.iso")))
		hashHex := hex.EncodeToString(hash[:])
		out, err := runCLI(t, ts.URL, "bt", "torrent", "add", hashHex, "--id", "5", "--uploader", "up", "--value", "3",
			"--created", time.Now().Add(-9*time.Hour).UTC().Format(time.RFC3339))
		require.NoError(t, err, out)

		out, err = runCLI(t, ts.URL, "bt", "reaper", "preview")
		require.NoError(t, err, out)
		require.Contains(t, out, "would queue 1 steps for 1 uploaders; 1 due in all, 0 left to later runs by the caps")
		require.Regexp(t, `notify-initial\s+`+hashHex+`\s+5\s+up\s+never\s+`, out)

		_, err = runCLI(t, ts.URL, "bt", "reaper", "extend", hashHex, "--days", "3")
		require.ErrorContains(t, err, "is not in the reaper's process (no notice): nothing to extend (HTTP 409)")
		names, err := reap.Tick(ctx)
		require.NoError(t, err)
		_, err = reap.Apply(ctx, names[0])
		require.NoError(t, err)

		_, err = runCLI(t, ts.URL, "bt", "reaper", "extend", hashHex)
		require.ErrorContains(t, err, `required flag(s) "days" not set`)
		_, err = runCLI(t, ts.URL, "bt", "reaper", "extend", hashHex, "--days", "-2")
		require.ErrorContains(t, err, "want a whole number from 1 to 3650")
		_, err = runCLI(t, ts.URL, "bt", "reaper", "extend", hashHex, "--days", "ten")
		require.ErrorContains(t, err, `invalid argument "ten"`)
		_, err = runCLI(t, ts.URL, "bt", "reaper", "extend", "--days", "2")
		require.ErrorContains(t, err, "name a torrent")
		_, err = runCLI(t, ts.URL, "bt", "reaper", "extend", hex.EncodeToString(make([]byte, 20)), "--days", "2")
		require.ErrorContains(t, err, "is not registered (HTTP 404)")
		out, err = runCLI(t, ts.URL, "bt", "reaper", "extend", hashHex, "--days", "3")
		require.NoError(t, err, out)
		require.Contains(t, out, "extended "+hashHex+" by 3 days (initial notice)")
		out, err = runCLI(t, ts.URL, "bt", "reaper", "extend", "--user", "up", "--days", "1")
		require.NoError(t, err, out)
		require.Contains(t, out, "extended "+hashHex+" by 1 days")

		out, err = runCLI(t, ts.URL, "bt", "reaper", "show", hashHex)
		require.NoError(t, err, out)
		require.Regexp(t, `state\s+never/initial\n`, out)
		_, err = runCLI(t, ts.URL, "bt", "reaper", "show", "nothex")
		require.ErrorContains(t, err, "want 40 hex characters (HTTP 400)")

		out, err = runCLI(t, ts.URL, "bt", "reaper", "counts")
		require.NoError(t, err, out)
		require.Regexp(t, `extensions\s+2\n`, out)
		require.Regexp(t, `initial_done\s+1\n`, out)
	})
}

// btCLIServer serves the admin API, with the BitTorrent plugin's admin
// over store (and reap, when not nil), as hoard serve does, for the CLI
// tests of `hoard bt`.
func btCLIServer(t *testing.T, b redistest.Backend, store *swarm.Store, reap *reaper.Reaper) *httptest.Server {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet,
		PluginAPI: newBTAPI(&btadmin.Admin{Store: store, Reaper: reap}, nil)}, engine)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}
