package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// recordingAPI is a plugin host whose one plugin, "bittorrent", answers
// every call with what the test set and remembers what it was asked.
type recordingAPI struct {
	mu     sync.Mutex
	got    []plugins.Request
	answer plugins.Response
	err    error
}

func (r *recordingAPI) HandleRequest(_ context.Context, name string, req plugins.Request) (plugins.Response, error) {
	if name != "bittorrent" {
		return plugins.Response{}, fmt.Errorf("%w %q", pluginhost.ErrNoPlugin, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, req)
	return r.answer, r.err
}

func (r *recordingAPI) last(t *testing.T) plugins.Request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.got)
	return r.got[len(r.got)-1]
}

func (r *recordingAPI) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// TestPluginAPIIsForwardedAsSent: the server checks the token before a
// plugin hears of a call, forwards the path still escaped, the query,
// the body, the caller and the role, never the token; passes the answer
// on with its status and only safe headers; records the changes it lists
// with the actor; and serves the old /api/v1/bittorrent/ path as an
// alias.
func TestPluginAPIIsForwardedAsSent(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		api := &recordingAPI{answer: plugins.Response{Status: http.StatusCreated, Body: []byte(`{"ok":true}`),
			Header:  http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"x=1"}, "Cache-Control": {"no-store"}},
			Changes: []plugins.Change{{What: "client whitelisted", Details: json.RawMessage(`{"prefix":"a/b"}`)}}}}
		f := newFixture(t, b, server.Config{AdminToken: token, PluginAPI: api})

		for _, tok := range []string{"", "wrong"} {
			r := f.admin(http.MethodPut, "/plugins/bittorrent/clients/a%2Fb", `{"name":"x"}`, tok)
			require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		}
		require.Zero(t, api.calls(), "a call without the token never reaches the plugin")

		for _, prefix := range []string{"/plugins/bittorrent", "/bittorrent"} {
			req, err := http.NewRequest(http.MethodPut, f.url+"/api/v1"+prefix+"/clients/a%2Fb?x=1&y=%2F", strings.NewReader(`{"name":"x"}`))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(server.ActorHeader, "site@web1")
			r := f.do(req)
			require.Equal(t, http.StatusCreated, r.status, r.body)
			require.JSONEq(t, `{"ok":true}`, r.body)
			require.Equal(t, "no-store", r.header.Get("Cache-Control"))
			require.Empty(t, r.header.Get("Set-Cookie"), "only safe headers of the plugin's answer pass")

			got := api.last(t)
			require.Equal(t, http.MethodPut, got.Method)
			require.Equal(t, "/clients/a%2Fb", got.Path, "an escaped / stays inside its segment (%s)", prefix)
			require.Equal(t, "x=1&y=%2F", got.Query)
			require.Equal(t, `{"name":"x"}`, string(got.Body))
			require.Equal(t, plugins.RoleAdmin, got.Role)
			require.Equal(t, server.BootstrapActor, got.Actor, "the actor is who authenticated, not the header the client sent")
			require.Equal(t, "application/json", got.Header.Get("Content-Type"))
			require.Empty(t, got.Header.Get("Authorization"), "the admin token never reaches a plugin")
		}

		r := f.admin(http.MethodGet, "/log", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"what":"bittorrent: client whitelisted"`)
		require.Contains(t, r.body, `"prefix":"a/b"`)
		require.Contains(t, r.body, `"by":"`+server.BootstrapActor+`"`)
		require.NotContains(t, r.body, `site@web1`)

		// The page data is public, and reaches the plugin as such.
		req, err := http.NewRequest(http.MethodGet, f.url+"/tracker/bittorrent.json", nil)
		require.NoError(t, err)
		r = f.do(req)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		got := api.last(t)
		require.Equal(t, plugins.RolePublic, got.Role)
		require.Equal(t, plugins.PagePath, got.Path)
		require.Empty(t, got.Actor)
	})
}

// TestPluginAPIFailuresAreClear: each way a forward fails has its status
// and code, and a plugin's own error stays in hoard's log.
func TestPluginAPIFailuresAreClear(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for _, c := range []struct {
			err    error
			status int
			code   string
		}{
			{fmt.Errorf("plugin %q: %w", "bittorrent", plugins.ErrUnavailable), http.StatusServiceUnavailable, "plugin_unavailable"},
			{plugins.ErrBusy, http.StatusServiceUnavailable, "plugin_unavailable"},
			{fmt.Errorf("old binary: %w", plugins.ErrNoAPI), http.StatusNotImplemented, "plugin_no_api"},
			{context.DeadlineExceeded, http.StatusGatewayTimeout, "plugin_timeout"},
			{errors.New("redis: secret-host:6379 refused"), http.StatusBadGateway, "plugin_error"},
		} {
			api := &recordingAPI{err: c.err}
			f := newFixture(t, b, server.Config{AdminToken: token, PluginAPI: api})
			r := f.admin(http.MethodGet, "/plugins/bittorrent/stats", "", token)
			require.Equal(t, c.status, r.status, r.body)
			require.Equal(t, c.code, decode(t, r.body)["code"], r.body)
			require.NotContains(t, r.body, "secret-host")
		}
		f := newFixture(t, b, server.Config{AdminToken: token, PluginAPI: &recordingAPI{}})
		r := f.admin(http.MethodGet, "/plugins/nosuch/stats", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		require.Equal(t, "no_plugin", decode(t, r.body)["code"])
		req, err := http.NewRequest(http.MethodGet, f.url+"/tracker/Not_A_Name.json", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, f.do(req).status)

		none := newFixture(t, b, server.Config{AdminToken: token})
		r = none.admin(http.MethodGet, "/bittorrent/stats", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		require.Equal(t, "no_plugin", decode(t, r.body)["code"])
	})
}

// TestHostServesAPluginWhoseStorageItDoesNotKnow: a plugin binary that
// keeps its data under a key prefix of its own ("elsewhere:") has its
// admin API and page data served by the host, which links none of its
// code and writes none of its keys: the calls add the plugin's notes
// under its prefix and keys of hoard's own (the admin log, the plugin's
// work queue), and no BitTorrent key appears.
func TestHostServesAPluginWhoseStorageItDoesNotKnow(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hoard-example")
	build := exec.Command("go", "build", "-o", bin, "../plugins/internal/exampleplugin/cmd/hoard-example")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		host, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "example", Path: bin,
				Settings: json.RawMessage(`{"key_prefix":"elsewhere:","tick_period":"24h"}`)}},
			RedisURL: b.URL, Redis: b.Client, Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine),
			Logger: quiet, PIDDir: t.TempDir(),
		})
		require.NoError(t, err)
		require.NoError(t, host.Start(ctx))
		t.Cleanup(func() { _ = host.Stop() })
		require.NoError(t, host.WaitRunning(ctx, "example"))
		f := newFixture(t, b, server.Config{AdminToken: token, Plugins: host, PluginAPI: host})
		before := allKeys(t, b.Client)

		r := f.admin(http.MethodPut, "/plugins/example/notes/first", `{"text":"hello"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.admin(http.MethodGet, "/plugins/example/notes/first", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"name":"first","text":"hello"}`, r.body)
		r = f.admin(http.MethodGet, "/plugins/example/notes/second", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		req, err := http.NewRequest(http.MethodGet, f.url+"/tracker/example.json", nil)
		require.NoError(t, err)
		r = f.do(req)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 1.0, decode(t, r.body)["notes"], "the page data, from the plugin's own storage")
		r = f.admin(http.MethodGet, "/log", "", token)
		require.Contains(t, r.body, `"what":"example: note kept"`, "the host recorded the change")

		// The plugin's scopes cross the process boundary in its
		// description: a "plugin:example:reader" account reads a note and
		// is refused a write by the host; and the plugin, asked directly
		// with that scope, refuses the write itself.
		var status pluginhost.Status
		for _, st := range host.Status() {
			if st.Name == "example" {
				status = st
			}
		}
		require.Equal(t, []plugins.AdminScope{{Name: "reader", Help: "read notes, keep none",
			Routes: []plugins.ScopeRoute{{Methods: []string{http.MethodGet}, Prefix: "/notes/"}}}},
			status.Description.AdminScopes, "the external plugin's scopes reached the host")
		reader := f.accountToken("reader", "plugin:example:reader")
		r = f.admin(http.MethodGet, "/plugins/example/notes/first", "", reader)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"name":"first","text":"hello"}`, r.body)
		r = f.admin(http.MethodPut, "/plugins/example/notes/first", `{"text":"overwritten"}`, reader)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Contains(t, r.body, "may not PUT")
		resp, err := host.HandleRequest(ctx, "example", plugins.Request{Method: http.MethodPut, Path: "/notes/first",
			Role: plugins.RoleScoped, Scopes: []string{"reader"}, Body: []byte(`{"text":"overwritten"}`)})
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.Status, string(resp.Body))
		require.Empty(t, resp.Changes)
		r = f.admin(http.MethodGet, "/plugins/example/notes/first", "", token)
		require.JSONEq(t, `{"name":"first","text":"hello"}`, r.body, "neither refused write changed the note")

		var added []string
		for _, k := range allKeys(t, b.Client) {
			if !slices.Contains(before, k) {
				added = append(added, k)
			}
		}
		var plugin []string
		for _, k := range added {
			if strings.HasPrefix(k, "elsewhere:") {
				plugin = append(plugin, k)
				continue
			}
			// The host's own keys: the admin log, and the work queue of
			// the project the plugin's item type lives in.
			require.True(t, strings.HasPrefix(k, "hoard:"), "a key of neither hoard nor the plugin: %q", k)
		}
		require.Equal(t, []string{"elsewhere:notes"}, plugin, "the plugin's storage is where it keeps it, and nothing more")
		for _, k := range allKeys(t, b.Client) {
			require.False(t, strings.HasPrefix(k, "hoard:bt:"), "no BitTorrent key: %q", k)
		}
	})
}

// allKeys lists every key, on every master of a cluster.
func allKeys(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		found, err := c.Keys(ctx, "*").Result()
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return err
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(t.Context(), scan))
	} else {
		require.NoError(t, scan(t.Context(), rdb.(*redis.Client)))
	}
	slices.Sort(keys)
	return keys
}

// recordingJobs is a plugin host whose plugin "bittorrent" has the job
// "reaper".
type recordingJobs struct {
	mu  sync.Mutex
	ran []string
}

func (r *recordingJobs) RunJob(_ context.Context, plugin, job string) error {
	switch {
	case plugin != "bittorrent":
		return fmt.Errorf("%w %q", pluginhost.ErrNoPlugin, plugin)
	case job != "reaper":
		return fmt.Errorf("%w: %q", pluginhost.ErrNoJob, job)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, plugin+"/"+job)
	return nil
}

// TestAnOperatorRunsAPluginsJobNow: POST /api/v1/jobs/<plugin>/<job>/run
// needs the token, runs the job, and the admin log says who ran it.
func TestAnOperatorRunsAPluginsJobNow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		jobs := &recordingJobs{}
		f := newFixture(t, b, server.Config{AdminToken: token, PluginJobs: jobs})
		r := f.admin(http.MethodPost, "/jobs/bittorrent/reaper/run", "", "")
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.Empty(t, jobs.ran)

		r = f.admin(http.MethodPost, "/jobs/bittorrent/reaper/run", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, []string{"bittorrent/reaper"}, jobs.ran)
		r = f.admin(http.MethodGet, "/log", "", token)
		require.Contains(t, r.body, `"what":"bittorrent: job run now"`)
		require.Contains(t, r.body, `"job":"reaper"`)

		r = f.admin(http.MethodPost, "/jobs/bittorrent/nosuch/run", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		require.Equal(t, "no_job", decode(t, r.body)["code"])
		r = f.admin(http.MethodPost, "/jobs/nosuch/reaper/run", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		require.Equal(t, "no_plugin", decode(t, r.body)["code"])
	})
}

// TestAScopedCallerReachesThePluginWithItsScope: the forwarder passes the
// caller's own role, never more: an admin's call goes as RoleAdmin, a
// plugin-scoped account's as RoleScoped with the scopes it holds in that
// plugin (not its other roles), and a call its scopes do not open never
// reaches the plugin.
func TestAScopedCallerReachesThePluginWithItsScope(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		api := &recordingAPI{answer: plugins.Response{Status: http.StatusOK, Body: []byte(`{}`)}}
		f := newFixture(t, b, server.Config{AdminToken: token, PluginAPI: api, Plugins: testPlugins{}})
		f.project("own", queues.SettingsPatch{})
		site := f.accountToken("site-svc", "plugin:bittorrent:site", "viewer:own")
		admin := f.accountToken("ops", "admin")

		for _, prefix := range []string{"/plugins/bittorrent", "/bittorrent"} {
			r := f.admin(http.MethodPut, prefix+"/torrents/"+strings.Repeat("ab", 20), `{}`, site)
			require.Equal(t, http.StatusOK, r.status, r.body)
			got := api.last(t)
			require.Equal(t, plugins.RoleScoped, got.Role, prefix)
			require.Equal(t, []string{"site"}, got.Scopes, "only the scopes held in this plugin go")
			require.Equal(t, "site-svc", got.Actor)

			calls := api.calls()
			r = f.admin(http.MethodGet, prefix+"/stats", "", site)
			require.Equal(t, http.StatusForbidden, r.status, r.body)
			require.Equal(t, calls, api.calls(), "a call the scope does not open never reaches the plugin")

			for _, tok := range []string{admin, token} {
				r = f.admin(http.MethodGet, prefix+"/stats", "", tok)
				require.Equal(t, http.StatusOK, r.status, r.body)
				got = api.last(t)
				require.Equal(t, plugins.RoleAdmin, got.Role)
				require.Empty(t, got.Scopes)
			}
		}
	})
}
