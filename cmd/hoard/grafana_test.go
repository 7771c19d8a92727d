package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

var (
	seriesName   = regexp.MustCompile(`\bhoard_[a-z_]+\b`)
	byLabels     = regexp.MustCompile(`by \(([^)]*)\)`)
	legendLabels = regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
	// exposedLine is one sample line of the text exposition: name{labels} value.
	exposedLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s`)
	labelName   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// Every series the Grafana dashboard queries, and every label it groups
// or names a legend by, is one a real `hoard serve` (a project served and
// done, the BitTorrent plugin running) exposes on /metrics.
func TestGrafanaDashboardQueriesExposedSeries(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "contrib", "grafana", "hoard.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)

	b := redistest.Require(t)[0]
	ctx := t.Context()
	require.NoError(t, redistest.Flush(ctx, b))
	engine := queues.NewEngine(b.Client, queues.Options{})
	_, err = engine.CreateProject(ctx, "graf", queues.SettingsPatch{})
	require.NoError(t, err)
	_, err = engine.Enqueue(ctx, "graf", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "one"}, {Name: "two"}})
	require.NoError(t, err)
	trackerPort, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	t.Setenv("HOARD_REDIS_URL", b.URL)
	t.Setenv("HOARD_ADMIN_TOKEN", "")
	t.Setenv("HOARD_METRICS_TOKEN", "")
	base := serveInProcess(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--projects-file", filepath.Join(t.TempDir(), "none.json"),
		"--plugin", "bittorrent", "--plugin-settings", fmt.Sprintf(`bittorrent={"http":"127.0.0.1:%d","udp4":"","udp6":""}`, trackerPort))
	post := func(path, body string) string {
		resp, err := http.Post(base+path, "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
		return string(out)
	}
	post("/graf/request", `{"downloader":"grafwarrior","api_version":"2","version":"20240101.01"}`)
	post("/graf/done", `{"downloader":"grafwarrior","version":"20240101.01","item":"one","bytes":{"data":1234}}`)
	// A refusal, so hoard_refusals_total has a sample.
	resp, err := http.Post(base+"/graf/request", "application/json", bytes.NewBufferString(`{`))
	require.NoError(t, err)
	resp.Body.Close()

	status, metrics := get(t, base+"/metrics", "")
	require.Equal(t, http.StatusOK, status)
	labels := map[string]map[string]bool{} // series -> its label names
	for _, line := range strings.Split(metrics, "\n") {
		m := exposedLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		if labels[m[1]] == nil {
			labels[m[1]] = map[string]bool{}
		}
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			labels[m[1]][l[1]] = true
		}
	}
	checked := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			names := seriesName.FindAllString(target.Expr, -1)
			require.NotEmpty(t, names, "panel %q queries no hoard series", p.Title)
			var wanted []string
			for _, m := range byLabels.FindAllStringSubmatch(target.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					wanted = append(wanted, strings.TrimSpace(l))
				}
			}
			for _, m := range legendLabels.FindAllStringSubmatch(target.LegendFormat, -1) {
				wanted = append(wanted, m[1])
			}
			for _, name := range names {
				have, ok := labels[name]
				require.True(t, ok, "panel %q: /metrics has no series %s", p.Title, name)
				for _, l := range wanted {
					// instance is Prometheus's own label, added at scrape.
					require.True(t, l == "instance" || have[l], "panel %q: %s has no label %q", p.Title, name, l)
				}
				checked++
			}
		}
	}
	t.Logf("%d series of %d panels found on /metrics", checked, len(dash.Panels))
}
