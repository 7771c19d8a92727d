package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/server"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// fakePlugins is a plugin host as the pages see it.
type fakePlugins struct {
	status []pluginhost.Status
	stats  map[string]plugins.Stats
	// pages are the plugins' page data, by plugin name.
	pages map[string][]byte
}

func (f fakePlugins) Status() []pluginhost.Status     { return f.status }
func (f fakePlugins) Stats() map[string]plugins.Stats { return f.stats }

// HandleRequest serves the page data, as a plugin would through the host.
func (f fakePlugins) HandleRequest(_ context.Context, name string, req plugins.Request) (plugins.Response, error) {
	page, ok := f.pages[name]
	if !ok {
		return plugins.Response{}, fmt.Errorf("%w %q", pluginhost.ErrNoPlugin, name)
	}
	if req.Role != plugins.RolePublic || req.Path != plugins.PagePath {
		return plugins.NotFoundResponse(req), nil
	}
	return plugins.Response{Status: http.StatusOK, Body: page,
		Header: http.Header{"Content-Type": {"application/json"}, "Access-Control-Allow-Origin": {"*"}}}, nil
}

func TestPluginTotalsOnTheIndexAndInPluginsJSON(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		since := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
		source := fakePlugins{
			status: []pluginhost.Status{
				{Name: "bittorrent", Path: "/opt/secret/hoard-bittorrent", PID: 4242, State: pluginhost.StateRunning, Since: since, Restarts: 2, LastError: "internal detail"},
				{Name: "idle", State: pluginhost.StateStarting, Since: since},
			},
			stats: map[string]plugins.Stats{"bittorrent": {Metrics: []plugins.Metric{
				{Name: "seeders", Help: "seeders now", Kind: plugins.Gauge, Value: 12},
				{Name: "announces_total", Kind: plugins.Counter, Value: 3456},
				{Name: "refusals_total", Kind: plugins.Counter, Value: 7, Labels: map[string]string{"reason": "unregistered"}},
			}}},
		}
		f := newFixture(t, b, server.Config{Plugins: source})
		get := func(p string) reply {
			req, err := http.NewRequest(http.MethodGet, f.url+p, nil)
			require.NoError(t, err)
			return f.do(req)
		}

		r := get("/plugins.json")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		var list []server.PublicPlugin
		require.NoError(t, json.Unmarshal([]byte(r.body), &list))
		require.Equal(t, []server.PublicPlugin{
			{Name: "bittorrent", State: pluginhost.StateRunning, Since: since, Restarts: 2, Metrics: []server.PublicMetric{
				{Name: "announces_total", Label: "announces", Kind: "counter", Value: 3456},
				{Name: "seeders", Label: "seeders", Help: "seeders now", Kind: "gauge", Value: 12},
			}},
			{Name: "idle", State: pluginhost.StateStarting, Since: since, Metrics: []server.PublicMetric{}},
		}, list, "totals only, sorted; labelled series stay on /metrics")
		require.NotContains(t, r.body, "secret", "the binary's path is not public")
		require.NotContains(t, r.body, "internal detail")
		require.NotContains(t, r.body, "4242")

		r = get("/")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, `<h2>Plugins <a class="muted small" href="/tracker/">tracker page</a></h2>`)
		require.Contains(t, r.body, `<dt title="seeders now">seeders</dt><dd>12</dd>`)
		require.Contains(t, r.body, `<dt title="">announces</dt><dd>3,456</dd>`, "a readable name, and numbers as the project page writes them")
		require.Contains(t, r.body, "running · 2 restarts")
		require.NotContains(t, r.body, "starting · 0 restarts", "a restart count of 0 is not shown")
	})
}

func TestNoPluginsMeansAnEmptyList(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		req, err := http.NewRequest(http.MethodGet, f.url+"/plugins.json", nil)
		require.NoError(t, err)
		r := f.do(req)
		require.Equal(t, http.StatusOK, r.status)
		require.JSONEq(t, `[]`, r.body)
		req, err = http.NewRequest(http.MethodGet, f.url+"/", nil)
		require.NoError(t, err)
		require.NotContains(t, f.do(req).body, "Plugins</h2>")
	})
}
