package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestWebAdminPluginPagesInChromium: the BitTorrent tracker's torrents,
// users, scoring, reaper and outbox are viewed and run from /admin/ in a
// real browser. The plugin is the real hoard-bittorrent binary, out of
// process: its pages reach the host in its gRPC description, and the
// console renders them knowing nothing of the tracker. An admin opens
// every page and registers a torrent through a form; a site account
// (plugin:bittorrent:site), on a phone, is offered only what its scope
// opens and registers one too; a project viewer sees no plugin page. A
// client named <img src=x onerror=alert(1)> shows as text. Set
// HOARD_SCREENSHOT_DIR to keep the screenshots.
func TestWebAdminPluginPagesInChromium(t *testing.T) {
	node := requireBrowser(t)
	bin := filepath.Join(t.TempDir(), "hoard-bittorrent")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/hoard-bittorrent").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	// A redis-server of its own, in parallel with the other browser tests
	// (mostly waiting on Chromium); the page is the same on a cluster.
	b := redistest.Parallel(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	_, err = engine.CreateProject(ctx, "own", queues.SettingsPatch{})
	require.NoError(t, err)
	host, err := pluginhost.NewHost(pluginhost.Options{
		Plugins: []pluginhost.Spec{{Name: "bittorrent", Path: bin, Settings: json.RawMessage(
			`{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","reaper":{"enabled":true,"period":"24h"}}`)}},
		RedisURL: b.URL, Redis: b.Client, Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine),
		Logger: quiet, PIDDir: t.TempDir(),
	})
	require.NoError(t, err)
	require.NoError(t, host.Start(ctx))
	t.Cleanup(func() { _ = host.Stop() })
	require.NoError(t, host.WaitRunning(ctx, "bittorrent"))

	store := accounts.New(b.Client, nil)
	tokens := map[string]string{}
	for role, roles := range map[string][]string{"admin": {"admin"}, "site": {"plugin:bittorrent:site"}, "viewer": {"viewer:own"}} {
		name := map[string]string{"admin": "web-admin", "site": "site-svc", "viewer": "own-viewer"}[role]
		_, err := store.CreateAccount(ctx, name, roles)
		require.NoError(t, err)
		tokens[role], _, err = store.CreateToken(ctx, name, "browser", time.Hour)
		require.NoError(t, err)
	}
	srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Logger: quiet, AdminToken: token, Plugins: host, PluginAPI: host,
		ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { _ = srv.Stop() })

	// A client whose name is markup, added through the API as a site would.
	const xss = "<img src=x onerror=alert(1)>"
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+srv.Addr()+"/api/v1/plugins/bittorrent/clients/qB",
		strings.NewReader(`{"name":"`+xss+`"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else {
		abs, err := filepath.Abs(dir)
		require.NoError(t, err)
		dir = abs
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	hash := strings.Repeat("ab", 20)
	raw, _ := json.Marshal(tokens)
	line, runErr := runNodeScript(t, ctx, node, "adminplugins.mjs", nodeScriptBound, []string{"ADMIN_TOKENS=" + string(raw), "HASH=" + hash}, "http://"+srv.Addr(), dir)
	var res adminBrowserResult
	require.NoError(t, json.Unmarshal([]byte(line), &res), line)
	for _, s := range res.Steps {
		t.Log(s)
	}
	for role, fl := range res.Flashes {
		for _, f := range fl {
			t.Logf("%s: %s", role, f)
		}
	}
	t.Logf("screenshots: %s", strings.Join(res.Screenshots, " "))
	require.Empty(t, res.Errors, "the browser reported problems")
	require.True(t, res.OK, line)
	require.NoError(t, runErr)

	// What the pages did went through the plugin's API, under the
	// accounts' names, into hoard's admin log.
	changes, err := engine.Changes(ctx, "", 100)
	require.NoError(t, err)
	by := map[string]bool{}
	for _, c := range changes {
		by[c.By+": "+c.What] = true
	}
	t.Logf("admin log: %v", by)
	var admin, site bool
	for k := range by {
		admin = admin || strings.HasPrefix(k, "web-admin: bittorrent: ")
		site = site || strings.HasPrefix(k, "site-svc: bittorrent: ")
		require.False(t, strings.HasPrefix(k, "own-viewer"), "the viewer changed nothing: %v", by)
	}
	require.True(t, admin, "the admin's registration is logged under its name: %v", by)
	require.True(t, site, "the site's registration is logged under its name: %v", by)
}
