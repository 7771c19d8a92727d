package main

import (
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestCLIBitTorrentTrackersAndScores drives `hoard bt torrent add
// --tracker`, `hoard bt tracker` and `hoard bt score` against a real
// server, as hoard serve builds it.
func TestCLIBitTorrentTrackersAndScores(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		store, err := swarm.New(b.Client, swarm.Config{Logger: quiet})
		require.NoError(t, err)
		_, policy, err := scoring.ParseSettings([]byte(`{"allow_private_targets":true}`), false)
		require.NoError(t, err)
		scorer := scoring.New(b.Client, policy, nil, quiet)
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet,
			PluginAPI: newBTAPI(&btadmin.Admin{Store: store, Scorer: scorer}, nil)}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		hash := sha1.Sum([]byte("cli scored"))
		hexHash := hex.EncodeToString(hash[:])
		udp, web := "udp://127.0.0.1:6969/announce", "http://127.0.0.1:6969/announce"

		// Bad flags fail before any call: nothing is registered.
		for _, c := range []struct {
			args []string
			says string
		}{
			{[]string{"--tracker", udp, "--tracker", web, "--tracker-max", "1,2,3"}, "3 --tracker-max for 2 --tracker"},
			{[]string{"--tracker", "udp://127.0.0.1/announce"}, "a udp tracker needs host:port"},
			{[]string{"--tracker-max", "5"}, "--tracker-max without --tracker"},
			{[]string{"--tracker", udp, "--tracker-max", "2000"}, "max peers 2000 is not 1 to 1000"},
		} {
			out, err := runCLI(t, ts.URL, append([]string{"bt", "torrent", "add", hexHash, "--id", "1"}, c.args...)...)
			require.ErrorContains(t, err, c.says, "%v: %s", c.args, out)
			_, err = store.Torrent(t.Context(), hash)
			require.ErrorIs(t, err, swarm.ErrNotFound)
		}

		out, err := runCLI(t, ts.URL, "bt", "torrent", "add", hexHash, "--id", "1", "--tracker", udp, "--tracker", web,
			"--tracker-max", "200", "--tracker-max", "30")
		require.NoError(t, err, out)
		require.Contains(t, out, "external tracker "+udp+" (max peers 200)")
		require.Contains(t, out, "external tracker "+web+" (max peers 30)")
		out, err = runCLI(t, ts.URL, "bt", "tracker", "list", hexHash)
		require.NoError(t, err, out)
		require.Regexp(t, `http://127.0.0.1:6969/announce\s+30\n`, out)
		require.Regexp(t, `udp://127.0.0.1:6969/announce\s+200\n`, out)

		out, err = runCLI(t, ts.URL, "bt", "tracker", "set", hexHash, "--tracker", web, "--tracker-max", "80")
		require.NoError(t, err, out)
		require.Regexp(t, `http://127.0.0.1:6969/announce\s+80\n`, out)
		require.NotContains(t, out, udp)
		_, err = runCLI(t, ts.URL, "bt", "tracker", "set", hexHash)
		require.ErrorContains(t, err, "at least one --tracker")
		out, err = runCLI(t, ts.URL, "bt", "tracker", "clear", hexHash)
		require.NoError(t, err, out)
		require.Contains(t, out, "has no external trackers")

		_, err = runCLI(t, ts.URL, "bt", "score", "show", hexHash)
		require.ErrorContains(t, err, "never been scored")
		_, err = scorer.Track(t.Context(), hash)
		require.NoError(t, err)
		item, err := scorer.NextItem(t.Context(), hash)
		require.NoError(t, err)
		_, err = scorer.Apply(t.Context(), item, scoring.Result{Peers: 3, New: 3, Max: 50})
		require.NoError(t, err)
		out, err = runCLI(t, ts.URL, "bt", "score", "show", hexHash)
		require.NoError(t, err, out)
		require.Regexp(t, `score\s+0\.8\n`, out)
		require.Regexp(t, `swarm\s+50\s+0\.8\s+3\s+3\s+0\.8\s+`, out)
		require.Regexp(t, `\n1\s+\S+\s+0\.8\s+swarm 3/3/50 ×0\.8\n`, out)

		out, err = runCLI(t, ts.URL, "bt", "score", "top", "-n", "5")
		require.NoError(t, err, out)
		require.Regexp(t, hexHash+`\s+0\.8\n`, out)
		_, err = runCLI(t, ts.URL, "bt", "score", "top", "-n", "0")
		require.ErrorContains(t, err, "want 1 to 1000")
	})
}
