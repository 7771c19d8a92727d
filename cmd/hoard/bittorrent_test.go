package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// runCLIWithStderr is runCLI that also returns what the command wrote to
// its error stream (warnings).
func runCLIWithStderr(t *testing.T, url string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	t.Setenv("HOARD_URL", url)
	t.Setenv("HOARD_ADMIN_TOKEN", "cli-token")
	savedStdout := os.Stdout
	r, w, pipeErr := os.Pipe()
	require.NoError(t, pipeErr)
	os.Stdout = w
	cmd := rootCommand()
	cmd.SetArgs(args)
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.ExecuteContext(context.Background())
	w.Close()
	os.Stdout = savedStdout
	printed, _ := io.ReadAll(r)
	return out.String() + string(printed), errOut.String(), err
}

// TestCLIBitTorrent drives `hoard bt` against a real server whose
// BitTorrent store is unstarted, as hoard serve builds it, and checks the
// result through a private tracker frontend's store on the same Redis.
func TestCLIBitTorrent(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		admin, err := swarm.New(b.Client, swarm.Config{Logger: quiet})
		require.NoError(t, err)
		ts := btCLIServer(t, b, admin, nil)
		tracker, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quiet})
		require.NoError(t, err)

		hash := bittorrent.InfoHash(sha1.Sum([]byte("cli.iso")))
		hashHex := hex.EncodeToString(hash[:])
		const passkey = "0123456789abcdef0123456789abcdef"

		out, warning, err := runCLIWithStderr(t, ts.URL, "bt", "clients")
		require.NoError(t, err)
		require.Empty(t, strings.TrimSpace(out))
		require.Contains(t, warning, "warning: the client whitelist is empty: a tracker in private mode refuses every client")

		_, err = runCLI(t, ts.URL, "bt", "client", "add", "-TR3", "--name", "Transmission 3")
		require.ErrorContains(t, err, "goes after --")
		out, err = runCLI(t, ts.URL, "bt", "client", "add", "--name", "Transmission 3", "--", "-TR3")
		require.NoError(t, err, out)
		require.Contains(t, out, `whitelisted "-TR3" Transmission 3`)
		out, err = runCLI(t, ts.URL, "bt", "client", "add", "A/B%")
		require.NoError(t, err, out)
		out, warning, err = runCLIWithStderr(t, ts.URL, "bt", "clients")
		require.NoError(t, err, out)
		require.Empty(t, warning)
		require.Regexp(t, `(?s)PREFIX\s+NAME\n"-TR3"\s+Transmission 3\n"A/B%"`, out)
		_, err = runCLI(t, ts.URL, "bt", "client", "add", strings.Repeat("x", 21))
		require.ErrorContains(t, err, "1-20 bytes (HTTP 400)")

		_, err = runCLI(t, ts.URL, "bt", "torrent", "add", hashHex)
		require.ErrorContains(t, err, `required flag(s) "id" not set`)
		_, err = runCLI(t, ts.URL, "bt", "torrent", "add", "not-a-hash", "--id", "1")
		require.ErrorContains(t, err, "want 40 hex characters (HTTP 400)")
		_, err = runCLI(t, ts.URL, "bt", "torrent", "show", hashHex)
		require.ErrorContains(t, err, "(HTTP 404)")
		out, err = runCLI(t, ts.URL, "bt", "torrent", "add", hashHex, "--id", "10")
		require.NoError(t, err, out)
		require.Equal(t, "registered "+hashHex+" as torrent 10\n", out)
		out, err = runCLI(t, ts.URL, "bt", "torrent", "add", hashHex, "--id", "11")
		require.NoError(t, err, out)
		require.Contains(t, out, "as torrent 11 (was 10)")
		_, err = runCLI(t, ts.URL, "bt", "torrent", "add", hashHex, "--id", "11", "--created", "yesterday")
		require.ErrorContains(t, err, "want an RFC 3339 time")
		_, err = runCLI(t, ts.URL, "bt", "torrent", "add", hashHex, "--id", "11", "--uploader", "a b")
		require.ErrorContains(t, err, `uploader "a b"`)
		out, err = runCLI(t, ts.URL, "bt", "torrent", "add", hashHex, "--id", "11", "--uploader", "42", "--created", "2026-01-02T03:04:05Z")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "bt", "torrent", "show", hashHex)
		require.NoError(t, err, out)
		require.Regexp(t, `uploader\s+42\n`, out)
		require.Regexp(t, `created\s+2026-01-02`, out)

		_, err = runCLI(t, ts.URL, "bt", "user", "add", passkey)
		require.ErrorContains(t, err, `required flag(s) "user-id" not set`)
		out, err = runCLI(t, ts.URL, "bt", "user", "add", passkey, "--user-id", "7")
		require.NoError(t, err, out)
		require.Equal(t, "passkey 0123… now belongs to user 7\n", out)
		_, err = runCLI(t, ts.URL, "bt", "user", "add", "pass/key", "--user-id", "7")
		require.ErrorContains(t, err, "a passkey may not contain '/'")
		_, err = runCLI(t, ts.URL, "bt", "user", "add", "pass.key", "--user-id", "7")
		require.ErrorContains(t, err, "passkey: want 32-64 characters of A-Z a-z 0-9 _ - (HTTP 400)")

		_, err = tracker.Announce(ctx, &bittorrent.AnnounceRequest{
			InfoHash: hash, PeerID: bittorrent.PeerID([]byte("-TR3000-000000000001")), Passkey: passkey,
			Addr: netip.MustParseAddrPort("10.0.0.1:6881"), Left: 0, NumWant: 10, Event: bittorrent.EventStarted,
		})
		require.NoError(t, err, "the tracker admits what the CLI set up")
		require.NoError(t, tracker.Flush(ctx))

		out, err = runCLI(t, ts.URL, "bt", "torrent", "show", hashHex)
		require.NoError(t, err, out)
		require.Regexp(t, `id\s+11\n`, out)
		require.Regexp(t, `seeders\s+1\n`, out)
		require.Regexp(t, `last_action\s+20\d\d-`, out)
		out, err = runCLI(t, ts.URL, "bt", "user", "show", "7")
		require.NoError(t, err, out)
		require.Regexp(t, `active\s+1: 11\n`, out)
		require.Regexp(t, `hnr\s+0\n`, out)
		out, err = runCLI(t, ts.URL, "bt", "stats")
		require.NoError(t, err, out)
		require.Regexp(t, `seeders\s+1\n`, out)
		require.Regexp(t, `announces\s+1\n`, out)
		out, err = runCLI(t, ts.URL, "bt", "top", "--by", "seeders", "-n", "10")
		require.NoError(t, err, out)
		require.Regexp(t, `#\s+INFO_HASH\s+SEEDERS\n1\s+`+hashHex+`\s+1\n`, out)
		_, err = runCLI(t, ts.URL, "bt", "top", "--by", "ratio")
		require.ErrorContains(t, err, "want seeders, leechers or snatches (HTTP 400)")

		out, err = runCLI(t, ts.URL, "bt", "user", "remove", passkey)
		require.NoError(t, err, out)
		require.Equal(t, "passkey 0123… removed\n", out)
		out, err = runCLI(t, ts.URL, "bt", "torrent", "remove", hashHex)
		require.NoError(t, err, out)
		require.Contains(t, out, "unregistered "+hashHex+" (torrent 11)")
		_, err = runCLI(t, ts.URL, "bt", "torrent", "remove", hashHex)
		require.ErrorContains(t, err, "is not registered (HTTP 404)")
		info, err := tracker.Torrent(ctx, hash)
		require.NoError(t, err)
		require.Empty(t, info.ID)

		out, err = runCLI(t, ts.URL, "bt", "client", "remove", "--", "-TR3")
		require.NoError(t, err, out)
		require.Contains(t, out, `removed "-TR3" Transmission 3 from the whitelist`)
		_, err = runCLI(t, ts.URL, "bt", "client", "remove", "--", "-TR3")
		require.ErrorContains(t, err, "(HTTP 404)")
		out, err = runCLI(t, ts.URL, "bt", "client", "remove", "A/B%")
		require.NoError(t, err, out)
		clients, err := tracker.Clients(ctx)
		require.NoError(t, err)
		require.Empty(t, clients)

		// Every change made through the CLI is in the admin log with the
		// passkey redacted.
		out, err = runCLI(t, ts.URL, "log")
		require.NoError(t, err, out)
		require.Contains(t, out, "passkey added")
		require.Contains(t, out, "0123…")
		require.NotContains(t, out, passkey)
	})
}
