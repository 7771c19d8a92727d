package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// adminBrowserResult is the JSON line leaderboard/e2e/admin.mjs prints.
type adminBrowserResult struct {
	OK          bool                `json:"ok"`
	Steps       []string            `json:"steps"`
	Flashes     map[string][]string `json:"flashes"`
	Screenshots []string            `json:"screenshots"`
	Errors      []string            `json:"errors"`
}

// TestWebAdminInChromium is issue 24's proof in a real browser: an admin,
// a project admin and a viewer sign in to /admin/ and use its controls at
// desktop and phone sizes; the project admin is refused another project
// and the viewer every change, by the API; an item named
// <img src=x onerror=alert(1)> and a title with markup show as text; the
// admin log names the account. Set HOARD_SCREENSHOT_DIR to keep the
// screenshots.
func TestWebAdminInChromium(t *testing.T) {
	node := requireBrowser(t)
	// A redis-server of its own, in parallel with the other browser tests
	// (mostly waiting on Chromium); the page is the same on a cluster.
	b := redistest.Parallel(t)
	ctx := t.Context()
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	title := "<b>Own</b> shop"
	for _, slug := range []string{"own", "other", "doomed"} {
		_, err := engine.CreateProject(ctx, slug, queues.SettingsPatch{Title: &title})
		require.NoError(t, err)
	}
	const xss = "<img src=x onerror=alert(1)>"
	_, err := engine.Enqueue(ctx, "own", queues.Target{Queue: queues.QueueTodo},
		[]queues.QueueItem{{Name: xss}, {Name: "user:a"}, {Name: "user:b"}})
	require.NoError(t, err)
	_, err = engine.Claim(ctx, queues.ClaimRequest{Project: "own", Downloader: "tester1", Count: 3})
	require.NoError(t, err)
	// Three failed items, reported by their claimant with a reason that
	// holds markup: the admin deletes one and requeues another in the page.
	const xssFailed = "<img src=x onerror=alert(3)>"
	_, err = engine.Enqueue(ctx, "own", queues.Target{Queue: queues.QueueTodo},
		[]queues.QueueItem{{Name: xssFailed}, {Name: "fail:delete"}, {Name: "fail:keep"}})
	require.NoError(t, err)
	_, err = engine.Claim(ctx, queues.ClaimRequest{Project: "own", Downloader: "tester2", Count: 3})
	require.NoError(t, err)
	_, err = engine.ReportFailure(ctx, queues.FailRequest{Project: "own", Downloader: "tester2",
		Items: []string{xssFailed, "fail:delete", "fail:keep"}, Reason: "<script>alert(4)</script>"})
	require.NoError(t, err)

	store := accounts.New(b.Client, nil)
	tokens := map[string]string{}
	for role, roles := range map[string][]string{"admin": {"admin"}, "padmin": {"project-admin:own"}, "viewer": {"viewer:own"}} {
		name := map[string]string{"admin": "web-admin", "padmin": "own-crew", "viewer": "own-viewer"}[role]
		_, err := store.CreateAccount(ctx, name, roles)
		require.NoError(t, err)
		tokens[role], _, err = store.CreateToken(ctx, name, "browser", time.Hour)
		require.NoError(t, err)
	}

	srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Logger: quiet, AdminToken: token,
		ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { _ = srv.Stop() })

	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else {
		abs, err := filepath.Abs(dir)
		require.NoError(t, err)
		dir = abs
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	raw, _ := json.Marshal(tokens)
	line, runErr := runNodeScript(t, ctx, node, "admin.mjs", nodeScriptBound, []string{"ADMIN_TOKENS=" + string(raw)}, "http://"+srv.Addr(), dir)
	var res adminBrowserResult
	require.NoError(t, json.Unmarshal([]byte(line), &res), line)
	for _, s := range res.Steps {
		t.Log(s)
	}
	require.Contains(t, res.Steps, "admin: confirm: move glob page:* from todo to secondary: 2 items (of 3 read). Move them?",
		"the move was previewed with its count")
	for role, fl := range res.Flashes {
		for _, f := range fl {
			t.Logf("%s: %s", role, f)
		}
	}
	t.Logf("screenshots: %s", strings.Join(res.Screenshots, " "))
	require.Empty(t, res.Errors, "the browser reported problems")
	require.True(t, res.OK, line)
	require.NoError(t, runErr)

	// What the page did went through the API, under the accounts' names.
	p, err := engine.Project(ctx, "own")
	require.NoError(t, err)
	require.False(t, p.Paused, "paused and resumed")
	require.Equal(t, 777, p.ClaimsLimit)
	require.Len(t, p.LimitGroups, 1, "the page's limit group, and not the refused bad one")
	require.Equal(t, "users", p.LimitGroups[0].Name)
	_, err = engine.Project(ctx, "doomed")
	require.Error(t, err, "deleted")
	counts, err := engine.Counts(ctx, "own")
	require.NoError(t, err)
	require.EqualValues(t, 2, counts.Secondary, "page:one and page:two moved")
	require.EqualValues(t, 2, counts.Out, "one claim released")
	require.EqualValues(t, 1, counts.Failed, "one failed item deleted, one requeued, the viewer's requeue refused")
	failed, _, err := engine.FailedItems(ctx, "own", 0, 10)
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, "fail:keep", failed[0].Item)
	status, err := engine.ItemStatus(ctx, "own", xssFailed)
	require.NoError(t, err)
	require.Equal(t, queues.StateTodo, status.State, "requeued")
	changes, err := engine.Changes(ctx, "own", 100)
	require.NoError(t, err)
	by := map[string]bool{}
	for _, c := range changes {
		by[c.By+": "+c.What] = true
	}
	require.True(t, by["web-admin: items moved"], "%v", by)
	require.True(t, by["own-crew: settings changed"], "%v", by)
	require.True(t, by["web-admin: blocked"], "%v", by)
	require.True(t, by["web-admin: failed items requeued"], "%v", by)
	require.True(t, by["web-admin: failed items deleted"], "%v", by)
	for k := range by {
		require.False(t, strings.HasPrefix(k, "own-viewer"), "the viewer changed nothing: %v", by)
	}
	crew, err := store.Tokens(ctx, "own-crew")
	require.NoError(t, err)
	require.Len(t, crew, 2, "the project admin made itself a token in the page")
	require.Equal(t, "phone", crew[1].Name)
	require.NotNil(t, crew[1].ExpiresAt)
	blocks, err := engine.Blocks(ctx, "own")
	require.NoError(t, err)
	require.Len(t, blocks, 1, "the viewer's block was refused")
	require.Equal(t, "web-admin", blocks["tester9"].By)
}
