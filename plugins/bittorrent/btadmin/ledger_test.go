package btadmin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Issue 28.3 through the site's API: a torrent registered with its size
// shows it (a bad size is a 400 that changes nothing), and a user's
// record on a torrent answers its ledger, newest first, with raw and
// credited deltas and the rates over the time since the previous
// announce.
func TestLedgerAndSizeThroughTheAPI(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		tracker, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: f.clock, Logger: quiet, WriteBehind: -1,
			Watch: swarm.WatchConfig{LedgerEntries: 2}})
		require.NoError(t, err)
		f.tracker = tracker
		hash := btHash("ledger.flac")
		path := "/torrents/" + btHex(hash)
		passkey := strings.Repeat("d", 32)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, path, `{"id":"90","size":4194304}`).status)
		requireError(t, f.call(http.MethodPut, path, `{"id":"90","size":-1}`), http.StatusBadRequest, "size -1")
		r := f.call(http.MethodGet, path, "")
		require.EqualValues(t, 4194304, decode(t, r.body)["size"], "the refused call changed nothing")
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/users/"+passkey, `{"user_id":"8"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/clients/-TR3", `{}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, path+"/credit", `{"kind":"freeleech"}`).status)

		peer := btPeer("-TR3", 1)
		f.announceTransfer(hash, peer, passkey, bittorrent.EventStarted, 0, 0)
		for i := uint64(1); i <= 3; i++ {
			f.clock.Advance(10 * time.Second)
			f.announceTransfer(hash, peer, passkey, bittorrent.EventNone, 100*i, 1000*i)
		}
		// plain re-announces are written behind: Flush writes them, each with
		// its ledger entry (prelude's user_ledger)
		require.NoError(t, tracker.Flush(context.Background()))
		got := f.userTorrent("/users/by-id/8/torrents/" + btHex(hash))
		require.Len(t, got.Ledger, 2, "ledger_entries")
		newest := got.Ledger[0]
		require.Equal(t, f.clock.Now().UTC(), newest.At)
		require.EqualValues(t, 100, newest.Uploaded)
		require.EqualValues(t, 1000, newest.Downloaded)
		require.EqualValues(t, 100, newest.UpCredited)
		require.Zero(t, newest.DownCredited, "freeleech")
		require.EqualValues(t, 10_000, newest.ElapsedMS)
		require.InDelta(t, 10.0, newest.UploadRate, 1e-9)
		require.InDelta(t, 100.0, newest.DownloadRate, 1e-9)
		require.True(t, got.Ledger[1].At.Before(newest.At))
	})
}
