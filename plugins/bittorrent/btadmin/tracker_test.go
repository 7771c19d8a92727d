package btadmin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// seedViews writes what the tracker page's seed 002 views read, through
// the real stores: three torrents scored once (no peers, some, a full
// reply of new ones) and three users in two countries.
func seedViews(t *testing.T, b redistest.Backend) (*scoring.Scorer, *ipmetrics.Store) {
	t.Helper()
	ctx := t.Context()
	_, policy, err := scoring.ParseSettings(nil, false)
	require.NoError(t, err)
	scorer := scoring.New(b.Client, policy, nil, quiet)
	store, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Stop() })
	for i, r := range []scoring.Result{{Peers: 0, Max: 50}, {Peers: 10, New: 10, Max: 50}, {Peers: 60, New: 60, Max: 50}} {
		hash := bittorrent.InfoHash{0x7a, byte(i)}
		require.NoError(t, store.Register(ctx, hash, swarm.Registration{ID: fmt.Sprintf("v%d", i)}))
		_, err := scorer.Track(ctx, hash)
		require.NoError(t, err)
		item, err := scorer.NextItem(ctx, hash)
		require.NoError(t, err)
		_, err = scorer.Apply(ctx, item, r)
		require.NoError(t, err)
	}
	metrics := ipmetrics.NewStore(b.Client, nil, 0)
	_, err = metrics.Register(ctx, []ipmetrics.Registration{
		{IP: netip.MustParseAddr("192.0.2.1"), Loc: ipmetrics.Location{Country: "DE", City: "Berlin"}, Global: true},
		{IP: netip.MustParseAddr("192.0.2.2"), Loc: ipmetrics.Location{Country: "DE", City: "Hamburg"}, Global: true},
		{IP: netip.MustParseAddr("2001:db8::1"), Loc: ipmetrics.Location{Country: "US"}, Global: true},
	})
	require.NoError(t, err)
	return scorer, metrics
}

// TestTrackerViewsArePublicAndBounded: /tracker/bittorrent.json needs no
// token and shows unique users per month and per country; torrents by
// score only when the operator made them public; one read serves every
// caller for CacheFor.
func TestTrackerViewsArePublicAndBounded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		scorer, metrics := seedViews(t, b)
		now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		hidden := &btadmin.TrackerViews{Scorer: scorer, Metrics: metrics, Now: func() time.Time { return now }}
		shown := &btadmin.TrackerViews{Scorer: scorer, Metrics: metrics, TopTorrents: 2}
		read := func(ext *btadmin.TrackerViews) btadmin.TrackerViewsReply {
			f := newFixture(t, b, parts{views: ext})
			req, err := http.NewRequest(http.MethodGet, f.url+"/tracker/bittorrent.json", nil)
			require.NoError(t, err)
			r := f.do(req)
			require.Equal(t, http.StatusOK, r.status, "public: no token sent")
			require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
			var reply btadmin.TrackerViewsReply
			require.NoError(t, json.Unmarshal([]byte(r.body), &reply))
			return reply
		}
		reply := read(hidden)
		require.EqualValues(t, 3, reply.Users)
		require.Equal(t, []ipmetrics.PlaceCount{{Country: "DE", Users: 2}, {Country: "US", Users: 1}}, reply.Countries)
		require.Len(t, reply.UsersByMonth, 12)
		require.EqualValues(t, 3, reply.UsersByMonth[11].Users, "this month")
		require.False(t, reply.TopShown)
		require.Empty(t, reply.TopTorrents, "info-hashes stay private unless the operator says otherwise")

		top, err := scorer.Top(t.Context(), 2)
		require.NoError(t, err)
		require.Len(t, top, 2)
		require.Greater(t, top[0].Score, top[1].Score)
		reply = read(shown)
		require.True(t, reply.TopShown)
		require.Equal(t, top, reply.TopTorrents)

		// Cached: a new user shows only once CacheFor has passed.
		_, err = metrics.Register(t.Context(), []ipmetrics.Registration{
			{IP: netip.MustParseAddr("198.51.100.7"), Loc: ipmetrics.Location{Country: "FR"}, Global: true}})
		require.NoError(t, err)
		require.EqualValues(t, 3, read(hidden).Users)
		now = now.Add(11 * time.Second)
		require.EqualValues(t, 4, read(hidden).Users)
	})
}
