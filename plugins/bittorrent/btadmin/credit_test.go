package btadmin_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// announceTransfer announces a peer's cumulative counters.
func (f *btFixture) announceTransfer(hash bittorrent.InfoHash, peer bittorrent.PeerID, passkey string, event bittorrent.Event, up, down uint64) {
	f.t.Helper()
	_, err := f.tracker.Announce(f.ctx, &bittorrent.AnnounceRequest{
		InfoHash: hash, PeerID: peer, Passkey: passkey, Left: 1 << 20, NumWant: 10, Event: event,
		Uploaded: up, Downloaded: down, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), 6881),
	})
	require.NoError(f.t, err)
}

func (f *btFixture) userTorrent(path string) btadmin.UserTorrentRecord {
	f.t.Helper()
	r := f.call(http.MethodGet, path, "")
	require.Equal(f.t, http.StatusOK, r.status, r.body)
	var got btadmin.UserTorrentRecord
	decodeInto(f.t, r.body, &got)
	return got
}

// Issue 28.1 through the site's API: a torrent's status, a site-wide
// window (set on the admin's store, applied by the tracker's within its
// cache TTL) and a token, each crediting the transfer announced under it;
// bad input is a 400 that says why and changes nothing.
func TestCreditThroughTheAPI(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("credit.flac")
		path := "/torrents/" + btHex(hash)
		passkey := strings.Repeat("c", 32)
		record := "/users/by-id/7/torrents/" + btHex(hash)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, path, `{"id":"88"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/users/"+passkey, `{"user_id":"7"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/clients/-TR3", `{}`).status)
		peer := btPeer("-TR3", 1)

		requireError(t, f.call(http.MethodPut, path+"/credit", `{"kind":"gold"}`), http.StatusBadRequest, "want normal, freeleech")
		requireError(t, f.call(http.MethodPut, path+"/credit", `{"kind":"percent_off","percent_off":100}`), http.StatusBadRequest, "want 1-99")
		requireError(t, f.call(http.MethodPut, "/torrents/"+btHex(btHash("nope"))+"/credit", `{"kind":"freeleech"}`), http.StatusNotFound, "not registered")
		r := f.call(http.MethodGet, path, "")
		require.Equal(t, "normal", decode(t, r.body)["credit"].(map[string]any)["kind"], "refused calls changed nothing")

		r = f.call(http.MethodPut, path+"/credit", `{"kind":"freeleech"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodGet, path, "")
		require.Equal(t, "freeleech", decode(t, r.body)["credit"].(map[string]any)["kind"])

		f.announceTransfer(hash, peer, passkey, bittorrent.EventStarted, 0, 0)
		f.announceTransfer(hash, peer, passkey, bittorrent.EventNone, 100, 1000)
		got := f.userTorrent(record)
		require.Equal(t, int64(1000), got.Downloaded)
		require.Zero(t, got.DownCredited, "freeleech")
		require.Equal(t, int64(100), got.UpCredited)

		// A double-upload window from now on, set on another store.
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, path+"/credit", `{"kind":"normal"}`).status)
		now := f.clock.Now()
		body := `{"kind":"double_upload","start":"` + now.Format(time.RFC3339) + `","end":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`
		requireError(t, f.call(http.MethodPut, "/credit/windows/bad{id}", body), http.StatusBadRequest, "window id")
		requireError(t, f.call(http.MethodPut, "/credit/windows/w1", `{"kind":"freeleech","start":"`+now.Format(time.RFC3339)+`"}`),
			http.StatusBadRequest, "want a start and an end")
		r = f.call(http.MethodPut, "/credit/windows/w1", body)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodGet, "/credit/windows", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var windows btadmin.WindowsReply
		decodeInto(t, r.body, &windows)
		require.Len(t, windows.Windows, 1)
		require.Equal(t, swarm.CreditDoubleUpload, windows.Windows[0].Kind)
		// the tracker's copy is at most CacheTTL old
		f.clock.Advance(11 * time.Second)
		f.announceTransfer(hash, peer, passkey, bittorrent.EventNone, 300, 2000)
		got = f.userTorrent(record)
		require.Equal(t, int64(100+2*200), got.UpCredited, "double upload in the window")
		require.Equal(t, int64(1000), got.DownCredited)
		require.Equal(t, http.StatusNoContent, f.call(http.MethodDelete, "/credit/windows/w1", "").status)
		requireError(t, f.call(http.MethodDelete, "/credit/windows/w1", ""), http.StatusNotFound, "no window")

		// A token for a day.
		tokens := "/users/by-id/7/tokens/" + btHex(hash)
		requireError(t, f.call(http.MethodPut, tokens, `{"until":"2020-01-01T00:00:00Z"}`), http.StatusBadRequest, "ended already")
		require.False(t, f.userTorrent(record).Token)
		// the admin store checks the end against its own (wall) clock
		r = f.call(http.MethodPut, tokens, `{"until":"`+time.Now().Add(24*time.Hour).Format(time.RFC3339)+`"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		f.announceTransfer(hash, peer, passkey, bittorrent.EventNone, 300, 5000)
		got = f.userTorrent(record)
		require.True(t, got.Token)
		require.NotNil(t, got.TokenUsed)
		require.Equal(t, int64(1000), got.DownCredited, "the token made it free")
		require.Equal(t, http.StatusNoContent, f.call(http.MethodDelete, tokens, "").status)
		requireError(t, f.call(http.MethodDelete, tokens, ""), http.StatusNotFound, "no token")
		requireError(t, f.call(http.MethodGet, "/users/by-id/8/torrents/"+btHex(hash), ""), http.StatusNotFound, "no record")
		require.Contains(t, f.logs.String(), "token granted")
	})
}
