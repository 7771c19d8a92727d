package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestPluginScopedRoleThroughHoardServe: in a real `hoard serve` running
// the builtin BitTorrent plugin, the scopes the plugin declares reach the
// host, so an account with the role plugin:bittorrent:site registers a
// torrent and reads the outbox, and is refused the client whitelist, the
// reaper and every project, with the role named.
func TestPluginScopedRoleThroughHoardServe(t *testing.T) {
	b := redistest.Require(t)[0]
	require.NoError(t, redistest.Flush(t.Context(), b))
	ctx := t.Context()
	_, err := queues.NewEngine(b.Client, queues.Options{}).CreateProject(ctx, "shop", queues.SettingsPatch{})
	require.NoError(t, err)
	store := accounts.New(b.Client, nil)
	_, err = store.CreateAccount(ctx, "site", []string{"plugin:bittorrent:site"})
	require.NoError(t, err)
	site, _, err := store.CreateToken(ctx, "site", "web1", 0)
	require.NoError(t, err)

	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	trackerPort, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Setenv("HOARD_REDIS_URL", b.URL)
	// Made before the cleanup below, so removed after hoard has stopped.
	dataDir, projectsFile := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "none.json")
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := rootCommand()
		cmd.SetArgs([]string{"serve", "--listen", addr, "--data-dir", dataDir,
			"--projects-file", projectsFile, "--log-level", "error", "--admin-token", "scope-token",
			"--plugin", "bittorrent", "--plugin-settings",
			fmt.Sprintf(`bittorrent={"mode":"private","http":"127.0.0.1:%d","udp4":"","udp6":""}`, trackerPort)})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		done <- cmd.ExecuteContext(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	call := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, "http://"+addr+"/api/v1"+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+site)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	hash := strings.Repeat("ab", 20)
	// The scopes arrive with the plugin's description, once it runs.
	require.Eventually(t, func() bool {
		status, _ := call(http.MethodPut, "/bittorrent/torrents/"+hash, `{"id":"4711"}`)
		return status == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond)
	status, body := call(http.MethodGet, "/bittorrent/torrents/"+hash, "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "4711")
	status, body = call(http.MethodGet, "/bittorrent/outbox/stats", "")
	require.NotEqual(t, http.StatusForbidden, status, body)

	for _, c := range [][2]string{{http.MethodPut, "/bittorrent/clients/qB"}, {http.MethodPost, "/bittorrent/reaper/extend"},
		{http.MethodGet, "/projects/shop"}, {http.MethodPatch, "/projects/shop"}, {http.MethodGet, "/accounts"}} {
		status, body := call(c[0], c[1], `{}`)
		require.Equal(t, http.StatusForbidden, status, "%s %s: %s", c[0], c[1], body)
		require.Contains(t, body, "account site (plugin:bittorrent:site)")
	}
	status, body = call(http.MethodGet, "/projects", "")
	require.Equal(t, http.StatusOK, status, body)
	var list struct{ Projects []string }
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Empty(t, list.Projects, "a site's account reads no project")
}
