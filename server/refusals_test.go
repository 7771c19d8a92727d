package server_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// logLines collects a logger's lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) lines(containing string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		if strings.Contains(line, containing) {
			out = append(out, line)
		}
	}
	return out
}

// serve sends one request to h and returns the status.
func serve(h http.Handler, method, path, body string) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec.Code
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

// TestRequestsWhileRedisIsDownAreCountedNotShouted: with Redis down (no
// server at its address), 5,000 warrior requests are each answered 503,
// the log gets one line for them (the kind's first), and /metrics counts
// all 5,000. A minute later (the engine's clock) the next failure is
// logged with the 5,000 it held back.
func TestRequestsWhileRedisIsDownAreCountedNotShouted(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	logs := &logLines{}
	engine := queues.NewEngine(rdb, queues.Options{Clock: clock, Logger: quiet})
	srv, err := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(logs, nil)),
		ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
	require.NoError(t, err)
	h := srv.Handler()
	for i := range 5000 {
		status := serve(h, http.MethodPost, "/proj/request", `{"downloader":"alice","api_version":"2"}`)
		require.Equal(t, http.StatusServiceUnavailable, status, "request %d", i)
	}
	lines := logs.lines("request failed")
	require.Len(t, lines, 1, "one line for 5,000 failures")
	require.Contains(t, lines[0], "kind=unavailable/503")
	require.Equal(t, "5000", metricLine(t, scrape(t, h), `hoard_refusals_total{kind="unavailable/503"}`))

	clock.Advance(time.Minute)
	require.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodPost, "/proj/request", `{"downloader":"alice","api_version":"2"}`))
	lines = logs.lines("request failed")
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], "unlogged=4999", "the line says how many it held back")
}

// TestRefusedWebsocketsAreCountedNotShouted: one viewer holds the only
// slot (MaxViewers 1); 5,000 more websocket requests are refused with
// 503, written as one log line, and counted 5,000 on /metrics.
func TestRefusedWebsocketsAreCountedNotShouted(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
		engine := queues.NewEngine(b.Client, queues.Options{Clock: clock, Logger: quiet})
		_, err := engine.CreateProject(t.Context(), "watched", queues.SettingsPatch{})
		require.NoError(t, err)
		logs := &logLines{}
		srv, err := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), MaxViewers: 1,
			ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
		require.NoError(t, err)
		h := srv.Handler()
		ts := httptest.NewServer(h)
		t.Cleanup(ts.Close)
		conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/watched/ws", nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		for i := range 5000 {
			require.Equal(t, http.StatusServiceUnavailable, serve(h, http.MethodGet, "/watched/ws", ""), "request %d", i)
		}
		lines := logs.lines("request failed")
		require.Len(t, lines, 1, "one line for 5,000 refusals")
		require.Contains(t, lines[0], "kind=websocket/503")
		require.Equal(t, "5000", metricLine(t, scrape(t, h), `hoard_refusals_total{kind="websocket/503"}`))
	})
}
