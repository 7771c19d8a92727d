package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestFailReportOverHTTP: POST /<slug>/fail from the claimant sends the
// item to failed with its reason; from anyone else it is 409 and the item
// stays out with its claimant; the item status route follows the item
// through every place.
func TestFailReportOverHTTP(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		f.project("demo", queues.SettingsPatch{}, "a/b c", "other")
		status := func(item string) map[string]any {
			t.Helper()
			r := f.get("/demo/items/" + url.PathEscape(item) + ".json")
			require.Equal(t, http.StatusOK, r.status, r.body)
			require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
			return decode(t, r.body)
		}
		require.Equal(t, map[string]any{"item": "a/b c", "state": "todo"}, status("a/b c"))
		require.Equal(t, map[string]any{"item": "never", "state": "unknown"}, status("never"))

		r := f.post("/demo/request", `{"downloader":"alice","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"item": "a/b c", "state": "out", "downloader": "alice"}, status("a/b c"))

		r = f.post("/demo/fail", `{"downloader":"mallory","item":"a/b c","reason":"no"}`)
		require.Equal(t, http.StatusConflict, r.status, r.body)
		require.Equal(t, map[string]any{"item": "a/b c", "state": "out", "downloader": "alice"}, status("a/b c"), "a stranger's report changes nothing")
		r = f.post("/demo/fail", `{"downloader":"alice","reason":"no item named"}`)
		require.Equal(t, http.StatusBadRequest, r.status, r.body)

		r = f.post("/demo/fail", `{"downloader":"alice","item":"a/b c","reason":"<b>HTTP 404</b>"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"items": 1.0, "to": "failed", "failed": 1.0}, decode(t, r.body))
		require.Equal(t, map[string]any{"item": "a/b c", "state": "failed"}, status("a/b c"))

		r = f.get("/nope/items/x.json")
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		r = f.get("/demo/items/" + url.PathEscape("bad\nname") + ".json")
		require.Equal(t, http.StatusBadRequest, r.status, r.body)
		r = f.post("/demo/items/x.json", `{}`)
		require.Equal(t, http.StatusMethodNotAllowed, r.status, r.body)

		// The operators' side: list, export, requeue, and the item is
		// served again.
		r = f.admin(http.MethodGet, "/projects/demo/failed", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var page server.FailedPage
		require.NoError(t, json.Unmarshal([]byte(r.body), &page))
		require.Len(t, page.Failed, 1)
		require.Equal(t, "a/b c", page.Failed[0].Item)
		require.Equal(t, "<b>HTTP 404</b>", page.Failed[0].Message)
		require.Equal(t, "alice", page.Failed[0].History[0].By)

		r = f.admin(http.MethodGet, "/projects/demo/failed/export", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 1, strings.Count(r.body, "\n"))
		require.Contains(t, r.body, `"item":"a/b c"`)

		r = f.admin(http.MethodPost, "/projects/demo/failed/requeue", `{}`, token)
		require.Equal(t, http.StatusBadRequest, r.status, "an empty list must not mean every item")
		r = f.admin(http.MethodPost, "/projects/demo/failed/requeue", `{"items":["a/b c"],"queue":"nowhere"}`, token)
		require.Equal(t, http.StatusBadRequest, r.status, r.body)
		r = f.admin(http.MethodPost, "/projects/demo/failed/requeue", `{"items":["a/b c"],"queue":"redo"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"moved": 1.0, "not_failed": 0.0}, decode(t, r.body))
		c, err := f.engine.Counts(f.ctx, "demo")
		require.NoError(t, err)
		require.EqualValues(t, 1, c.Redo)
		require.Zero(t, c.Failed)
		r = f.post("/demo/request", `{"downloader":"bob","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "other", decode(t, r.body)["item_name"])
		r = f.post("/demo/request", `{"downloader":"bob","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "a/b c", decode(t, r.body)["item_name"], "the requeued item is served again")

		r = f.admin(http.MethodGet, "/projects/demo/log", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, "failed items requeued")
	})
}

// TestFailedCountInStatsAndMetrics: stats.json and /metrics carry the
// failed count, the failed counter and the item fail rate.
func TestFailedCountInStatsAndMetrics(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		f.project("demo", queues.SettingsPatch{MaxClaims: ptr(1), ReclaimTTL: ptr(queues.Duration(time.Hour))}, "x", "y")
		r := f.post("/demo/multi=2/request", `{"downloader":"alice","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.post("/demo/done", `{"downloader":"alice","item":"y","bytes":{"data":1}}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		f.clock.Advance(time.Hour)
		r = f.post("/demo/request", `{"downloader":"bob","api_version":"2"}`)
		require.Equal(t, http.StatusNotFound, r.status, "x failed at its reclaim: nothing to hand out")

		r = f.get("/demo/stats.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		stats := decode(t, r.body)
		require.Equal(t, 1.0, stats["counts"].(map[string]any)["failed"])
		require.Equal(t, 0.5, stats["item_fail_rate"])

		r = f.get("/metrics", "Authorization", "Bearer "+token)
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, `hoard_project_items{place="failed",project="demo"} 1`)
		require.Contains(t, r.body, `hoard_project_items_failed_total{project="demo"} 1`)
		require.Contains(t, r.body, `hoard_project_item_fail_rate{project="demo"} 0.5`)
	})
}

// TestFailReportFromALuaGrabScript: a grab script in lua5.1 with
// lua-socket reports its item failed; the same script as another
// downloader is refused and the item stays out.
func TestFailReportFromALuaGrabScript(t *testing.T) {
	if _, err := exec.LookPath("lua5.1"); err != nil || exec.Command("lua5.1", "-e", `require("socket.http")`).Run() != nil {
		reason := "lua5.1 with lua-socket is not installed (apt-get install lua5.1 lua-socket)"
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		f.project("grab", queues.SettingsPatch{}, "https://example.com/a?b=\"c\"")
		r := f.post("/grab/request", `{"downloader":"grabber","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		item := decode(t, r.body)["item_name"].(string)
		report := func(downloader string) (string, map[string]any) {
			out, err := exec.Command("lua5.1", "testdata/fail.lua", f.url, "grab", downloader, item, `HTTP 451 "unavailable"`).CombinedOutput()
			require.NoError(t, err, string(out))
			code, body, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
			return code, decode(t, body)
		}
		code, _ := report("someone")
		require.Equal(t, "409", code)
		status, err := f.engine.ItemStatus(f.ctx, "grab", item)
		require.NoError(t, err)
		require.Equal(t, queues.ItemStatus{Item: item, State: queues.StateOut, Downloader: "grabber"}, status)

		code, body := report("grabber")
		require.Equal(t, "200", code)
		require.Equal(t, "failed", body["to"])
		page, _, err := f.engine.FailedItems(f.ctx, "grab", 0, 10)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, item, page[0].Item)
		require.Equal(t, `HTTP 451 "unavailable"`, page[0].Message)
	})
}
