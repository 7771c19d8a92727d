package server

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// PluginSource is what the public pages read of the plugin host: the
// plugins' states and their metrics as last polled. Neither call reaches
// a plugin, so a hung plugin never slows a page.
type PluginSource interface {
	Status() []pluginhost.Status
	Stats() map[string]plugins.Stats
}

// PublicPlugin is one plugin as viewers see it on the index page and in
// /plugins.json: its state and its unlabelled metrics (the totals, such as
// the BitTorrent plugin's seeders and announces). The binary's path, its
// PID and its last error are operators' business and stay in the admin
// log and /metrics.
type PublicPlugin struct {
	Name     string           `json:"name"`
	State    pluginhost.State `json:"state"`
	Since    time.Time        `json:"since"`
	Restarts int              `json:"restarts"`
	Metrics  []PublicMetric   `json:"metrics"`
}

// PublicMetric is one plugin metric's current value.
type PublicMetric struct {
	Name string `json:"name"`
	// Label is the name for people: "announces" for swarm_announces_total.
	Label string  `json:"label"`
	Help  string  `json:"help,omitempty"`
	Kind  string  `json:"kind"`
	Value float64 `json:"value"`
	// Labels are a labelled series' labels (only in /tracker.json: the
	// index and /plugins.json show totals).
	Labels map[string]string `json:"labels,omitempty"`
}

// publicPlugins renders source for viewers, in configuration order, with
// each plugin's totals sorted by name; nil source gives none.
func publicPlugins(source PluginSource) []PublicPlugin { return renderPlugins(source, false) }

// renderPlugins is publicPlugins, with the labelled series too when
// labelled is set (sorted by name, then labels).
func renderPlugins(source PluginSource, labelled bool) []PublicPlugin {
	if source == nil {
		return nil
	}
	stats := source.Stats()
	var out []PublicPlugin
	for _, st := range source.Status() {
		p := PublicPlugin{Name: st.Name, State: st.State, Since: st.Since, Restarts: st.Restarts, Metrics: []PublicMetric{}}
		for _, m := range stats[st.Name].Metrics {
			if len(m.Labels) > 0 && !labelled {
				continue
			}
			p.Metrics = append(p.Metrics, PublicMetric{Name: m.Name, Label: metricLabel(m.Name), Help: m.Help, Kind: m.Kind.String(),
				Value: m.Value, Labels: m.Labels})
		}
		slices.SortFunc(p.Metrics, func(a, b PublicMetric) int {
			return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(labelText(a.Labels), labelText(b.Labels)))
		})
		out = append(out, p)
	}
	return out
}

// PluginsJSON serves GET /plugins.json: every plugin's state and totals,
// for the leaderboard and for scripts (CORS *).
type PluginsJSON struct {
	Source PluginSource
}

func (p *PluginsJSON) Serve(c *gin.Context) {
	list := publicPlugins(p.Source)
	if list == nil {
		list = []PublicPlugin{}
	}
	c.Header("Access-Control-Allow-Origin", "*")
	c.Header("Cache-Control", "max-age=2")
	c.JSON(http.StatusOK, list)
}

// labelText orders labelled series: their labels, sorted, as k=v pairs.
func labelText(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// TrackerJSON serves GET /tracker.json: every plugin's state and all its
// metrics, labelled series included (the reaper's torrents by state, its
// steps, …), for the tracker page and for scripts (CORS *). Like
// /plugins.json it reads the host's last poll, never a plugin.
type TrackerJSON struct {
	Source PluginSource
}

func (p *TrackerJSON) Serve(c *gin.Context) {
	list := renderPlugins(p.Source, true)
	if list == nil {
		list = []PublicPlugin{}
	}
	c.Header("Access-Control-Allow-Origin", "*")
	c.Header("Cache-Control", "max-age=2")
	c.JSON(http.StatusOK, list)
}

// metricLabel turns a metric name into words for the index page: the
// plugin-internal component prefix and the Prometheus unit suffix go, and
// underscores become spaces ("swarm_announces_total" -> "announces").
func metricLabel(name string) string {
	for _, prefix := range []string{"swarm_", "tracker_"} {
		name = strings.TrimPrefix(name, prefix)
	}
	name = strings.TrimSuffix(name, "_total")
	return strings.ReplaceAll(name, "_", " ")
}
