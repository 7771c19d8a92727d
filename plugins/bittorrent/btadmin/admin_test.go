package btadmin_test

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// btFixture is hoard's admin side (a server with its own, never started
// swarm store) and a tracker frontend's store in private mode on the same
// Redis, as `hoard serve --plugin bittorrent` runs them.
type btFixture struct {
	*fixture
	adminStore *swarm.Store
	tracker    *swarm.Store
	clock      *swarm.FakeClock
	logs       *lockedBuffer
	siteToken  string
}

// lockedBuffer collects the server's log lines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newBTFixture(t *testing.T, b redistest.Backend) *btFixture {
	t.Helper()
	admin, err := swarm.New(b.Client, swarm.Config{Logger: quiet})
	require.NoError(t, err)
	clock := swarm.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	tracker, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: quiet})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	f := newFixture(t, b, parts{admin: &btadmin.Admin{Store: admin}, logger: slog.New(slog.NewTextHandler(logs, nil))})
	return &btFixture{fixture: f, adminStore: admin, tracker: tracker, clock: clock, logs: logs}
}

// call makes an admin call as the account "site-web1".
func (f *btFixture) call(method, path, body string) reply {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+"/api/v1/bittorrent"+path, strings.NewReader(body))
	require.NoError(f.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	return f.do(req)
}

// requireError checks an error reply's status and that its message says why.
func requireError(t *testing.T, r reply, status int, says string) {
	t.Helper()
	require.Equal(t, status, r.status, r.body)
	require.Contains(t, decode(t, r.body)["error"], says, r.body)
}

func btHash(name string) bittorrent.InfoHash { return sha1.Sum([]byte(name)) }

func btHex(hash bittorrent.InfoHash) string { return hex.EncodeToString(hash[:]) }

func btPeer(prefix string, n byte) bittorrent.PeerID {
	var id bittorrent.PeerID
	copy(id[:], prefix+strings.Repeat("0", len(id)-len(prefix)))
	id[len(id)-1] = n
	return id
}

// announce is one announce to the tracker frontend.
func (f *btFixture) announce(hash bittorrent.InfoHash, peer bittorrent.PeerID, passkey string, left uint64, n byte) error {
	_, err := f.tracker.Announce(f.ctx, &bittorrent.AnnounceRequest{
		InfoHash: hash, PeerID: peer, Passkey: passkey, Left: left, NumWant: 10, Event: bittorrent.EventStarted,
		Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, n}), 6881),
	})
	return err
}

func TestBitTorrentAdminNeedsTokenAndStore(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHex(btHash("a"))
		for _, tok := range []string{"", "wrong"} {
			r := f.admin(http.MethodPut, "/bittorrent/torrents/"+hash, `{"id":"1"}`, tok)
			require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		}
		_, err := f.adminStore.Torrent(f.ctx, btHash("a"))
		require.ErrorIs(t, err, swarm.ErrNotFound, "a refused call changed nothing")

		off := newFixture(t, b, parts{admin: &btadmin.Admin{}})
		r := off.admin(http.MethodGet, "/bittorrent/stats", "", token)
		requireError(t, r, http.StatusServiceUnavailable, "no BitTorrent swarm store")
		r = off.admin(http.MethodGet, "/bittorrent/stats", "", "")
		require.Equal(t, http.StatusUnauthorized, r.status, "the token is checked before anything else")
	})
}

func TestBitTorrentAdminTorrents(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("ubuntu.iso")
		path := "/torrents/" + btHex(hash)

		requireError(t, f.call(http.MethodPut, "/torrents/nothex", `{"id":"1"}`), http.StatusBadRequest, "want 40 hex characters")
		requireError(t, f.call(http.MethodPut, "/torrents/"+strings.Repeat("g", 40), `{"id":"1"}`), http.StatusBadRequest, "want 40 hex characters")
		requireError(t, f.call(http.MethodGet, "/torrents/abc", ""), http.StatusBadRequest, "want 40 hex characters")
		requireError(t, f.call(http.MethodPut, path, `{"id":"a{b}"}`), http.StatusBadRequest, `torrent id "a{b}"`)
		requireError(t, f.call(http.MethodPut, path, `{}`), http.StatusBadRequest, "needs the site's torrent id")
		requireError(t, f.call(http.MethodPut, path, ``), http.StatusBadRequest, "empty request body")
		requireError(t, f.call(http.MethodPut, path, `{"id":`), http.StatusBadRequest, "malformed JSON")
		requireError(t, f.call(http.MethodGet, path, ""), http.StatusNotFound, "not found")
		requireError(t, f.call(http.MethodDelete, path, ""), http.StatusNotFound, "is not registered")

		// The site sends its numeric id; the tracker registers it as text.
		r := f.call(http.MethodPut, path, `{"id": 4711}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"info_hash": btHex(hash), "id": "4711"}, decode(t, r.body))
		info, err := f.tracker.Torrent(f.ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "4711", info.ID)

		// Upper-case hex names the same torrent; a second PUT changes the id.
		r = f.call(http.MethodPut, "/torrents/"+strings.ToUpper(btHex(hash)), `{"id":"4712"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "4711", decode(t, r.body)["previous_id"])

		r = f.call(http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var record btadmin.TorrentRecord
		require.NoError(t, json.Unmarshal([]byte(r.body), &record))
		require.Equal(t, btHex(hash), record.InfoHash)
		require.Equal(t, "4712", record.ID)
		require.True(t, record.Registered)
		require.NotNil(t, record.Created)
		require.Nil(t, record.LastAction, "it never had a seeder")

		r = f.call(http.MethodDelete, path, "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "4712", decode(t, r.body)["unregistered_id"])
		info, err = f.tracker.Torrent(f.ctx, hash)
		require.NoError(t, err, "the record stays until its retention passes")
		require.Empty(t, info.ID)
		r = f.call(http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, false, decode(t, r.body)["registered"])
		requireError(t, f.call(http.MethodDelete, path, ""), http.StatusNotFound, "is not registered")

		// Every change is in the global admin log, with who made it.
		r = f.admin(http.MethodGet, "/log", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var log struct{ Changes []queues.ChangeEntry }
		require.NoError(t, json.Unmarshal([]byte(r.body), &log))
		var whats []string
		for _, entry := range log.Changes {
			require.Equal(t, "site-web1", entry.By)
			whats = append(whats, entry.What+" "+string(entry.Details))
		}
		require.ElementsMatch(t, []string{
			`torrent registered {"id":"4711","info_hash":"` + btHex(hash) + `","previous_id":""}`,
			`torrent registered {"id":"4712","info_hash":"` + btHex(hash) + `","previous_id":"4711"}`,
			`torrent unregistered {"id":"4712","info_hash":"` + btHex(hash) + `"}`,
		}, whats)
	})
}

// TestBitTorrentAdminSiteFlow: the site whitelists clients, registers a
// torrent and its users through the API, and a private tracker frontend
// on the same Redis admits exactly those; what it records shows up in the
// user summary, the stats and the top list.
func TestBitTorrentAdminSiteFlow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("debian.iso")
		const seederKey, leecherKey = "abcdefghijklmnopqrstuvwxyz012345", "ZYXWVUTSRQPONMLKJIHGFEDCBA987654"

		r := f.call(http.MethodGet, "/clients", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"clients": []any{}, "warning": btadmin.EmptyWhitelistWarning}, decode(t, r.body))

		// Prefixes go in the path percent-encoded; "/" and "%" survive.
		odd := "A/B%"
		r = f.call(http.MethodPut, "/clients/-TR3", `{"name":"Transmission 3"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodPut, "/clients/"+url.PathEscape(odd), "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"prefix": odd, "name": ""}, decode(t, r.body))
		requireError(t, f.call(http.MethodPut, "/clients/"+strings.Repeat("x", 21), ""), http.StatusBadRequest, "1-20 bytes")
		requireError(t, f.call(http.MethodPut, "/clients/", ""), http.StatusBadRequest, "1-20 bytes")
		requireError(t, f.call(http.MethodDelete, "/clients/-qB4", ""), http.StatusNotFound, `no client prefix "-qB4"`)
		r = f.call(http.MethodGet, "/clients", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var clients btadmin.ClientsReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &clients))
		require.Equal(t, btadmin.ClientsReply{Clients: []btadmin.WhitelistedClient{
			{Prefix: "-TR3", Name: "Transmission 3"}, {Prefix: odd, Name: ""}}}, clients)
		stored, err := f.tracker.Clients(f.ctx)
		require.NoError(t, err)
		require.Equal(t, []swarm.Client{{Prefix: "-TR3", Name: "Transmission 3"}, {Prefix: odd}}, stored)

		r = f.call(http.MethodPut, "/torrents/"+btHex(hash), `{"id":"10"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodPut, "/users/"+seederKey, `{"user_id": 7}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"passkey": "abcd…", "user_id": "7"}, decode(t, r.body))
		r = f.call(http.MethodPut, "/users/"+leecherKey, `{"user_id":"8"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		requireError(t, f.call(http.MethodPut, "/users/bad.key", `{"user_id":"7"}`), http.StatusBadRequest, "passkey: want 32-64 characters")
		requireError(t, f.call(http.MethodPut, "/users/"+seederKey[:31], `{"user_id":"7"}`), http.StatusBadRequest, "passkey: want 32-64 characters")
		requireError(t, f.call(http.MethodPut, "/users/"+seederKey, `{"user_id":"x{y}"}`), http.StatusBadRequest, `user id "x{y}"`)
		requireError(t, f.call(http.MethodPut, "/users/"+seederKey, `{}`), http.StatusBadRequest, "needs the site's user id")
		requireError(t, f.call(http.MethodPut, "/users/"+seederKey, `{"name":"7"}`), http.StatusBadRequest, `unknown field "name"`)

		require.NoError(t, f.announce(hash, btPeer("-TR3000-", 1), seederKey, 0, 1))
		require.NoError(t, f.announce(hash, btPeer(odd, 2), leecherKey, 500, 2))
		err = f.announce(hash, btPeer("-qB4000-", 3), leecherKey, 500, 3)
		require.ErrorContains(t, err, "not whitelisted")
		err = f.announce(btHash("unregistered"), btPeer("-TR3000-", 1), seederKey, 0, 1)
		require.ErrorContains(t, err, "unregistered torrent")
		require.NoError(t, f.tracker.Flush(f.ctx))

		r = f.call(http.MethodGet, "/users/by-id/7", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var user btadmin.TrackerUser
		require.NoError(t, json.Unmarshal([]byte(r.body), &user))
		require.Equal(t, "7", user.UserID)
		require.Equal(t, []string{"10"}, user.Active)
		require.Equal(t, 1, user.Counts["active"])
		r = f.call(http.MethodGet, "/users/by-id/8", "")
		require.NoError(t, json.Unmarshal([]byte(r.body), &user))
		require.Equal(t, []string{"10"}, user.Active)
		require.Equal(t, []string{"10"}, user.Incomplete)
		r = f.call(http.MethodGet, "/users/by-id/nobody", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"user_id": "nobody", "active": []any{}, "complete": []any{}, "incomplete": []any{},
			"hnr": []any{}, "counts": map[string]any{"active": 0.0, "complete": 0.0, "incomplete": 0.0, "hnr": 0.0},
			"uploaded": 0.0, "downloaded": 0.0, "up_credited": 0.0, "down_credited": 0.0}, decode(t, r.body))
		requireError(t, f.call(http.MethodGet, "/users/by-id/no:body", ""), http.StatusBadRequest, `user id "no:body"`)

		r = f.call(http.MethodGet, "/stats", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var stats btadmin.SwarmStats
		require.NoError(t, json.Unmarshal([]byte(r.body), &stats))
		require.Equal(t, int64(1), stats.Seeders)
		require.Equal(t, int64(1), stats.Leechers)
		require.Equal(t, int64(2), stats.Announces)
		require.Equal(t, int64(4), stats.Requests, "refused announces count as requests")

		for query, want := range map[string]int64{"": 1, "?by=leechers&n=1": 1, "?by=snatches&n=1000": 0} {
			r = f.call(http.MethodGet, "/top"+query, "")
			require.Equal(t, http.StatusOK, r.status, r.body)
			var top btadmin.TopReply
			require.NoError(t, json.Unmarshal([]byte(r.body), &top))
			if want == 0 {
				require.Empty(t, top.Torrents, query)
				continue
			}
			require.Equal(t, []btadmin.RankedTorrent{{InfoHash: btHex(hash), Count: want}}, top.Torrents, query)
		}
		requireError(t, f.call(http.MethodGet, "/top?by=ratio", ""), http.StatusBadRequest, "want seeders, leechers or snatches")
		requireError(t, f.call(http.MethodGet, "/top?n=0", ""), http.StatusBadRequest, "from 1 to 1000")
		requireError(t, f.call(http.MethodGet, "/top?n=1001", ""), http.StatusBadRequest, "from 1 to 1000")
		requireError(t, f.call(http.MethodGet, "/top?n=ten", ""), http.StatusBadRequest, "from 1 to 1000")

		// A removed passkey is refused once the frontend's cache expires.
		r = f.call(http.MethodDelete, "/users/"+seederKey, "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"passkey": "abcd…"}, decode(t, r.body))
		f.clock.Advance(f.tracker.Config().CacheTTL + time.Second)
		err = f.announce(hash, btPeer("-TR3000-", 1), seederKey, 0, 1)
		require.ErrorContains(t, err, "unknown passkey")

		// So is a client taken off the whitelist.
		r = f.call(http.MethodDelete, "/clients/"+url.PathEscape(odd), "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"prefix": odd, "name": ""}, decode(t, r.body))
		f.clock.Advance(f.tracker.Config().CacheTTL + time.Second)
		err = f.announce(hash, btPeer(odd, 2), leecherKey, 500, 2)
		require.ErrorContains(t, err, "not whitelisted")
		r = f.call(http.MethodDelete, "/clients/-TR3", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodGet, "/clients", "")
		require.Equal(t, btadmin.EmptyWhitelistWarning, decode(t, r.body)["warning"])

		// Passkeys never reach the log or the admin log whole.
		r = f.admin(http.MethodGet, "/log", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		logs := f.logs.String()
		for _, key := range []string{seederKey, leecherKey} {
			require.NotContains(t, logs, key)
			require.NotContains(t, r.body, key)
		}
		require.Contains(t, logs, `msg="admin change: passkey added"`)
		require.Contains(t, logs, "passkey=abcd…")
		require.Contains(t, r.body, `"passkey":"ZYXW…"`)
	})
}

func TestRedactPasskey(t *testing.T) {
	require.Equal(t, "abcd…", btadmin.RedactPasskey("abcdefghijklmnopqrstuvwxyz012345"))
	require.Equal(t, "ab…", btadmin.RedactPasskey("abcdefgh"), "a short passkey shows a quarter")
	require.Equal(t, "…", btadmin.RedactPasskey("abc"))
}

// A registration carries the uploader and the upload's creation time,
// which the reaper reads; bad values are refused and change nothing.
func TestBitTorrentAdminRegistersUploaderAndCreated(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("upload")
		path := "/torrents/" + btHex(hash)

		requireError(t, f.call(http.MethodPut, path, `{"id":"1","uploader":"a b"}`), http.StatusBadRequest, `uploader "a b"`)
		requireError(t, f.call(http.MethodPut, path, `{"id":"1","created":"2999-01-01T00:00:00Z"}`), http.StatusBadRequest, "not in the future")
		requireError(t, f.call(http.MethodPut, path, `{"id":"1","created":"yesterday"}`), http.StatusBadRequest, "")
		_, err := f.adminStore.Torrent(f.ctx, hash)
		require.ErrorIs(t, err, swarm.ErrNotFound, "a refused registration changed nothing")

		r := f.call(http.MethodPut, path, `{"id":"7","uploader":42,"created":"2026-01-02T03:04:05Z"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var record btadmin.TorrentRecord
		r = f.call(http.MethodGet, path, "")
		require.NoError(t, json.Unmarshal([]byte(r.body), &record))
		require.Equal(t, "42", record.Uploader)
		require.NotNil(t, record.Created)
		require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), record.Created.UTC())

		// Changing the id alone keeps the uploader and creation time.
		r = f.call(http.MethodPut, path, `{"id":"8"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		info, err := f.tracker.Torrent(f.ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "8", info.ID)
		require.Equal(t, "42", info.Uploader)
		require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), info.Created.UTC())
		require.Contains(t, f.logs.String(), "uploader=42")
	})
}

// TestPurgeTorrentDeletesEveryRecordAtOnce: DELETE …?purge=true on a
// torrent with a peer unregisters it and refuses the purge (409, saying
// why); once the peer left, the purge deletes every record under the
// torrent's tag in one script (btstore.RemoveTorrent) and records its
// user in cleanup's due set, and the change is logged.
func TestPurgeTorrentDeletesEveryRecordAtOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		hash := btHash("purged.iso")
		const passkey = "abcdefghijklmnopqrstuvwxyz012345"
		path := "/torrents/" + btHex(hash) + "?purge=true"
		for _, call := range [][3]string{{http.MethodPut, "/clients/-TR3", ""}, {http.MethodPut, "/torrents/" + btHex(hash), `{"id":"10"}`},
			{http.MethodPut, "/users/" + passkey, `{"user_id":"7"}`}} {
			r := f.call(call[0], call[1], call[2])
			require.Equal(t, http.StatusOK, r.status, r.body)
		}
		peer := btPeer("-TR3000-", 1)
		require.NoError(t, f.announce(hash, peer, passkey, 0, 1))
		records, err := btstore.ListTorrentRecords(f.ctx, b.Client, hash)
		require.NoError(t, err)
		require.Greater(t, len(records), 3, "record, seeders, users, the user's record, the peer's…")

		requireError(t, f.call(http.MethodDelete, path, ""), http.StatusConflict, "still has peers")
		info, err := f.tracker.Torrent(f.ctx, hash)
		require.NoError(t, err)
		require.Empty(t, info.ID, "unregistered all the same")

		_, err = f.tracker.Announce(f.ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer, Passkey: passkey, Event: bittorrent.EventStopped,
			Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), 6881)})
		require.ErrorContains(t, err, "unregistered torrent", "announces to it are refused; the peer stays until its deadline")
		f.clock.Advance(2 * f.tracker.Config().PeerTimeout)
		_, err = f.tracker.Sweep(f.ctx)
		require.NoError(t, err)
		require.NoError(t, f.tracker.Flush(f.ctx))

		records, err = btstore.ListTorrentRecords(f.ctx, b.Client, hash)
		require.NoError(t, err)
		require.NotEmpty(t, records, "the peer's record, the user's record, the users set, the torrent's record…")
		r := f.call(http.MethodDelete, path, "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, float64(len(records)), decode(t, r.body)["purged_keys"], "every record left after the peer's expiry")
		records, err = btstore.ListTorrentRecords(f.ctx, b.Client, hash)
		require.NoError(t, err)
		require.Empty(t, records)
		_, err = b.Client.ZScore(f.ctx, btstore.OrphanUserDueKey(btstore.OrphanUserDueShard("7")), "7").Result()
		require.NoError(t, err, "its user's set entries are left to cleanup's due set")
		require.Contains(t, f.logs.String(), "torrent purged")
	})
}
