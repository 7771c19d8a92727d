package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestFiltersOverHTTP: filters are added, listed and removed through the
// admin API; a bad one is 400 with a clear message and changes nothing;
// admin add and backfeed drop matching items, and stats.json and /metrics
// count them with the filter rate.
func TestFiltersOverHTTP(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		s := secret
		f.project("demo", queues.SettingsPatch{BackfeedSecret: &s})

		r := f.admin(http.MethodPost, "/projects/demo/filters", `{"name":"ads","type":"ad"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"filters": []any{map[string]any{"name": "ads", "type": "ad"}}}, decode(t, r.body))
		for body, says := range map[string]string{
			`{"name":"re","regex":"(x"}`:        "bad RE2 expression",
			`{"name":"none"}`:                   "set exactly one of type, glob and regex",
			`{"name":"ads","glob":"*"}`:         "duplicate name",
			`{"name":"x","glob":"a","bogus":1}`: "bogus",
			`not json`:                          "",
		} {
			r = f.admin(http.MethodPost, "/projects/demo/filters", body, token)
			require.Equal(t, http.StatusBadRequest, r.status, body)
			require.Contains(t, r.body, says, body)
		}
		r = f.admin(http.MethodDelete, "/projects/demo/filters/nope", "", token)
		require.Equal(t, http.StatusBadRequest, r.status, r.body)
		r = f.admin(http.MethodGet, "/projects/demo/filters", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"filters": []any{map[string]any{"name": "ads", "type": "ad"}}}, decode(t, r.body), "refused calls changed nothing")
		r = f.admin(http.MethodGet, "/projects/nosuch/filters", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)

		r = f.admin(http.MethodPost, "/projects/demo/items", `{"items":["ad:1","page:1","ad:2"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		added := decode(t, r.body)
		require.Equal(t, 2.0, added["filtered"])
		require.Equal(t, 1.0, added["queued"])
		r, m := f.backfeed("/backfeed/legacy/demo-"+secret, "text/plain", "ad:3\x00page:2\x00")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 1.0, m["new"])

		r = f.get("/demo/stats.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		stats := decode(t, r.body)
		require.Equal(t, 3.0, stats["counters"].(map[string]any)["items_filtered"])
		require.Equal(t, 0.6, stats["filter_rate"], "3 filtered of 5 offered")
		r = f.get("/metrics", "Authorization", "Bearer "+token)
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, `hoard_project_items_filtered_total{project="demo"} 3`)
		require.Contains(t, r.body, `hoard_project_filter_rate{project="demo"} 0.6`)

		r = f.admin(http.MethodDelete, "/projects/demo/filters/ads", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"filters": []any{}}, decode(t, r.body))

		// Queued before a filter exists, dropped by a sift after it.
		r = f.admin(http.MethodPost, "/projects/demo/items", `{"items":["ad:7","page:7"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.admin(http.MethodPost, "/projects/demo/filters", `{"name":"ads","type":"ad"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.admin(http.MethodPost, "/projects/demo/filters/sift", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 1.0, decode(t, r.body)["dropped"])
		r = f.get("/demo/items/ad:7.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "unknown", decode(t, r.body)["state"], "a sifted item is nowhere")
		r = f.admin(http.MethodPost, "/projects/nosuch/filters/sift", "", token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
	})
}
