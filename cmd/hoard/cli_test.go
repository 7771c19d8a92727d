package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// runCLI runs the hoard command line against url and returns its stdout.
func runCLI(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	t.Setenv("HOARD_URL", url)
	t.Setenv("HOARD_ADMIN_TOKEN", "cli-token")
	stdout := os.Stdout
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stdout = w
	cmd := rootCommand()
	cmd.SetArgs(args)
	var out bytes.Buffer
	cmd.SetOut(&out)
	runErr := cmd.ExecuteContext(context.Background())
	w.Close()
	os.Stdout = stdout
	printed, _ := io.ReadAll(r)
	return out.String() + string(printed), runErr
}

// cliServer serves hoard's API over b's Redis with the CLI tests' admin
// token ("cli-token"), closed when the test ends.
func cliServer(t *testing.T, b redistest.Backend) (*queues.Engine, *httptest.Server) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet}, engine)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return engine, ts
}

func TestCLIAgainstARealServer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		engine, ts := cliServer(t, b)

		out, err := runCLI(t, ts.URL, "project", "create", "cliproj", "--title", "CLI", "--claims-limit", "100000")
		require.NoError(t, err, out)
		require.Contains(t, out, `"title": "CLI"`)
		_, err = runCLI(t, ts.URL, "project", "create", "cliproj")
		require.ErrorContains(t, err, "already exists")
		out, err = runCLI(t, ts.URL, "project", "set", "cliproj", "--reclaim", "--reclaim-ttl", "2h", "--min-version", "20240101.01")
		require.NoError(t, err, out)
		project, err := engine.Project(context.Background(), "cliproj")
		require.NoError(t, err)
		require.True(t, project.ReclaimEnabled)
		require.Equal(t, queues.Duration(2*time.Hour), project.ReclaimTTL)

		// 25,000 lines with blanks and malformed ones, in small batches.
		var input strings.Builder
		for i := 0; i < 25000; i++ {
			switch {
			case i%5000 == 1:
				input.WriteString("bad\x00line\n")
			case i%5000 == 2:
				input.WriteString("\n")
			case i%5000 == 3:
				input.WriteString(strings.Repeat("z", queues.MaxItemBytes+10) + "\n")
			default:
				fmt.Fprintf(&input, "item-%06d\r\n", i)
			}
		}
		path := filepath.Join(t.TempDir(), "items.txt")
		require.NoError(t, os.WriteFile(path, []byte(input.String()), 0o600))
		out, err = runCLI(t, ts.URL, "queue", "add", "cliproj", path, "--batch", "3000")
		require.NoError(t, err, out)
		require.Contains(t, out, "queued 24985 items into todo of cliproj; skipped 10 malformed and 5 blank lines")

		out, err = runCLI(t, ts.URL, "queue", "counts", "cliproj")
		require.NoError(t, err, out)
		require.Regexp(t, `todo\s+24985`, out)

		// The same file again: nothing is queued twice, the run says so,
		// and the counts stay the work left.
		out, err = runCLI(t, ts.URL, "queue", "add", "cliproj", path, "--batch", "3000")
		require.NoError(t, err, out)
		require.Contains(t, out, "queued 0 items into todo of cliproj; skipped 10 malformed and 5 blank lines; not queued again: 24985 already queued, 0 already out or done")
		out, err = runCLI(t, ts.URL, "queue", "counts", "cliproj")
		require.NoError(t, err, out)
		require.Regexp(t, `todo\s+24985\b`, out)

		_, err = runCLI(t, ts.URL, "queue", "add", "cliproj", path, "--strict")
		require.ErrorContains(t, err, "line 2")

		_, err = engine.Claim(context.Background(), queues.ClaimRequest{Project: "cliproj", Downloader: "tester1", Version: "20240101.01", Count: 50})
		require.NoError(t, err)
		out, err = runCLI(t, ts.URL, "claims", "release", "cliproj", "--downloader", "tester1")
		require.NoError(t, err, out)
		require.Contains(t, out, "released 50 claims")

		_, err = runCLI(t, ts.URL, "queue", "counts", "nosuchproject")
		require.ErrorContains(t, err, "no project")

		// hoard doctor: clean, then a key made the wrong type from outside.
		out, err = runCLI(t, ts.URL, "doctor", "cliproj")
		require.NoError(t, err, out)
		require.Regexp(t, `cliproj: \d+ keys checked, no problems`, out)
		require.NoError(t, b.Client.SAdd(t.Context(), queues.QueueKey("cliproj", queues.QueueSecondary), "junk").Err())
		out, err = runCLI(t, ts.URL, "doctor", "cliproj")
		require.ErrorContains(t, err, "1 problem(s)")
		require.Contains(t, out, queues.QueueKey("cliproj", queues.QueueSecondary)+" is a set, not a list")
	})
}

// TestCLIOffloadExportAndReimport: a queue offloaded to disk is counted,
// listed, moved, exported whole and queued again elsewhere.
func TestCLIOffloadExportAndReimport(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		offloader := &queues.Offloader{Engine: engine, Dir: t.TempDir(), Node: "cli-node", Logger: quiet}
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet, Offloader: offloader}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		ctx := context.Background()

		out, err := runCLI(t, ts.URL, "project", "create", "big", "--offload-above", "2000", "--offload-segment", "1000", "--done-mode", "count")
		require.NoError(t, err, out)
		var input strings.Builder
		for i := range 6000 {
			fmt.Fprintf(&input, "user:%05d\n", i)
		}
		path := filepath.Join(t.TempDir(), "items.txt")
		require.NoError(t, os.WriteFile(path, []byte(input.String()), 0o600))
		out, err = runCLI(t, ts.URL, "queue", "add", "big", path)
		require.NoError(t, err, out)
		require.NoError(t, offloader.RunOnce(ctx))

		out, err = runCLI(t, ts.URL, "queue", "counts", "big")
		require.NoError(t, err, out)
		require.Regexp(t, `todo\s+6000`, out)
		require.Regexp(t, `offloaded\s+[1-9]\d{3}`, out)
		out, err = runCLI(t, ts.URL, "segments", "list", "big")
		require.NoError(t, err, out)
		require.Regexp(t, `disk\s+todo\s+1000\s+cli-node`, out)

		exported := filepath.Join(t.TempDir(), "export.txt")
		out, err = runCLI(t, ts.URL, "queue", "export", "big", "todo", "-o", exported)
		require.NoError(t, err, out)
		raw, err := os.ReadFile(exported)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
		require.Len(t, lines, 6000)

		out, err = runCLI(t, ts.URL, "segments", "move", "big", "--from", "todo", "--to", "secondary")
		require.NoError(t, err, out)
		require.Regexp(t, `moved [1-9]\d{3} offloaded items`, out)

		out, err = runCLI(t, ts.URL, "project", "create", "copy")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "queue", "add", "copy", exported)
		require.NoError(t, err, out)
		require.Contains(t, out, "queued 6000 items")

		_, err = runCLI(t, ts.URL, "queue", "export", "nosuch", "todo")
		require.ErrorContains(t, err, "no project")
	})
}

// TestCLIQueueAddRegister: items queued with --register are duplicates to
// backfeed afterwards.
func TestCLIQueueAddRegister(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		engine, ts := cliServer(t, b)
		ctx := context.Background()
		secret := "bf_secret_1"
		_, err := engine.CreateProject(ctx, "reg", queues.SettingsPatch{BackfeedSecret: &secret})
		require.NoError(t, err)

		path := filepath.Join(t.TempDir(), "items.txt")
		require.NoError(t, os.WriteFile(path, []byte("user:a\nuser:b\n"), 0o600))
		out, err := runCLI(t, ts.URL, "queue", "add", "reg", path, "--register")
		require.NoError(t, err, out)
		require.Contains(t, out, "queued 2 items")
		res, err := engine.Backfeed(ctx, "reg", secret, []string{"user:a", "user:b", "user:c"})
		require.NoError(t, err)
		// The registered two are in the filter: a backfeed counts them as
		// duplicates without looking them up in the queues (s38-backfeed),
		// so Waiting, which only the admin call reports, stays 0 here.
		require.Equal(t, queues.BackfeedResult{Received: 3, New: 1, Duplicate: 2}, res)
	})
}

// TestQueueExportEscapesControlCharacters: an item stored before hoard
// refused control characters (written here straight into the queue) is
// exported with its ESC and BEL as escapes, never raw, with a warning;
// the other items come out as they are.
func TestQueueExportEscapesControlCharacters(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		offloader := &queues.Offloader{Engine: engine, Dir: t.TempDir(), Node: "cli-node", Logger: quiet}
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet, Offloader: offloader}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		ctx := context.Background()
		_, err = engine.CreateProject(ctx, "legacy", queues.SettingsPatch{})
		require.NoError(t, err)
		_, err = engine.Enqueue(ctx, "legacy", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "plain:1"}})
		require.NoError(t, err)
		require.NoError(t, b.Client.RPush(ctx, queues.QueueKey("legacy", queues.QueueTodo), "old:\x1b[31mred\x07").Err())

		stdout, stderr, err := runCLIWithStderr(t, ts.URL, "queue", "export", "legacy", "todo")
		require.NoError(t, err, stderr)
		require.NotContains(t, stdout, "\x1b")
		require.NotContains(t, stdout, "\x07")
		require.Contains(t, stdout, "plain:1\n")
		require.Contains(t, stdout, `old:\x1b[31mred\x07`+"\n")
		require.Contains(t, stderr, "warning: 2 control characters")
	})
}
