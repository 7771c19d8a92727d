package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
	"github.com/hoardproject/hoard/server/btadmin"
)

// trackerSource is a BitTorrent plugin as the tracker page sees it: its
// totals and the reaper's labelled series (as btplugin.ReaperMetrics
// names them), one label holding markup that must stay text.
func trackerSource() fakePlugins {
	since := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	torrents := func(state, notify string, n float64) plugins.Metric {
		return plugins.Metric{Name: "reaper_torrents", Help: "Uploads in the reaper's process, by state and notice, at its last run.",
			Kind: plugins.Gauge, Value: n, Labels: map[string]string{"state": state, "notify": notify}}
	}
	steps := func(step string, n float64) plugins.Metric {
		return plugins.Metric{Name: "reaper_steps", Help: "Reaper steps done.", Kind: plugins.Counter, Value: n,
			Labels: map[string]string{"step": step}}
	}
	return fakePlugins{
		status: []pluginhost.Status{{Name: "bittorrent", State: pluginhost.StateRunning, Since: since}},
		stats: map[string]plugins.Stats{"bittorrent": {Metrics: []plugins.Metric{
			{Name: "swarm_seeders", Help: "seeders now", Kind: plugins.Gauge, Value: 12345},
			{Name: "torrents_count", Help: "registered torrents", Kind: plugins.Gauge, Value: 1000000},
			torrents("unseeded", "initial", 2296), torrents("never", "initial", 322),
			torrents("never", "final", 286), torrents("unseeded", "final", 213),
			steps("initial", 1270), steps("final", 887), steps("removed", 346),
			steps("<b>odd</b>", 1),
		}}},
	}
}

func TestTrackerJSONHasTheLabelledSeries(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{Plugins: trackerSource()})
		req, err := http.NewRequest(http.MethodGet, f.url+"/tracker.json", nil)
		require.NoError(t, err)
		r := f.do(req)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		var list []server.PublicPlugin
		require.NoError(t, json.Unmarshal([]byte(r.body), &list))
		require.Len(t, list, 1)
		var got []string
		for _, m := range list[0].Metrics {
			labels := ""
			for _, k := range []string{"notify", "state", "step"} {
				if v, ok := m.Labels[k]; ok {
					labels += " " + k + "=" + v
				}
			}
			got = append(got, m.Name+labels)
		}
		require.Equal(t, []string{
			"reaper_steps step=<b>odd</b>", "reaper_steps step=final", "reaper_steps step=initial", "reaper_steps step=removed",
			"reaper_torrents notify=final state=never", "reaper_torrents notify=final state=unseeded",
			"reaper_torrents notify=initial state=never", "reaper_torrents notify=initial state=unseeded",
			"swarm_seeders", "torrents_count",
		}, got, "every series, sorted by name then labels")

		// The page itself, and the project name it would shadow.
		req, err = http.NewRequest(http.MethodGet, f.url+"/tracker/", nil)
		require.NoError(t, err)
		r = f.do(req)
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, `<script src="/static/tracker.js">`)
		_, err = f.engine.CreateProject(t.Context(), "tracker", queues.SettingsPatch{})
		require.ErrorContains(t, err, "reserved")
	})
}

// TestTrackerPageInChromium: the tracker page in real headless Chromium at
// desktop and phone sizes shows the reaper's uploads by state and notice
// and its steps as tables, counts with thousands separators, a label with
// markup as text, and fits a phone's width.
func TestTrackerPageInChromium(t *testing.T) {
	node := requireBrowser(t)
	b := redistest.Backends()[0]
	require.NoError(t, redistest.Flush(t.Context(), b))
	scorer, metrics := seedViews(t, b)
	f := newFixture(t, b, server.Config{Plugins: trackerSource(), PublicExtensions: []server.PublicExtension{
		&btadmin.TrackerViews{Scorer: scorer, Metrics: metrics, TopTorrents: 3}}})
	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	dir, err := filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(e2eDir, "tracker.mjs"), f.url+"/tracker/", filepath.Join(dir, "tracker.png"))
	cmd.WaitDelay = 5 * time.Second
	out, runErr := cmd.Output()
	line := strings.TrimSpace(string(out))
	if i := strings.LastIndex(line, "\n{"); i >= 0 {
		line = line[i+1:]
	}
	var res struct {
		OK     bool                  `json:"ok"`
		Tables map[string][][]string `json:"tables"`
		Totals map[string]string     `json:"totals"`
		Errors []string              `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &res), "tracker.mjs printed: %s (exit %v)", out, runErr)
	t.Logf("tracker.mjs: %s", line)
	require.Empty(t, res.Errors)
	require.True(t, res.OK, line)
	require.NoError(t, runErr)
	require.Equal(t, [][]string{
		{"final", "never", "286"}, {"final", "unseeded", "213"},
		{"initial", "never", "322"}, {"initial", "unseeded", "2,296"},
	}, res.Tables["reaper_torrents"], "columns notify, state, count")
	require.Equal(t, [][]string{{"<b>odd</b>", "1"}, {"final", "887"}, {"initial", "1,270"}, {"removed", "346"}},
		res.Tables["reaper_steps"], "markup in a label is shown as text")
	require.Equal(t, [][]string{{"DE", "2"}, {"US", "1"}}, res.Tables["countries"])
	months := res.Tables["months"]
	require.Len(t, months, 12)
	require.Equal(t, "3", months[11][1], "this month's unique users")
	top := res.Tables["top"]
	require.Len(t, top, 3, "the operator made 3 public")
	require.Len(t, top[0][0], 40, "an info-hash")
	require.Equal(t, "1.2", top[0][1], "the highest score first")
	require.Equal(t, "1,000,000", res.Totals["torrents count"])
	require.Equal(t, "12,345", res.Totals["seeders"])
}

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
			f := newFixture(t, b, server.Config{AdminToken: token, PublicExtensions: []server.PublicExtension{ext}})
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
