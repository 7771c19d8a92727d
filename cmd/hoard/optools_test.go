package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestCLIOperatorTools: the project lifecycle (title, pause and resume,
// delete with its confirmations), the claims list and export with their
// filters, and the log of every change, through the command line against
// a real server, with their bad input; the backfeed secret set on the
// command line is in neither the server's log nor `hoard log`.
func TestCLIOperatorTools(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: logger, Clock: clock})
		dir := t.TempDir()
		offloader := &queues.Offloader{Engine: engine, Dir: dir, Node: "cli-node", Logger: logger}
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: logger, Offloader: offloader}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		ctx := context.Background()
		secret := "Cli_backfeed_secret_99"

		out, err := runCLI(t, ts.URL, "project", "create", "ops", "--title", "Ops", "--backfeed-secret", secret)
		require.NoError(t, err, out)
		// The terminal shows the secret's fingerprint unless asked.
		fingerprint := "fp:" + queues.SecretFingerprint(secret)
		require.NotContains(t, out, secret)
		require.Contains(t, out, fingerprint)
		out, err = runCLI(t, ts.URL, "project", "show", "ops")
		require.NoError(t, err, out)
		require.NotContains(t, out, secret)
		require.Contains(t, out, fingerprint)
		out, err = runCLI(t, ts.URL, "project", "show", "ops", "--show-secret")
		require.NoError(t, err, out)
		require.Contains(t, out, `"`+secret+`"`)
		out, err = runCLI(t, ts.URL, "log")
		require.NoError(t, err, out)
		require.NotContains(t, out, secret)
		require.Contains(t, out, `"secret_fp":"`+queues.SecretFingerprint(secret)+`"`)
		out, err = runCLI(t, ts.URL, "project", "set", "ops", "--title", "Operations")
		require.NoError(t, err, out)
		require.Contains(t, out, `"title": "Operations"`)
		require.NotContains(t, out, secret)
		out, err = runCLI(t, ts.URL, "project", "pause", "ops")
		require.NoError(t, err, out)
		require.Contains(t, out, "ops: paused=true")
		project, err := engine.Project(ctx, "ops")
		require.NoError(t, err)
		require.True(t, project.Paused)
		out, err = runCLI(t, ts.URL, "project", "resume", "ops")
		require.NoError(t, err, out)
		require.Contains(t, out, "ops: paused=false")
		_, err = runCLI(t, ts.URL, "project", "pause", "nosuch")
		require.ErrorContains(t, err, "no project")

		items := make([]queues.QueueItem, 30)
		for i := range items {
			items[i] = queues.QueueItem{Name: fmt.Sprintf("item-%02d", i)}
		}
		_, err = engine.Enqueue(ctx, "ops", queues.Target{}, items)
		require.NoError(t, err)
		_, err = engine.Claim(ctx, queues.ClaimRequest{Project: "ops", Downloader: "alice", IP: "10.0.0.1", Count: 20})
		require.NoError(t, err)
		clock.Advance(2 * time.Hour)
		_, err = engine.Claim(ctx, queues.ClaimRequest{Project: "ops", Downloader: "bob_1", IP: "10.0.0.2", Count: 10})
		require.NoError(t, err)

		rows := func(out string, who string) int {
			return len(regexp.MustCompile(`(?m)^item-\d\d\s+`+who+`\s`).FindAllString(out, -1))
		}
		out, err = runCLI(t, ts.URL, "claims", "list", "ops")
		require.NoError(t, err, out)
		require.Regexp(t, `ITEM\s+DOWNLOADER\s+CLAIMED AT\s+TIMES\s+DEADLINE`, out)
		require.Equal(t, 20, rows(out, "alice"))
		require.Equal(t, 10, rows(out, "bob_1"))
		require.Regexp(t, `item-\d\d\s+alice\s+2026-11-22 12:00:00\s+1\s+2026-11-22 18:00:00`, out)
		out, err = runCLI(t, ts.URL, "claims", "list", "ops", "--downloader", "bob_1")
		require.NoError(t, err, out)
		require.Equal(t, 0, rows(out, "alice"))
		require.Equal(t, 10, rows(out, "bob_1"))
		out, err = runCLI(t, ts.URL, "claims", "list", "ops", "--older-than", "1h")
		require.NoError(t, err, out)
		require.Equal(t, 20, rows(out, "alice"))
		require.Equal(t, 0, rows(out, "bob_1"))
		out, stderr, err := runCLIWithStderr(t, ts.URL, "claims", "list", "ops", "--limit", "5")
		require.NoError(t, err, out)
		require.Equal(t, 5, rows(out, "alice"))
		require.Contains(t, stderr, "5 claims shown; cut short by --limit 5: there are more")
		out, stderr, err = runCLIWithStderr(t, ts.URL, "claims", "list", "ops", "--limit", "30")
		require.NoError(t, err, out)
		require.Equal(t, 30, rows(out, "alice")+rows(out, "bob_1"))
		require.NotContains(t, stderr, "cut short", "a listing that shows everything does not say it was cut")
		_, err = runCLI(t, ts.URL, "claims", "list", "ops", "--older-than", "abc")
		require.ErrorContains(t, err, `--older-than "abc" is not a duration like 30m, 6h or 2h30m`)
		_, err = runCLI(t, ts.URL, "claims", "list", "nosuch")
		require.ErrorContains(t, err, "no project")

		exported := filepath.Join(t.TempDir(), "out.tsv")
		out, err = runCLI(t, ts.URL, "claims", "export", "ops", "-o", exported)
		require.NoError(t, err, out)
		raw, err := os.ReadFile(exported)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
		require.Len(t, lines, 30)
		require.Regexp(t, `^item-\d\d\talice\t2026-11-22T12:00:00\.000Z$`, lines[0])
		require.Regexp(t, `^item-\d\d\tbob_1\t2026-11-22T14:00:00\.000Z$`, lines[29])
		out, err = runCLI(t, ts.URL, "claims", "export", "ops", "--downloader", "bob_1")
		require.NoError(t, err, out)
		require.Equal(t, 10, strings.Count(out, "\tbob_1\t"))
		require.NotContains(t, out, "alice")
		out, err = runCLI(t, ts.URL, "claims", "export", "ops", "--older-than", "1h")
		require.NoError(t, err, out)
		require.Equal(t, 20, strings.Count(out, "\talice\t"))
		require.NotContains(t, out, "bob_1")
		_, err = runCLI(t, ts.URL, "claims", "export", "ops", "--older-than", "soon")
		require.ErrorContains(t, err, `--older-than "soon" is not a duration`)
		_, err = runCLI(t, ts.URL, "claims", "export", "nosuch", "-o", filepath.Join(t.TempDir(), "x"))
		require.ErrorContains(t, err, "no project")

		// Deleting: --yes is required, then --force with claims out.
		segments := filepath.Join(dir, "segments", "ops")
		require.NoError(t, os.MkdirAll(segments, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(segments, "000000000001.gz"), nil, 0o600))
		_, err = runCLI(t, ts.URL, "project", "delete", "ops")
		require.ErrorContains(t, err, "run again with --yes")
		_, err = runCLI(t, ts.URL, "project", "delete", "ops", "--yes")
		require.ErrorContains(t, err, "has 30 item(s) out")
		require.ErrorContains(t, err, "add --force")
		_, err = engine.Project(ctx, "ops")
		require.NoError(t, err, "a refused deletion deletes nothing")
		_, err = runCLI(t, ts.URL, "project", "delete", "nosuch", "--yes")
		require.ErrorContains(t, err, "no project")
		out, err = runCLI(t, ts.URL, "project", "delete", "ops", "--yes", "--force")
		require.NoError(t, err, out)
		require.Regexp(t, `deleted project ops: \d+ keys, 1 files, 30 claims were out`, out)
		_, err = engine.Project(ctx, "ops")
		require.Equal(t, queues.CodeProjectNotFound, queues.CodeOf(err))
		require.NoDirExists(t, segments)

		// The log shows every change; --global only the global ones.
		out, err = runCLI(t, ts.URL, "project", "create", "other", "--title", "Other")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "log")
		require.NoError(t, err, out)
		require.Regexp(t, `ops\s+HOARD_ADMIN_TOKEN\s+project deleted`, out, "the log names who made the change: here the bootstrap admin")
		require.Regexp(t, `other\s+HOARD_ADMIN_TOKEN\s+project created`, out)
		out, err = runCLI(t, ts.URL, "log", "--global")
		require.NoError(t, err, out)
		require.Contains(t, out, "project deleted")
		require.NotContains(t, out, "project created")
		out, err = runCLI(t, ts.URL, "log", "--project", "other")
		require.NoError(t, err, out)
		require.Contains(t, out, "project created")
		require.NotContains(t, out, "project deleted")
		_, err = runCLI(t, ts.URL, "log", "--project", "other", "--global")
		require.ErrorContains(t, err, "exclude each other")

		require.NotContains(t, logs.String(), secret)
		require.Contains(t, logs.String(), queues.SecretFingerprint(secret))
	})
}
