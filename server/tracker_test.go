package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// trackerSource is a BitTorrent plugin as the tracker page sees it: its
// totals and the reaper's labelled series (as btplugin.ReaperMetrics
// names them), one label holding markup that must stay text, and the
// page data it serves through the host (GET /tracker/bittorrent.json):
// three users in two countries, three torrents by score.
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
	months := make([]map[string]any, 12)
	for i := range months {
		months[i] = map[string]any{"month": fmt.Sprintf("2025-%02d", i+1), "users": 0}
	}
	months[11]["users"] = 3
	page, _ := json.Marshal(map[string]any{
		"users": 3, "users_by_month": months,
		"countries":          []map[string]any{{"country": "DE", "users": 2}, {"country": "US", "users": 1}},
		"top_torrents":       []map[string]any{{"info_hash": strings.Repeat("7a02", 10), "score": 1.2}, {"info_hash": strings.Repeat("7a01", 10), "score": 0.8}, {"info_hash": strings.Repeat("7a00", 10), "score": 0.5}},
		"top_torrents_shown": true,
	})
	return fakePlugins{
		pages:  map[string][]byte{"bittorrent": page},
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
	// A redis-server of its own, in parallel with the other browser tests
	// (mostly waiting on Chromium); the page is the same on a cluster.
	b := redistest.Parallel(t)
	source := trackerSource()
	f := newFixture(t, b, server.Config{Plugins: source, PluginAPI: source})
	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	dir, err := filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	line, runErr := runNodeScript(t, t.Context(), node, "tracker.mjs", nodeScriptBound, nil, f.url+"/tracker/", filepath.Join(dir, "tracker.png"))
	var res struct {
		OK     bool                  `json:"ok"`
		Tables map[string][][]string `json:"tables"`
		Totals map[string]string     `json:"totals"`
		Errors []string              `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &res), "tracker.mjs printed: %s (exit %v)", line, runErr)
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
