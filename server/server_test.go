package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
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

type fixture struct {
	t      *testing.T
	ctx    context.Context
	engine *queues.Engine
	clock  *queues.FakeClock
	url    string
	client *http.Client
}

const token = "s3cret-token"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newFixture(t *testing.T, b redistest.Backend, cfg server.Config) *fixture {
	t.Helper()
	clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	engine := queues.NewEngine(b.Client, queues.Options{Clock: clock, Logger: quiet})
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.ProjectsFile == "" {
		cfg.ProjectsFile = filepath.Join(t.TempDir(), "projects.json")
	}
	// The server as hoard serve runs it: the warrior listener on its port
	// answering the warrior calls, net/http the rest (Config.NetHTTPOnly
	// for net/http alone).
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	srv, err := server.New(cfg, engine)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	client := &http.Client{
		Timeout: 10 * time.Second,
		// A redirect would cost real warriors a round trip; fail on one.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &fixture{t: t, ctx: context.Background(), engine: engine, clock: clock, url: "http://" + srv.Addr(), client: client}
}

func (f *fixture) project(slug string, patch queues.SettingsPatch, items ...string) {
	f.t.Helper()
	_, err := f.engine.CreateProject(f.ctx, slug, patch)
	require.NoError(f.t, err)
	q := make([]queues.QueueItem, len(items))
	for i, it := range items {
		q[i] = queues.QueueItem{Name: it}
	}
	if len(q) > 0 {
		_, err = f.engine.Enqueue(f.ctx, slug, queues.Target{Queue: queues.QueueTodo}, q)
		require.NoError(f.t, err)
	}
}

type reply struct {
	status int
	header http.Header
	body   string
}

// post sends what seesaw 0.10.3 sends: a JSON body with its headers.
func (f *fixture) post(path, body string, headers ...string) reply {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	require.NoError(f.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ArchiveTeam Warrior/0.10.3 Standalone")
	req.Header.Set("Connection", "close")
	req.Header.Set("Accept-Encoding", "gzip")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return f.do(req)
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

// accountToken adds an account with roles and returns a new token of it.
func (f *fixture) accountToken(name string, roles ...string) string {
	f.t.Helper()
	store := accounts.New(f.engine.Redis(), f.clock)
	_, err := store.CreateAccount(f.ctx, name, roles)
	require.NoError(f.t, err)
	tok, _, err := store.CreateToken(f.ctx, name, "test", 0)
	require.NoError(f.t, err)
	return tok
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

func TestSeesawRequestAndDone(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		f.project("testproj", queues.SettingsPatch{Extra: &map[string]json.RawMessage{"extra_key": json.RawMessage("42")}}, "item-a", "item-ü")

		r := f.post("/testproj/request", `{"downloader": "tester1", "api_version": "2", "version": "20240101.01"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, map[string]any{"item_name": "item-a", "extra_key": 42.0}, decode(t, r.body))

		r = f.post("/testproj/done", `{"downloader": "tester1", "version": "20240101.01", "item": "item-a", "bytes": {"data": 1234}, "id": {"pipeline_hash": "abc"}}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "OK", strings.TrimSpace(r.body))

		// Non-ASCII names arrive as \u escapes.
		r = f.post("/testproj/request", `{"downloader": "tester1", "api_version": "2"}`)
		require.Equal(t, "item-ü", decode(t, r.body)["item_name"])
		r = f.post("/testproj/done", `{"downloader": "tester1", "item": "item-\u00fc", "bytes": {"data": 1}}`)
		require.Equal(t, http.StatusOK, r.status, r.body)

		recent, err := f.engine.Recent(f.ctx, "testproj", 5)
		require.NoError(t, err)
		require.Contains(t, string(recent[1]), `"id":{"pipeline_hash":"abc"}`)
		require.Contains(t, string(recent[1]), `"ua":"ArchiveTeam Warrior/0.10.3 Standalone"`)
	})
}

func TestMultiRequestRoutesOnRawPath(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		f.project("urls", queues.SettingsPatch{}, "u1", "u2", "u3", "u4", "u5", "u6", "u7")

		// The production URL ".../multi=3/" plus seesaw's "/request".
		r := f.post("/urls/multi=3//request", `{"downloader": "tester1", "api_version": "2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "u1\x00u2\x00u3", decode(t, r.body)["item_name"])
		r = f.post("/urls/multi=3/request", `{"downloader": "tester1", "api_version": "2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "u4\x00u5\x00u6", decode(t, r.body)["item_name"])

		// Done lists only the items that succeeded; the others stay out.
		r = f.post("/urls/done", `{"downloader": "tester1", "item": "u1\u0000u3\u0000u5", "bytes": {"data": 30}}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		counts, err := f.engine.Counts(f.ctx, "urls")
		require.NoError(t, err)
		require.Equal(t, queues.Counts{Todo: 1, Out: 3, Done: 3}, counts)
	})
}

func TestStatusCodes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{WarriorBodyBytes: 4096})
		f.project("open", queues.SettingsPatch{}, "a", "b", "c")
		f.project("empty", queues.SettingsPatch{})
		rate := 1.0
		f.project("slow", queues.SettingsPatch{RatePerMinute: &rate}, "s1", "s2")
		minVersion := "20240101.10"
		f.project("versioned", queues.SettingsPatch{MinVersion: &minVersion}, "v1", "v2")
		f.project("guarded", queues.SettingsPatch{}, "g1")
		require.NoError(t, f.engine.Block(f.ctx, "guarded", "mallory", queues.BlockEntry{Reason: "scraping junk"}))

		req := func(slug, downloader string) reply {
			return f.post("/"+slug+"/request", `{"downloader":"`+downloader+`","api_version":"2","version":"20240101.9"}`)
		}
		jsonError := func(r reply, status int, code string) {
			t.Helper()
			require.Equal(t, status, r.status, r.body)
			require.Equal(t, code, decode(t, r.body)["code"], r.body)
			require.NotEmpty(t, decode(t, r.body)["error"])
		}

		jsonError(req("nosuch", "tester1"), http.StatusNotFound, "project_not_found")
		jsonError(req("empty", "tester1"), http.StatusNotFound, "no_item")
		require.Equal(t, http.StatusOK, req("slow", "tester1").status)
		r := req("slow", "tester1")
		jsonError(r, http.StatusTooManyRequests, "rate_limited")
		require.Equal(t, "60", r.header.Get("Retry-After"))
		jsonError(req("versioned", "tester1"), server.StatusVersionTooOld, "version_too_old")
		jsonError(req("guarded", "mallory"), http.StatusForbidden, "blocked")
		jsonError(req("open", "x"), http.StatusBadRequest, "invalid")
		jsonError(req("open", "bad nick!"), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/request", `{"downloader": "tester1"`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/request", `{"downloader": ["tester1"]}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/request", ``), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/request", `{"downloader":"tester1","pad":"`+strings.Repeat("x", 5000)+`"}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/multi=0//request", `{"downloader":"tester1"}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/multi=x/request", `{"downloader":"tester1"}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/bad{slug}/request", `{"downloader":"tester1"}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/done", `{"downloader":"tester1","item":"a","bytes":{"data":1}}`), http.StatusConflict, "not_handed_out")
		jsonError(f.post("/open/done", `{"downloader":"tester1","item":"a","bytes":{"data":-1}}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/done", `{"downloader":"tester1","bytes":{"data":1}}`), http.StatusBadRequest, "invalid")
		jsonError(f.post("/open/nothing", `{}`), http.StatusNotFound, "no_route")

		get, err := http.NewRequest(http.MethodGet, f.url+"/open/request", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusMethodNotAllowed, f.do(get).status)

		// None of the refused calls changed anything.
		counts, err := f.engine.Counts(f.ctx, "open")
		require.NoError(t, err)
		require.Equal(t, queues.Counts{Todo: 3}, counts)

		// api_version other than 2 gets the bare name, as universal-tracker did.
		r = f.post("/open/request", `{"downloader":"tester1"}`)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "a", r.body)
		require.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/plain"))
	})
}

func TestUploadAndRelease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		targets := []string{"rsync://up.example.org/:downloader/"}
		f.project("p", queues.SettingsPatch{UploadTargets: &targets}, "a", "b")
		r := f.post("/p/upload", `{"downloader":"tester1","item_name":"a","version":"1"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"upload_target": "rsync://up.example.org/tester1/"}, decode(t, r.body))

		f.project("bare", queues.SettingsPatch{})
		require.Equal(t, http.StatusNotFound, f.post("/bare/upload", `{"downloader":"tester1","item_name":"a"}`).status)

		require.Equal(t, http.StatusOK, f.post("/p/request", `{"downloader":"tester1","api_version":"2"}`).status)
		require.Equal(t, http.StatusConflict, f.post("/p/release", `{"downloader":"other1","item":"a"}`).status, "only the claimant may release")
		r = f.post("/p/release", `{"downloader":"tester1","item":"a"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		counts, err := f.engine.Counts(f.ctx, "p")
		require.NoError(t, err)
		require.Equal(t, queues.Counts{Todo: 1, Redo: 1}, counts)
	})
}

func TestNowAndProjectsJSON(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		path := filepath.Join(t.TempDir(), "projects.json")
		require.NoError(t, os.WriteFile(path, []byte(`{
  "warrior": {"seesaw_version": "0.10.3"},
  "auto_project": "live",
  "broadcast_message": "<p>hi</p>",
  "projects": [
    {"name": "live", "title": "Live", "repository": "https://example.org/live-grab.git"},
    {"name": "resting", "title": "Resting"},
    {"name": "elsewhere", "title": "Elsewhere", "leaderboard": "https://other.example/elsewhere/"}
  ]
}`), 0o644))
		f := newFixture(t, b, server.Config{ProjectsFile: path, PublicURL: "https://tracker.example.org"})
		paused := true
		f.project("live", queues.SettingsPatch{})
		f.project("resting", queues.SettingsPatch{Paused: &paused})

		get := func(p string) reply {
			req, err := http.NewRequest(http.MethodGet, f.url+p, nil)
			require.NoError(t, err)
			return f.do(req)
		}
		r := get("/now")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "1795348800", strings.TrimSpace(r.body))

		r = get("/projects.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		doc := decode(t, r.body)
		require.Equal(t, "live", doc["auto_project"])
		require.Equal(t, map[string]any{"seesaw_version": "0.10.3"}, doc["warrior"])
		projects := doc["projects"].([]any)
		require.Len(t, projects, 2, "the paused project is withheld")
		require.Equal(t, "https://tracker.example.org/live/", projects[0].(map[string]any)["leaderboard"])
		require.Equal(t, "https://other.example/elsewhere/", projects[1].(map[string]any)["leaderboard"])

		r = get("/projects.json?callback=showProjects")
		require.True(t, strings.HasPrefix(r.body, "showProjects({"), r.body)
		require.Equal(t, http.StatusBadRequest, get("/projects.json?callback=alert(1)//").status)
	})
}

func TestAdminAPINeedsToken(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		closed := newFixture(t, b, server.Config{})
		r := closed.admin(http.MethodGet, "/projects", "", "")
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Contains(t, r.body, "HOARD_ADMIN_TOKEN")
		require.Equal(t, http.StatusForbidden, closed.admin(http.MethodPost, "/projects/x", "", "anything").status)

		dev := newFixture(t, b, server.Config{InsecureNoAdminToken: true})
		require.Equal(t, http.StatusCreated, dev.admin(http.MethodPost, "/projects/devproj", "", "").status)

		f := newFixture(t, b, server.Config{AdminToken: token})
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/projects", "", "").status)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/projects", "", "wrong").status)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodPost, "/projects/sneaky", "", "wrong").status)
		_, err := f.engine.Project(f.ctx, "sneaky")
		require.Equal(t, queues.CodeProjectNotFound, queues.CodeOf(err), "a refused call changes nothing")
		require.Equal(t, http.StatusOK, f.admin(http.MethodGet, "/projects", "", token).status)
	})
}

func TestAdminProjectLifecycle(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		r := f.admin(http.MethodPost, "/projects/demo", `{"title":"Demo","claims_limit":5}`, token)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.Equal(t, http.StatusConflict, f.admin(http.MethodPost, "/projects/demo", ``, token).status)
		require.Equal(t, http.StatusBadRequest, f.admin(http.MethodPost, "/projects/a{b}", ``, token).status)
		require.Equal(t, http.StatusBadRequest, f.admin(http.MethodPatch, "/projects/demo", `{"max_multi": 0}`, token).status)
		require.Equal(t, http.StatusBadRequest, f.admin(http.MethodPatch, "/projects/demo", `{"reclaim_ttl": "soon"}`, token).status)
		require.Equal(t, http.StatusNotFound, f.admin(http.MethodPatch, "/projects/ghost", `{"paused": true}`, token).status)

		r = f.admin(http.MethodPatch, "/projects/demo", `{"reclaim_enabled": true, "reclaim_ttl": "30m"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		project := decode(t, r.body)
		require.Equal(t, true, project["reclaim_enabled"])
		require.Equal(t, "30m0s", project["reclaim_ttl"])
		require.Equal(t, 5.0, project["claims_limit"])

		r = f.admin(http.MethodPost, "/projects/demo/items", `{"queue":"todo","items":["a","b",{"name":"c","extras":{"k":1}},"",{"name":"e","extras":{"item_name":"x"}},7,{"name":"d","extras":[1]}]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		added := decode(t, r.body)
		require.Equal(t, 3.0, added["queued"])
		require.Equal(t, 4.0, added["rejected"])
		require.Equal(t, http.StatusBadRequest, f.admin(http.MethodPost, "/projects/demo/items", `{"queue":"nope","items":["x"]}`, token).status)
		require.Equal(t, http.StatusNotFound, f.admin(http.MethodPost, "/projects/ghost/items", `{"items":["x"]}`, token).status)

		r = f.post("/demo/multi=2/request", `{"downloader":"tester1","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		f.clock.Advance(time.Hour)
		r = f.admin(http.MethodPost, "/projects/demo/claims/release", `{"older_than":"30m","downloader":"tester1"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 2.0, decode(t, r.body)["released"])

		r = f.admin(http.MethodGet, "/projects/demo/counts", ``, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"todo": 1.0, "todo:backfeed": 0.0, "todo:secondary": 0.0, "todo:redo": 2.0,
			"todo:reserved": 0.0, "todo:scored": 0.0, "out": 0.0, "done": 0.0, "failed": 0.0, "offloaded": 0.0, "reclaimable": 0.0,
			"oldest_claim_age_seconds": 0.0}, decode(t, r.body))

		require.Equal(t, http.StatusOK, f.admin(http.MethodPut, "/projects/demo/blocks/mallory", `{"reason":"junk"}`, token).status)
		require.Equal(t, http.StatusForbidden, f.post("/demo/request", `{"downloader":"mallory"}`).status)
		require.Equal(t, http.StatusOK, f.admin(http.MethodDelete, "/projects/demo/blocks/mallory", ``, token).status)
		require.Equal(t, http.StatusNotFound, f.admin(http.MethodDelete, "/projects/demo/blocks/mallory", ``, token).status)
	})
}

// Without trusted proxies, X-Forwarded-For cannot move a client out from
// under an IP block.
func TestForwardedForIsNotTrustedByDefault(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		f.project("p", queues.SettingsPatch{}, "a")
		require.NoError(t, f.engine.Block(f.ctx, "p", "127.0.0.1", queues.BlockEntry{Reason: "abuse"}))
		r := f.post("/p/request", `{"downloader":"tester1"}`, "X-Forwarded-For", "203.0.113.9")
		require.Equal(t, http.StatusForbidden, r.status, r.body)
	})
}
