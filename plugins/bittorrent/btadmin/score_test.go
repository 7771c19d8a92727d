package btadmin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestBitTorrentAdminTrackersAndScores: external trackers are set with
// the torrent's PUT or their own sub-resource, checked whole (a bad list
// changes nothing, the registration included); a torrent's score view
// shows its sources and history; the top list merges the shards.
func TestBitTorrentAdminTrackersAndScores(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		_, policy, err := scoring.ParseSettings([]byte(`{"allow_private_targets":true}`), false)
		require.NoError(t, err)
		scorer := scoring.New(b.Client, policy, nil, quiet)
		f.fixture = newFixture(t, b, parts{admin: &btadmin.Admin{Store: f.adminStore, Scorer: scorer}, logger: quiet})
		hash := btHash("scored.iso")
		path := "/torrents/" + btHex(hash)

		requireError(t, f.call(http.MethodPut, path, `{"id":"1","trackers":[{"url":"ftp://127.0.0.1:1/announce"}]}`),
			http.StatusBadRequest, "the scheme must be udp, http or https")
		requireError(t, f.call(http.MethodPut, path, `{"id":"1","trackers":[{"url":"udp://127.0.0.1/announce"}]}`),
			http.StatusBadRequest, "a udp tracker needs host:port")
		_, err = f.adminStore.Torrent(f.ctx, hash)
		require.ErrorIs(t, err, swarm.ErrNotFound, "a refused call registered nothing")

		r := f.call(http.MethodPut, path, `{"id":"1","trackers":[{"url":"udp://127.0.0.1:6969/announce","max_peers":200},{"url":"http://127.0.0.1:6969/announce"}]}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var reg btadmin.RegisterTorrentReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &reg))
		require.Equal(t, []scoring.Tracker{{URL: "udp://127.0.0.1:6969/announce", MaxPeers: 200}, {URL: "http://127.0.0.1:6969/announce", MaxPeers: 50}}, reg.Trackers)

		trackers := func() btadmin.TrackersReply {
			r := f.call(http.MethodGet, path+"/trackers", "")
			require.Equal(t, http.StatusOK, r.status, r.body)
			var reply btadmin.TrackersReply
			require.NoError(t, json.Unmarshal([]byte(r.body), &reply))
			return reply
		}
		require.Equal(t, []scoring.Tracker{{URL: "http://127.0.0.1:6969/announce", MaxPeers: 50}, {URL: "udp://127.0.0.1:6969/announce", MaxPeers: 200}}, trackers().Trackers)

		// A PUT without trackers leaves them.
		require.Equal(t, http.StatusOK, f.call(http.MethodPut, path, `{"id":"2"}`).status)
		require.Len(t, trackers().Trackers, 2)

		for body, says := range map[string]string{
			`{"trackers":[{"url":"udp://127.0.0.1:1/a","max_peers":5000}]}`:              "max peers 5000 is not 1 to 1000",
			`{"trackers":[{"url":"udp://127.0.0.1:1/a"},{"url":"udp://127.0.0.1:1/a"}]}`: "listed twice",
			`{"trackers":[{"url":"http://u:p@127.0.0.1:1/a"}]}`:                          "no user info",
			`{}`: "the body needs the list",
			`{"trackers":[{"url":"udp://127.0.0.1:1/a","extra":1}]}`: "unknown field",
		} {
			requireError(t, f.call(http.MethodPut, path+"/trackers", body), http.StatusBadRequest, says)
			require.Len(t, trackers().Trackers, 2, "%s changed nothing", body)
		}
		r = f.call(http.MethodPut, path+"/trackers", `{"trackers":[{"url":"udp://127.0.0.1:7000/announce"}]}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 2, *decodeTrackers(t, r.body).Before)
		require.Equal(t, []scoring.Tracker{{URL: "udp://127.0.0.1:7000/announce", MaxPeers: 50}}, trackers().Trackers)
		r = f.call(http.MethodDelete, path+"/trackers", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Empty(t, trackers().Trackers)

		// Scores: never scored is 404; then the view and the top list.
		requireError(t, f.call(http.MethodGet, path+"/score", ""), http.StatusNotFound, "never been scored")
		other := btHash("other.iso")
		for _, h := range [][20]byte{hash, other} {
			require.NoError(t, f.adminStore.Register(f.ctx, h, swarm.Registration{ID: "9"}))
			_, err := scorer.Track(f.ctx, h)
			require.NoError(t, err)
		}
		item, err := scorer.NextItem(f.ctx, hash)
		require.NoError(t, err)
		_, err = scorer.Apply(f.ctx, item, scoring.Result{Peers: 0, Max: 50})
		require.NoError(t, err)
		r = f.call(http.MethodGet, path+"/score", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var v scoring.View
		require.NoError(t, json.Unmarshal([]byte(r.body), &v))
		require.Equal(t, "active", v.State)
		require.Equal(t, 0.5, v.Score)
		require.Len(t, v.History, 1)
		require.Equal(t, 1.0, v.History[0].Previous)
		require.Equal(t, "swarm", v.Sources[0].Source)
		require.Equal(t, 0.5, *v.Sources[0].Line)

		r = f.call(http.MethodGet, "/scores/top?n=2", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var top btadmin.TopScoresReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &top))
		require.Equal(t, []scoring.Ranked{{InfoHash: btHex(other), Score: 1}, {InfoHash: btHex(hash), Score: 0.5}}, top.Torrents)
		requireError(t, f.call(http.MethodGet, "/scores/top?n=0", ""), http.StatusBadRequest, "from 1 to 1000")

		off := newFixture(t, b, parts{admin: &btadmin.Admin{Store: f.adminStore}, logger: quiet})
		requireError(t, off.admin(http.MethodGet, "/bittorrent/scores/top", "", token), http.StatusServiceUnavailable, "no scoring store")
	})
}

func decodeTrackers(t *testing.T, body string) btadmin.TrackersReply {
	t.Helper()
	var reply btadmin.TrackersReply
	require.NoError(t, json.Unmarshal([]byte(body), &reply))
	return reply
}

// TestARegisteredTorrentShowsItsScoreAtOnce: with scoring on, a torrent
// registered through the API is scored from that moment, at 1.0 with no
// round processed yet, instead of answering 404 until the scoring job's
// next run (up to an hour).
func TestARegisteredTorrentShowsItsScoreAtOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newBTFixture(t, b)
		_, policy, err := scoring.ParseSettings(nil, true)
		require.NoError(t, err)
		scorer := scoring.New(b.Client, policy, nil, quiet)
		f.fixture = newFixture(t, b, parts{admin: &btadmin.Admin{Store: f.adminStore, Scorer: scorer, ScoreOnRegister: true}, logger: quiet})
		path := "/torrents/" + btHex(btHash("fresh.iso"))

		r := f.call(http.MethodPut, path, `{"id":"1"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.call(http.MethodGet, path+"/score", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var v scoring.View
		require.NoError(t, json.Unmarshal([]byte(r.body), &v))
		require.Equal(t, "active", v.State)
		require.Equal(t, 1.0, v.Score)
		require.Zero(t, v.Round, "not yet processed")
		require.Empty(t, v.History)
		require.True(t, v.Indexed, "in the index the scoring job reads")
	})
}
