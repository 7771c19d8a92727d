package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestCLIAccountsAndTokens: the bootstrap admin adds an account and its
// token with the CLI; with that token (HOARD_TOKEN) the CLI runs the
// account's project, says plainly which role refused a command, manages
// its own tokens, and the admin log names the account.
func TestCLIAccountsAndTokens(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		engine, ts := cliServer(t, b)
		for _, slug := range []string{"shop", "news"} {
			_, err := engine.CreateProject(context.Background(), slug, queues.SettingsPatch{})
			require.NoError(t, err)
		}

		t.Setenv("HOARD_TOKEN", "")
		out, err := runCLI(t, ts.URL, "account", "add", "alice", "--role", "project-admin:shop", "--role", "viewer:news")
		require.NoError(t, err, out)
		require.Contains(t, out, "added alice (project-admin:shop, viewer:news)")
		_, err = runCLI(t, ts.URL, "account", "add", "bob", "--role", "overlord")
		require.ErrorContains(t, err, `unknown role "overlord"`)
		out, err = runCLI(t, ts.URL, "token", "create", "laptop", "--account", "alice")
		require.NoError(t, err, out)
		alice := strings.TrimSpace(out)
		require.Regexp(t, `^hoard_\S+$`, alice, "the token alone on stdout")

		t.Setenv("HOARD_TOKEN", alice)
		out, err = runCLI(t, ts.URL, "project", "set", "shop", "--title", "The shop")
		require.NoError(t, err, out)
		_, err = runCLI(t, ts.URL, "project", "set", "news", "--title", "Mine")
		require.ErrorContains(t, err, "refused: your role does not allow this: account alice (project-admin:shop, viewer:news) may not PATCH /api/v1/projects/:slug: that needs admin or project-admin:news (HTTP 403)")
		_, err = runCLI(t, ts.URL, "account", "list")
		require.ErrorContains(t, err, "refused: your role does not allow this")
		_, err = engine.Enqueue(context.Background(), "shop", queues.Target{Queue: queues.QueueTodo},
			[]queues.QueueItem{{Name: "user:a"}, {Name: "user:b"}, {Name: "post:1"}})
		require.NoError(t, err)
		out, err = runCLI(t, ts.URL, "queue", "move", "shop", "--from", "todo", "--to", "secondary", "--type", "user", "--dry-run")
		require.NoError(t, err, out)
		require.Contains(t, out, "would move 2 items from todo to secondary (3 looked at); nothing moved")
		counts, err := engine.Counts(context.Background(), "shop")
		require.NoError(t, err)
		require.EqualValues(t, 3, counts.Todo)
		out, err = runCLI(t, ts.URL, "token", "create", "ci")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "token", "list")
		require.NoError(t, err, out)
		require.Regexp(t, `(?m)^[0-9a-f]{16}\s+alice\s+ci\s`, out)
		require.NotContains(t, out, "hoard_", "a listing never shows a token")
		id := regexp.MustCompile(`(?m)^([0-9a-f]{16})\s+alice\s+ci\s`).FindStringSubmatch(out)[1]
		out, err = runCLI(t, ts.URL, "token", "revoke", id)
		require.NoError(t, err, out)

		t.Setenv("HOARD_TOKEN", "")
		out, err = runCLI(t, ts.URL, "account", "list")
		require.NoError(t, err, out)
		require.Regexp(t, `alice\s+project-admin:shop, viewer:news`, out)
		out, err = runCLI(t, ts.URL, "account", "set", "alice", "--role", "viewer:*")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "log", "--project", "shop")
		require.NoError(t, err, out)
		require.Regexp(t, `alice\s+settings changed`, out, "the log names the account, not the machine's user")
		out, err = runCLI(t, ts.URL, "account", "remove", "alice")
		require.NoError(t, err, out)
		require.Contains(t, out, "revoked its 1 token(s)")
		t.Setenv("HOARD_TOKEN", alice)
		_, err = runCLI(t, ts.URL, "queue", "counts", "shop")
		require.ErrorContains(t, err, "HTTP 401")
	})
}
