package server_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func (f *fixture) get(path string, headers ...string) reply {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.url+path, nil)
	require.NoError(f.t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return f.do(req)
}

// metricLine finds the sample line that starts with prefix (name and
// labels) and returns its value, or fails.
func metricLine(t *testing.T, body, prefix string) string {
	t.Helper()
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			return rest
		}
	}
	require.Failf(t, "metric missing", "no sample %s in:\n%s", prefix, body)
	return ""
}

func TestMetricsAndStatsJSON(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		f.project("metered", queues.SettingsPatch{}, "m1", "m2")

		r := f.post("/metered/request", `{"downloader": "tester1", "api_version": "2", "version": "20240101.01"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.post("/metered/done", `{"downloader": "tester1", "version": "20240101.01", "item": "m1", "bytes": {"data": 1234}}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.post("/metered/multi=2//request", `{"downloader": "tester1", "api_version": "2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, http.StatusNotFound, f.get("/no/such/path").status)

		r = f.get("/metrics")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.header.Get("Content-Type"), "text/plain")
		body := r.body
		require.Equal(t, "1", metricLine(t, body, `hoard_http_request_duration_seconds_count{code="200",route="request"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_http_request_duration_seconds_count{code="200",route="done"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_http_request_duration_seconds_bucket{code="200",route="done",le="10"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_http_requests_total{code="200",route="multi_request"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_http_requests_total{code="404",route="other"}`))
		require.NotContains(t, body, `route="/`, "raw paths must never become labels")
		require.NotContains(t, body, `route="metered`)

		require.Equal(t, "1", metricLine(t, body, `hoard_project_items{place="done",project="metered"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_project_items{place="out",project="metered"}`))
		require.Equal(t, "0", metricLine(t, body, `hoard_project_items{place="todo",project="metered"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_project_irsr{project="metered"}`))
		require.Equal(t, "1", metricLine(t, body, `hoard_project_items_done_total{project="metered"}`))
		require.Equal(t, "1234", metricLine(t, body, `hoard_project_bytes_done_total{project="metered"}`))
		require.Equal(t, "2", metricLine(t, body, `hoard_project_item_requests_total{project="metered",result="served"}`))
		require.Equal(t, "0", metricLine(t, body, `hoard_project_item_requests_total{project="metered",result="rate_limited"}`))
		require.Equal(t, "2", metricLine(t, body, `hoard_project_items_served_total{project="metered"}`))
		require.Equal(t, "0", metricLine(t, body, `hoard_project_oldest_claim_age_seconds{project="metered"}`))
		require.Equal(t, "0", metricLine(t, body, `hoard_metrics_scrape_errors_total`))
		require.Contains(t, body, "go_goroutines ")

		// The previous scrape is itself counted under route="metrics".
		r = f.get("/metrics")
		require.Equal(t, "1", metricLine(t, r.body, `hoard_http_requests_total{code="200",route="metrics"}`))

		// stats.json: public, cacheable, readable cross-origin.
		r = f.get("/metered/stats.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		require.Equal(t, "public, max-age=2", r.header.Get("Cache-Control"))
		stats := decode(t, r.body)
		require.Equal(t, map[string]any{"todo": 0.0, "todo:backfeed": 0.0, "todo:secondary": 0.0, "todo:redo": 0.0,
			"todo:reserved": 0.0, "todo:scored": 0.0, "out": 1.0, "done": 1.0, "failed": 0.0, "offloaded": 0.0, "reclaimable": 0.0,
			"oldest_claim_age_seconds": 0.0}, stats["counts"])
		require.Equal(t, []any{map[string]any{"name": "tester1", "bytes": 1234.0, "items": 1.0, "version": "20240101.01"}},
			stats["downloaders"])
		require.Equal(t, 1.0, stats["irsr"])
		require.Equal(t, 1.0, stats["downloaders_total"])
		require.Equal(t, float64(f.clock.Now().UnixMilli()), stats["generated_at"])

		for _, path := range []string{"/nosuch/stats.json", "/Bad%20Slug/stats.json", "/metrics/stats.json"} {
			r = f.get(path)
			require.Equal(t, http.StatusNotFound, r.status, path)
			require.Equal(t, "project_not_found", decode(t, r.body)["code"], r.body)
			require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		}
		r = f.post("/metered/stats.json", `{}`)
		require.Equal(t, http.StatusMethodNotAllowed, r.status, r.body)
		// Warrior actions still want POSTs.
		require.Equal(t, http.StatusMethodNotAllowed, f.get("/metered/request").status)

		r = f.get("/metrics")
		require.Equal(t, "1", metricLine(t, r.body, `hoard_http_requests_total{code="200",route="stats_json"}`))
		require.Equal(t, "3", metricLine(t, r.body, `hoard_http_requests_total{code="404",route="stats_json"}`))
		require.Equal(t, "1", metricLine(t, r.body, `hoard_http_requests_total{code="405",route="request"}`))
	})
}

func TestMetricsToken(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{MetricsToken: "metrics-secret"})

		r := f.get("/metrics")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		require.Equal(t, "unauthorized", decode(t, r.body)["code"])
		require.NotContains(t, r.body, "hoard_http")
		r = f.get("/metrics", "Authorization", "Bearer wrong")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		r = f.get("/metrics", "Authorization", "metrics-secret")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)

		r = f.get("/metrics", "Authorization", "Bearer metrics-secret")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "3", metricLine(t, r.body, `hoard_http_requests_total{code="401",route="metrics"}`))

		// stats.json stays public whatever the token.
		f.project("open", queues.SettingsPatch{})
		require.Equal(t, http.StatusOK, f.get("/open/stats.json").status)
	})
}

// TestMetricsClosedByTheAdminToken: with an admin token and no metrics
// token, /metrics is not open to everyone (it was); the admin token reads it.
func TestMetricsClosedByTheAdminToken(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: "admin-secret"})
		require.Equal(t, http.StatusUnauthorized, f.get("/metrics").status)
		require.Equal(t, http.StatusUnauthorized, f.get("/metrics", "Authorization", "Bearer metrics-secret").status)
		r := f.get("/metrics", "Authorization", "Bearer admin-secret")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, "hoard_http_requests_total")

		both := newFixture(t, b, server.Config{AdminToken: "admin-secret", MetricsToken: "metrics-secret"})
		require.Equal(t, http.StatusOK, both.get("/metrics", "Authorization", "Bearer metrics-secret").status)
		require.Equal(t, http.StatusOK, both.get("/metrics", "Authorization", "Bearer admin-secret").status)
	})
}

func TestMetricsOffloadedPerQueue(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		above, segment := 2000, 1000
		items := make([]string, 3500)
		for i := range items {
			items[i] = "u:" + strconv.Itoa(i)
		}
		f.project("big", queues.SettingsPatch{OffloadAbove: &above, OffloadSegment: &segment}, items...)
		o := &queues.Offloader{Engine: f.engine, Dir: t.TempDir(), Node: "n", Logger: quiet}
		require.NoError(t, o.RunOnce(f.ctx))
		counts, err := f.engine.Counts(f.ctx, "big")
		require.NoError(t, err)
		require.Positive(t, counts.Offloaded)

		body := f.get("/metrics").body
		require.Equal(t, strconv.FormatInt(counts.Offloaded, 10), metricLine(t, body, `hoard_project_items_offloaded{project="big",queue="todo"}`))
		require.Equal(t, "0", metricLine(t, body, `hoard_project_items_offloaded{project="big",queue="todo:secondary"}`))
		require.Equal(t, "3500", metricLine(t, body, `hoard_project_items{place="todo",project="big"}`), "offloaded items still wait in todo")
	})
}
