package leaderboard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/unittier"
	"github.com/hoardproject/hoard/leaderboard"
)

const chromiumPath = "/usr/bin/chromium"

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
		missing(chromiumPath + " is missing, so the project page cannot be tested in a real browser; " +
			"`make deps` installs Debian's chromium")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed, so playwright-core cannot drive Chromium; install Node.js >= 20 with npm " +
			"(Debian 12's nodejs is 18; see docs/testing.md), then `make test`")
	}
	if _, err := os.Stat(filepath.Join("e2e", "node_modules", "playwright-core")); err != nil {
		missing("leaderboard/e2e/node_modules/playwright-core is missing; `make deps` runs npm ci in leaderboard/e2e")
	}
	return node
}

// pageStub serves the real page and assets with scripted data: stats.json
// read at t=2500 ms, and a websocket whose first connection sends a
// snapshot then two updates with entries out of time order, and whose
// later connections send a snapshot stamped earlier than all of those.
type pageStub struct {
	mu    sync.Mutex
	conns int
	drop  chan struct{}
}

func entry(item string, at, bytes int64) json.RawMessage {
	raw, _ := json.Marshal(map[string]any{"items": []string{item}, "by": "x", "at": at, "bytes": bytes})
	return raw
}

func (s *pageStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/pagetest/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(leaderboard.ProjectPage())
	case "/pagetest/stats.json":
		w.Header().Set("Cache-Control", "public, max-age=2")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"title": "pagetest", "counts": map[string]int{"done": 1}, "generated_at": 2500,
			"downloaders": []map[string]any{{"name": "x", "bytes": 10, "items": 1}}, "downloaders_total": 600,
		})
	case "/pagetest/charts.json":
		_, _ = w.Write([]byte(`{"items_done_total":0,"minutes":[],"hours":[],"downloaders":[]}`))
	case "/pagetest/drop":
		close(s.drop)
	case "/pagetest/ws":
		s.websocket(w, r)
	default:
		if rest, ok := strings.CutPrefix(r.URL.Path, "/static/"); ok {
			http.ServeFileFS(w, r, leaderboard.Static(), rest)
			return
		}
		http.NotFound(w, r)
	}
}

func (s *pageStub) websocket(w http.ResponseWriter, r *http.Request) {
	conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	s.mu.Lock()
	s.conns++
	first := s.conns == 1
	s.mu.Unlock()
	send := func(kind string, done, at int64, log ...json.RawMessage) {
		msg, _ := json.Marshal(map[string]any{"type": kind, "counts": map[string]int64{"done": done}, "log": log, "at": at})
		_ = conn.WriteMessage(websocket.TextMessage, msg)
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	if first {
		send("snapshot", 1, 5000, entry("a", 1000, 3))
		send("update", 2, 5001, entry("c", 3000, 5))
		send("update", 3, 5002, entry("b", 2000, 7)) // arrives late: older than c
		select {
		case <-s.drop:
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""))
		case <-gone:
		}
		return
	}
	// Another frontend, whose clock is behind the first one's.
	send("snapshot", 42, 100, entry("a", 1000, 3))
	<-gone
}

// TestProjectPageLogicInChromium drives app.js itself: log order by time,
// live completions kept across a cached stats.json, "and N more", and
// counts from a reconnect's snapshot stamped by a clock that is behind.
func TestProjectPageLogicInChromium(t *testing.T) {
	node := requireBrowser(t)
	ts := httptest.NewServer(&pageStub{drop: make(chan struct{})})
	defer ts.Close()

	// A hang guard, not a speed bound (as server's nodeScriptBound): at
	// load 20-25 under -race Chromium scripts took over a minute.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("e2e", "page.mjs"), ts.URL+"/pagetest/", ts.URL+"/pagetest/drop")
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("page.mjs stderr:\n%s", stderr.String())
	}
	var line string
	scanner := bufio.NewScanner(&stdout)
	for scanner.Scan() {
		if s := strings.TrimSpace(scanner.Text()); strings.HasPrefix(s, "{") {
			line = s
		}
	}
	require.NotEmpty(t, line, "page.mjs printed no JSON line (exit: %v); stdout:\n%s", runErr, stdout.String())
	t.Logf("page.mjs: %s", line)
	var res struct {
		OK     bool     `json:"ok"`
		Order  []string `json:"order"`
		Errors []string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &res), line)
	require.Empty(t, res.Errors)
	require.Equal(t, []string{"c", "b", "a"}, res.Order)
	require.True(t, res.OK, line)
	require.NoError(t, runErr)
}
