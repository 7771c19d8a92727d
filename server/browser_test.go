package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/unittier"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

const (
	chromiumPath = "/usr/bin/chromium"
	e2eDir       = "../leaderboard/e2e"
)

// browserResult is the JSON line leaderboard/e2e/live.mjs prints.
type browserResult struct {
	OK              bool     `json:"ok"`
	ElapsedA        *int64   `json:"elapsed_a_ms"`
	ElapsedB        *int64   `json:"elapsed_b_ms"`
	PolledA         *int64   `json:"polled_a_ms"`
	PolledB         *int64   `json:"polled_b_ms"`
	Item            string   `json:"item"`
	Screenshot      string   `json:"screenshot"`
	ScreenshotPhone string   `json:"screenshot_phone"`
	Errors          []string `json:"errors"`
}

// requireBrowser skips the test when Chromium, node or playwright-core is
// missing, and fails it instead under CI=true, where .ci/run installs them.
func requireBrowser(t *testing.T) string {
	t.Helper()
	unittier.Skip(t, "it drives Chromium")
	missing := func(reason string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		fmt.Println("SKIP: " + reason)
		t.Skip(reason)
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		missing(chromiumPath + " is missing, so the leaderboard cannot be tested in a real browser; " +
			"`make deps` installs Debian's chromium")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed, so playwright-core cannot drive Chromium; " +
			"install Node.js >= 20 with npm (Debian 12's nodejs is 18; see docs/testing.md), then `make test`")
	}
	if _, err := os.Stat(filepath.Join(e2eDir, "node_modules", "playwright-core")); err != nil {
		missing("leaderboard/e2e/node_modules/playwright-core is missing; " +
			"`make deps` runs npm ci in leaderboard/e2e")
	}
	return node
}

// frontend starts one hoard frontend on its own engine over client, on a
// free loopback port, with the live hub running.
func frontend(t *testing.T, b redistest.Backend) string {
	t.Helper()
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	srv, err := server.New(server.Config{
		Listen:       "127.0.0.1:0",
		Logger:       quiet,
		ProjectsFile: filepath.Join(t.TempDir(), "projects.json"),
	}, engine)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { _ = srv.Stop() })
	return "http://" + srv.Addr()
}

// TestLeaderboardLiveInChromium is issue 5's proof: real headless Chromium
// loads the project page from two frontends on the same Redis; a done sent
// through the warrior API shows up on both, in the live log and in the
// counts, within one second and without a reload. Set HOARD_SCREENSHOT_DIR
// to keep the screenshots.
func TestLeaderboardLiveInChromium(t *testing.T) {
	node := requireBrowser(t)
	// Serial, on the package's single redis-server: it bounds the done's
	// way to the page by 1 s of wall time, which a second Chromium beside
	// it on two loaded cores broke (1,047 ms).
	backends := redistest.Require(t)
	require.NotEmpty(t, backends, "redistest: no backends; TestMain must call redistest.RunMain")
	b := backends[0] // the single redis-server; the hub is the same on a cluster
	require.NoError(t, redistest.Flush(t.Context(), b))

	const slug = "livetest"
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	_, err := engine.CreateProject(t.Context(), slug, queues.SettingsPatch{})
	require.NoError(t, err)
	items := make([]queues.QueueItem, 12)
	for i := range items {
		items[i] = queues.QueueItem{Name: fmt.Sprintf("user:live-%02d", i)}
	}
	_, err = engine.Enqueue(t.Context(), slug, queues.Target{Queue: queues.QueueTodo}, items)
	require.NoError(t, err)

	urlA := frontend(t, b)
	urlB := frontend(t, b)

	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else {
		abs, err := filepath.Abs(dir)
		require.NoError(t, err)
		dir = abs
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	shot := filepath.Join(dir, "leaderboard-live.png")

	// A bound, not a timing check (the script checks its own 1 s): the page
	// grew (pace, queues, held back), and on a loaded 2-core machine the
	// whole run, two full-page screenshots included, took 64 s.
	line, runErr := runNodeScript(t, t.Context(), node, "live.mjs", nodeScriptBound, nil, urlA, urlB, slug, shot)
	t.Logf("live.mjs: %s", line)
	var res browserResult
	require.NoError(t, json.Unmarshal([]byte(line), &res), line)
	t.Logf("screenshots: %s and %s", res.Screenshot, res.ScreenshotPhone)

	require.Empty(t, res.Errors, "the browser reported problems")
	require.True(t, res.OK, line)
	require.NoError(t, runErr, "live.mjs exited with an error although it reported ok")
	require.NotNil(t, res.ElapsedA, line)
	require.NotNil(t, res.ElapsedB, line)
	require.LessOrEqual(t, *res.ElapsedA, int64(1000), "frontend A showed the done too late")
	require.LessOrEqual(t, *res.ElapsedB, int64(1000), "frontend B (same Redis) showed the done too late")
	t.Logf("the done showed up after %d ms on frontend A and %d ms on frontend B (polled: %v ms, %v ms)",
		*res.ElapsedA, *res.ElapsedB, deref(res.PolledA), deref(res.PolledB))

	// The done went through the real engine, once.
	counts, err := engine.Counts(t.Context(), slug)
	require.NoError(t, err)
	require.EqualValues(t, 1, counts.Done)
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestChartsFitTheirDataInChromium: a project with 20 days of completions
// (written through an injected clock) draws charts that start at its first
// data point, with time ticks, and a hover that names the hour and the
// value; desktop and phone screenshots are kept with HOARD_SCREENSHOT_DIR.
func TestChartsFitTheirDataInChromium(t *testing.T) {
	node := requireBrowser(t)
	// A redis-server of its own, in parallel with the other browser tests
	// (mostly waiting on Chromium); the page is the same on a cluster.
	b := redistest.Parallel(t)
	const slug = "charted"
	now := time.Now().Truncate(time.Hour)
	clock := queues.NewFakeClock(now.Add(-20 * 24 * time.Hour))
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet, Clock: clock})
	_, err := engine.CreateProject(t.Context(), slug, queues.SettingsPatch{})
	require.NoError(t, err)
	for hour := 0; hour < 20*24; hour += 3 {
		n := 1 + hour%17
		items := make([]queues.QueueItem, n)
		names := make([]string, n)
		for i := range items {
			names[i] = fmt.Sprintf("user:h%04d-%02d", hour, i)
			items[i] = queues.QueueItem{Name: names[i]}
		}
		_, err := engine.Enqueue(t.Context(), slug, queues.Target{Queue: queues.QueueTodo}, items)
		require.NoError(t, err)
		_, err = engine.Claim(t.Context(), queues.ClaimRequest{Project: slug, Downloader: "charter", Count: n})
		require.NoError(t, err)
		_, err = engine.Done(t.Context(), queues.DoneRequest{Project: slug, Downloader: "charter", Items: names,
			Bytes: map[string]int64{"data": int64(n) << 20}})
		require.NoError(t, err)
		clock.Advance(3 * time.Hour)
	}
	url := frontend(t, b)

	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	dir, err = filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	line, runErr := runNodeScript(t, t.Context(), node, "charts.mjs", nodeScriptBound, nil, url+"/"+slug+"/", filepath.Join(dir, "charts.png"))
	var res struct {
		OK              bool     `json:"ok"`
		Hover           string   `json:"hover"`
		Screenshot      string   `json:"screenshot"`
		ScreenshotPhone string   `json:"screenshot_phone"`
		Errors          []string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &res), "charts.mjs printed: %s (exit %v)", line, runErr)
	t.Logf("charts.mjs: %s", line)
	require.Empty(t, res.Errors)
	require.True(t, res.OK, line)
	require.NoError(t, runErr)
	// The hover names a time back from now and a value.
	require.Regexp(t, `^\d+ (min|h|d) ago · \d`, res.Hover)
}

// nodeScriptBound ends a browser script that hangs. It bounds a hang, not
// a speed (each script checks its own timings): in a CI run at load 20-25,
// beside other packages under -race, rates.mjs took more than 90 s and
// charts.mjs more than 60 s, and both passed on a quieter machine.
const nodeScriptBound = 5 * time.Minute

// runNodeScript runs one of leaderboard/e2e's scripts with node, bounded
// by timeout, and returns the last line of its output that is a JSON
// object (what every script prints as its result) and how it exited.
// The script's stderr goes to the test log.
func runNodeScript(t *testing.T, ctx context.Context, node, script string, timeout time.Duration, env []string, args ...string) (string, error) {
	t.Helper()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, node, append([]string{filepath.Join(e2eDir, script)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		t.Fatalf("%s did not finish within %s; stdout:\n%s", script, timeout, stdout.String())
	}
	var line string
	scanner := bufio.NewScanner(&stdout)
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for scanner.Scan() {
		if s := strings.TrimSpace(scanner.Text()); strings.HasPrefix(s, "{") {
			line = s
		}
	}
	require.NotEmpty(t, line, "%s printed no JSON line (exit: %v); stdout:\n%s", script, runErr, stdout.String())
	return line, runErr
}
