package btadmin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// Issue 28.4 through the site's API: DELETE …/torrents/:infohash with a
// reason; the tracker answers it to the torrent's announces.
func TestDeleteTorrentWithReason(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("trumped.flac")
		path := "/torrents/" + btHex(hash)
		passkey := strings.Repeat("k", 32)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, path, `{"id":"77"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/users/"+passkey, `{"user_id":"7"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/clients/-TR3", `{}`).status)
		peer := btPeer("-TR3", 1)
		require.NoError(t, f.announce(hash, peer, passkey, 10, 1))

		// Bad input: a 400 that says why, and the torrent stays registered.
		requireError(t, f.call(http.MethodDelete, path, `{"reason":"red\u001b[0m"}`), http.StatusBadRequest, "control character U+001B")
		requireError(t, f.call(http.MethodDelete, path, `{"reason":"`+strings.Repeat("x", 201)+`"}`), http.StatusBadRequest, "1-200 bytes")
		requireError(t, f.call(http.MethodDelete, path, `{"why":"x"}`), http.StatusBadRequest, "malformed JSON")
		info, err := f.adminStore.Torrent(f.ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "77", info.ID)

		r := f.call(http.MethodDelete, path, `{"reason":"Trumped"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		got := decode(t, r.body)
		require.Equal(t, "Trumped", got["reason"])
		require.Equal(t, "77", got["unregistered_id"])
		require.NotEmpty(t, got["reason_until"])
		err = f.announce(hash, peer, passkey, 10, 1)
		var refusal *bittorrent.ClientError
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, "torrent deleted: Trumped", refusal.Reason)
		require.Contains(t, f.logs.String(), "reason=Trumped")
	})
}

// Issue 28.7: the deny lists through the admin API, bad input refused
// with nothing changed.
func TestDenyListsAPI(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("denied.iso")
		list := func() btadmin.DenyListsReply {
			r := f.call(http.MethodGet, "/deny", "")
			require.Equal(t, http.StatusOK, r.status, r.body)
			var reply btadmin.DenyListsReply
			decodeInto(t, r.body, &reply)
			return reply
		}
		empty := btadmin.DenyListsReply{Torrents: []btadmin.DenyEntry{}, Clients: []btadmin.DenyEntry{}}
		require.Equal(t, empty, list())

		requireError(t, f.call(http.MethodPut, "/deny/torrents/nothex", `{}`), http.StatusBadRequest, "want 40 hex characters")
		requireError(t, f.call(http.MethodPut, "/deny/torrents/"+btHex(hash), `{"reason":"a\nb"}`), http.StatusBadRequest, "control character U+000A")
		requireError(t, f.call(http.MethodPut, "/deny/clients/"+strings.Repeat("x", 21), ``), http.StatusBadRequest, "1-20 bytes")
		requireError(t, f.call(http.MethodDelete, "/deny/clients/-XL0012-", ``), http.StatusNotFound, `no client prefix "-XL0012-" is denied`)
		requireError(t, f.call(http.MethodDelete, "/deny/torrents/"+btHex(hash), ``), http.StatusNotFound, "is denied")
		require.Equal(t, empty, list(), "refused calls changed nothing")

		r := f.call(http.MethodPut, "/deny/torrents/"+btHex(hash), `{"reason":"DMCA"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodPut, "/deny/clients/"+url.PathEscape("-XL0012-"), ``)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, btadmin.DenyListsReply{
			Torrents: []btadmin.DenyEntry{{InfoHash: btHex(hash), Reason: "DMCA"}},
			Clients:  []btadmin.DenyEntry{{Prefix: "-XL0012-"}},
		}, list())

		// The tracker frontend refuses both (private mode: a registered
		// torrent, a known passkey, a whitelisted client, still denied).
		passkey := strings.Repeat("p", 32)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/torrents/"+btHex(hash), `{"id":"1"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/users/"+passkey, `{"user_id":"7"}`).status)
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/clients/-", `{}`).status)
		var refusal *bittorrent.ClientError
		require.ErrorAs(t, f.announce(hash, btPeer("-TR3", 1), passkey, 10, 1), &refusal)
		require.Equal(t, "this torrent is not allowed on this tracker: DMCA", refusal.Reason)

		require.Equal(t, http.StatusOK, f.call(http.MethodDelete, "/deny/torrents/"+btHex(hash), ``).status)
		other := btHash("fine.iso")
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, "/torrents/"+btHex(other), `{"id":"2"}`).status)
		require.ErrorAs(t, f.announce(other, btPeer("-XL0012-", 2), passkey, 10, 2), &refusal)
		require.Equal(t, "your client is not allowed on this tracker", refusal.Reason)
		require.Equal(t, http.StatusOK, f.call(http.MethodDelete, "/deny/clients/-XL0012-", ``).status)
		require.Equal(t, empty, list())
		require.Contains(t, f.logs.String(), "torrent denied")
	})
}

func decodeInto(t *testing.T, body string, into any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(body), into), body)
}
