package btadmin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// The tests call the API as the host does: over HTTP to a stand-in for
// hoard's server, which checks the admin token, forwards
// /api/v1/bittorrent/… and /tracker/bittorrent.json through HandleRequest
// and keeps the changes the answers list (GET /api/v1/log shows them).
// hoard's own forwarding is tested in package server.

type fixture struct {
	t      *testing.T
	ctx    context.Context
	url    string
	client *http.Client

	mu      sync.Mutex
	changes []loggedChange
}

type loggedChange struct {
	By      string          `json:"by"`
	What    string          `json:"what"`
	Details json.RawMessage `json:"details"`
}

const token = "s3cret-token"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type reply struct {
	status int
	header http.Header
	body   string
}

// parts are what newFixture serves; nil ones are left out, as a plugin
// with that part off.
type parts struct {
	admin   *btadmin.Admin
	metrics *btadmin.MetricsAdmin
	views   *btadmin.TrackerViews
	logger  *slog.Logger
}

func newFixture(t *testing.T, _ redistest.Backend, p parts) *fixture {
	t.Helper()
	if p.admin == nil {
		p.admin = &btadmin.Admin{}
	}
	if p.metrics == nil {
		p.metrics = &btadmin.MetricsAdmin{}
	}
	if p.views == nil {
		p.views = &btadmin.TrackerViews{}
	}
	if p.logger == nil {
		p.logger = quiet
	}
	api := btadmin.NewAPI(p.admin, p.metrics, p.views, p.logger)
	f := &fixture{t: t, ctx: context.Background(), client: &http.Client{Timeout: 10 * time.Second}}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.serve(w, r, api)
	}))
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

func (f *fixture) serve(w http.ResponseWriter, r *http.Request, api *btadmin.API) {
	req := plugins.Request{Method: r.Method, Query: r.URL.RawQuery, Header: r.Header.Clone()}
	switch {
	case r.URL.Path == "/tracker/bittorrent.json":
		req.Path, req.Role, req.Header = plugins.PagePath, plugins.RolePublic, nil
	case strings.HasPrefix(r.URL.Path, "/api/v1/"):
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, `{"error":"missing or wrong admin token","code":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/api/v1/log" {
			f.mu.Lock()
			defer f.mu.Unlock()
			_ = json.NewEncoder(w).Encode(map[string]any{"changes": f.changes})
			return
		}
		path, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/v1/bittorrent")
		if !ok {
			http.NotFound(w, r)
			return
		}
		// As hoard does, the actor is the account the token belongs to
		// (here the stand-in's one account), never a header the client
		// sends.
		req.Path, req.Role, req.Actor = path, plugins.RoleAdmin, "site-web1"
		req.Header.Del("Authorization")
	default:
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	require.NoError(f.t, err)
	req.Body = body
	resp, err := api.HandleRequest(r.Context(), req)
	require.NoError(f.t, err)
	f.mu.Lock()
	for _, ch := range resp.Changes {
		f.changes = append(f.changes, loggedChange{By: req.Actor, What: ch.What, Details: ch.Details})
	}
	f.mu.Unlock()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func (f *fixture) do(req *http.Request) reply {
	f.t.Helper()
	resp, err := f.client.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (f *fixture) admin(method, path, body, tok string) reply {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+"/api/v1"+path, strings.NewReader(body))
	require.NoError(f.t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return f.do(req)
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	return m
}
