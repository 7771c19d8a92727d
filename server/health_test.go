package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func readiness(t *testing.T, h http.Handler) (int, server.Readiness) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var r server.Readiness
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r), rec.Body.String())
	return rec.Code, r
}

// /readyz is 200 with Redis up and every plugin running, and 503 with a
// plugin down or once the server drains; /healthz stays 200 throughout.
func TestReadyzFollowsPluginsAndDraining(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		plugins := &fakePlugins{status: []pluginhost.Status{{Name: "bittorrent", State: pluginhost.StateRunning}}}
		srv, err := server.New(server.Config{AdminToken: "tok", Logger: quiet, Plugins: plugins}, engine)
		require.NoError(t, err)
		h := srv.Handler()

		code, r := readiness(t, h)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, server.Readiness{Ready: true, Redis: "ok", Plugins: map[string]string{"bittorrent": "running"}}, r)

		plugins.status[0].State = pluginhost.StateBackoff
		code, r = readiness(t, h)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.False(t, r.Ready)
		require.Equal(t, "backoff", r.Plugins["bittorrent"])

		plugins.status[0].State = pluginhost.StateRunning
		srv.Drain()
		code, r = readiness(t, h)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.True(t, r.Draining)
		require.Equal(t, "ok", r.Redis)

		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		require.Equal(t, http.StatusOK, rec.Code, "draining is not dead")
	})
}

// With its Redis stopped, a frontend is alive but not ready.
func TestReadyzFalseWhileRedisIsDown(t *testing.T) {
	if reason, unavailable := redistest.Unavailable(); unavailable {
		t.Skip(reason)
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	redisServer := localredis.New(localredis.Config{DataDir: t.TempDir(), Logger: quiet})
	require.NoError(t, redisServer.Start(ctx))
	defer redisServer.Stop()
	client, err := redisurl.Dial(redisServer.URL())
	require.NoError(t, err)
	defer client.Close()
	engine := queues.NewEngine(client, queues.Options{Logger: quiet})
	srv, err := server.New(server.Config{AdminToken: "tok", Logger: quiet}, engine)
	require.NoError(t, err)
	h := srv.Handler()

	code, r := readiness(t, h)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", r.Redis)

	require.NoError(t, redisServer.Stop())
	code, r = readiness(t, h)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unreachable", r.Redis)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
}

// Go's profiles answer an admin's token only.
func TestPprofNeedsTheAdminToken(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		srv, err := server.New(server.Config{AdminToken: "pprof-admin", Logger: quiet}, engine)
		require.NoError(t, err)
		h := srv.Handler()
		get := func(path, token string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		require.Equal(t, http.StatusUnauthorized, get("/debug/pprof/", "").Code)
		require.Equal(t, http.StatusUnauthorized, get("/debug/pprof/goroutine?debug=1", "pprof-admiN").Code)
		rec := get("/debug/pprof/", "pprof-admin")
		require.Equal(t, http.StatusOK, rec.Code)
		require.Contains(t, rec.Body.String(), "goroutine")
		rec = get("/debug/pprof/goroutine?debug=1", "pprof-admin")
		require.Equal(t, http.StatusOK, rec.Code)
		require.True(t, strings.Contains(rec.Body.String(), "goroutine profile"), rec.Body.String()[:min(200, rec.Body.Len())])
	})
}
