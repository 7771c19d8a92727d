package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestCLIBitTorrentDeletionReasonAndDenyLists drives `hoard bt torrent
// remove --reason` and `hoard bt deny` against a real server, and checks
// what a tracker frontend on the same Redis answers (issue 28.4, 28.7).
func TestCLIBitTorrentDeletionReasonAndDenyLists(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		admin, err := swarm.New(b.Client, swarm.Config{Logger: quiet})
		require.NoError(t, err)
		ts := btCLIServer(t, b, admin, nil)
		tracker, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, tracker.Start(ctx)) // it hears the admin's cache hints
		defer func() { _ = tracker.Stop() }()
		hash := bittorrent.InfoHash(sha1.Sum([]byte("trumped.iso")))
		hashHex := hex.EncodeToString(hash[:])
		const passkey = "0123456789abcdef0123456789abcdef"
		announce := func(peer string) string {
			_, err := tracker.Announce(ctx, &bittorrent.AnnounceRequest{
				InfoHash: hash, PeerID: bittorrent.PeerID([]byte(peer)), Passkey: passkey,
				Addr: netip.MustParseAddrPort("10.0.0.1:6881"), Left: 10, NumWant: 10, Event: bittorrent.EventStarted,
			})
			if err == nil {
				return ""
			}
			var refusal *bittorrent.ClientError
			require.ErrorAs(t, err, &refusal)
			return refusal.Reason
		}
		for _, args := range [][]string{
			{"bt", "torrent", "add", hashHex, "--id", "12"},
			{"bt", "user", "add", passkey, "--user-id", "7"},
			{"bt", "client", "add", "--", "-"},
		} {
			out, err := runCLI(t, ts.URL, args...)
			require.NoError(t, err, out)
		}
		require.Empty(t, announce("-TR3000-000000000001"))

		_, err = runCLI(t, ts.URL, "bt", "torrent", "remove", hashHex, "--reason", "bell\a")
		require.ErrorContains(t, err, "control character U+0007")
		out, err := runCLI(t, ts.URL, "bt", "torrent", "remove", hashHex, "--reason", "Dupe")
		require.NoError(t, err, out)
		require.Regexp(t, `unregistered `+hashHex+` \(torrent 12\).*\nits announces read "torrent deleted: Dupe" until 20\d\d-`, out)
		require.Equal(t, "torrent deleted: Dupe", announce("-TR3000-000000000001"))

		_, err = runCLI(t, ts.URL, "bt", "deny", "client", "add", "-XL0012-")
		require.ErrorContains(t, err, "goes after --")
		_, err = runCLI(t, ts.URL, "bt", "deny", "torrent", "add", "nothex")
		require.ErrorContains(t, err, "want 40 hex characters (HTTP 400)")
		out, err = runCLI(t, ts.URL, "bt", "deny", "client", "add", "--reason", "leaks peers", "--", "-XL0012-")
		require.NoError(t, err, out)
		require.Equal(t, "denied prefix \"-XL0012-\"\n", out)
		out, err = runCLI(t, ts.URL, "bt", "deny", "torrent", "add", hashHex, "--reason", "DMCA")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "bt", "deny", "list")
		require.NoError(t, err, out)
		require.Regexp(t, `KIND\s+DENIED\s+REASON\ntorrent\s+`+hashHex+`\s+DMCA\nclient\s+"-XL0012-"\s+leaks peers\n`, out)
		require.NoError(t, tracker.RegisterTorrent(ctx, hash, "12"))
		// The hint reaches the frontend's cache a moment after the call.
		require.Eventually(t, func() bool {
			return announce("-TR3000-000000000002") == "this torrent is not allowed on this tracker: DMCA"
		}, 5*time.Second, 5*time.Millisecond)
		out, err = runCLI(t, ts.URL, "bt", "deny", "torrent", "remove", hashHex)
		require.NoError(t, err, out)
		_, err = runCLI(t, ts.URL, "bt", "deny", "torrent", "remove", hashHex)
		require.ErrorContains(t, err, "(HTTP 404)")
		out, err = runCLI(t, ts.URL, "bt", "deny", "client", "remove", "--", "-XL0012-")
		require.NoError(t, err, out)
		require.Equal(t, "allowed prefix \"-XL0012-\" again\n", out)
	})
}
