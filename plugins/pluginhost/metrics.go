package pluginhost

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoardproject/hoard/plugins"
)

// Collector returns a Prometheus collector of the host's and the plugins'
// metrics, for hoard's /metrics registry:
//
//   - hoard_plugin_up{plugin}                              1 while running
//   - hoard_plugin_restarts_total{plugin}
//   - hoard_plugin_events_dropped_total{plugin,hook}       backlog full
//   - hoard_plugin_hook_errors_total{plugin,hook}
//   - hoard_plugin_events_handled_total{plugin,hook}       from the event logs, hook returned nil
//   - hoard_plugin_events_retried_total{plugin}            taken over after EventRetryAfter
//   - hoard_plugin_events_given_up_total{plugin}           delivered EventMaxDeliveries times
//   - hoard_plugin_events_trimmed_total{plugin}            pending but trimmed from the log
//   - hoard_plugin_ticks_total{plugin,job,result}          ok, error, skipped (ran elsewhere)
//   - hoard_plugin_items_queued_total{plugin}
//   - hoard_<plugin>_<metric>{labels}                      each plugin's own Stats
//
// It serves the stats cached by the last health check, so a scrape never
// waits for a plugin. Plugin metrics that would break the scrape (a bad
// name, a family whose kind or label names change) are left out.
func (h *Host) Collector() prometheus.Collector { return hostCollector{h} }

type hostCollector struct{ h *Host }

var (
	descUp = prometheus.NewDesc("hoard_plugin_up",
		"1 while the plugin is running, 0 otherwise.", []string{"plugin"}, nil)
	descRestarts = prometheus.NewDesc("hoard_plugin_restarts_total",
		"Times the host restarted the plugin after it died or failed its health checks.", []string{"plugin"}, nil)
	descDropped = prometheus.NewDesc("hoard_plugin_events_dropped_total",
		"Item events dropped because the plugin's backlog was full.", []string{"plugin", "hook"}, nil)
	descHookErrors = prometheus.NewDesc("hoard_plugin_hook_errors_total",
		"Hook calls that failed or timed out.", []string{"plugin", "hook"}, nil)
	descHandled = prometheus.NewDesc("hoard_plugin_events_handled_total",
		"Event log entries' items whose hook returned nil.", []string{"plugin", "hook"}, nil)
	descRetried = prometheus.NewDesc("hoard_plugin_events_retried_total",
		"Event log entries delivered again: their hook failed or their frontend died before acknowledging.", []string{"plugin"}, nil)
	descGivenUp = prometheus.NewDesc("hoard_plugin_events_given_up_total",
		"Event log entries given up after EventMaxDeliveries deliveries.", []string{"plugin"}, nil)
	descTrimmed = prometheus.NewDesc("hoard_plugin_events_trimmed_total",
		"Event log entries trimmed from the capped log before they were handled.", []string{"plugin"}, nil)
	descTicks = prometheus.NewDesc("hoard_plugin_ticks_total",
		"Scheduled job runs by result: ok, error, or skipped because another frontend held the period's lease.",
		[]string{"plugin", "job", "result"}, nil)
	descQueued = prometheus.NewDesc("hoard_plugin_items_queued_total",
		"Items queued on the plugin's behalf from its ticks.", []string{"plugin"}, nil)
)

// Describe sends nothing: the plugins' own metrics are only known at
// collection time, which makes this an unchecked collector.
func (hostCollector) Describe(chan<- *prometheus.Desc) {}

func (c hostCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.h.supervisors {
		name := s.spec.Name
		st := s.status()
		up := 0.0
		if st.State == StateRunning {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, name)
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.Restarts), name)
		for k := range hookKinds {
			ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.dropped[k].Load()), name, k.String())
			ch <- prometheus.MustNewConstMetric(descHookErrors, prometheus.CounterValue, float64(s.hookErrors[k].Load()), name, k.String())
			ch <- prometheus.MustNewConstMetric(descHandled, prometheus.CounterValue, float64(s.eventsHandled[k].Load()), name, k.String())
		}
		ch <- prometheus.MustNewConstMetric(descRetried, prometheus.CounterValue, float64(s.eventsRetried.Load()), name)
		ch <- prometheus.MustNewConstMetric(descGivenUp, prometheus.CounterValue, float64(s.eventsGivenUp.Load()), name)
		ch <- prometheus.MustNewConstMetric(descTrimmed, prometheus.CounterValue, float64(s.eventsTrimmed.Load()), name)
		s.mu.Lock()
		for job, t := range s.tickCount {
			ch <- prometheus.MustNewConstMetric(descTicks, prometheus.CounterValue, float64(t.ok), name, job, "ok")
			ch <- prometheus.MustNewConstMetric(descTicks, prometheus.CounterValue, float64(t.failed), name, job, "error")
			ch <- prometheus.MustNewConstMetric(descTicks, prometheus.CounterValue, float64(t.skipped), name, job, "skipped")
		}
		s.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.CounterValue, float64(s.itemsQueued.Load()), name)
		collectPluginMetrics(ch, name, s.cachedStats())
	}
}

// collectPluginMetrics turns one plugin's Stats into const metrics, keeping
// each family consistent (one kind, one set of label names, no duplicate
// series) so the registry never fails the whole scrape over them.
func collectPluginMetrics(ch chan<- prometheus.Metric, plugin string, stats plugins.Stats) {
	type family struct {
		desc   *prometheus.Desc
		kind   plugins.MetricKind
		labels []string
	}
	families := map[string]*family{}
	seen := map[string]bool{}
	prefix := "hoard_" + strings.ReplaceAll(plugin, "-", "_") + "_"
	for _, m := range stats.Metrics {
		if !plugins.ValidMetricName(m.Name) || (m.Kind != plugins.Counter && m.Kind != plugins.Gauge) || len(m.Labels) > plugins.MaxMetricLabels {
			continue
		}
		labels := make([]string, 0, len(m.Labels))
		valid := true
		for l := range m.Labels {
			valid = valid && plugins.ValidMetricName(l) && !strings.HasPrefix(l, "__")
			labels = append(labels, l)
		}
		if !valid {
			continue
		}
		slices.Sort(labels)
		f := families[m.Name]
		if f == nil {
			f = &family{kind: m.Kind, labels: labels,
				desc: prometheus.NewDesc(prefix+m.Name, helpOr(m.Help, m.Name), labels, nil)}
			families[m.Name] = f
		} else if f.kind != m.Kind || !slices.Equal(f.labels, labels) {
			continue
		}
		values := make([]string, len(labels))
		for i, l := range labels {
			values[i] = m.Labels[l]
		}
		series := m.Name + "\x00" + strings.Join(values, "\x00")
		if seen[series] {
			continue
		}
		seen[series] = true
		valueType := prometheus.GaugeValue
		if m.Kind == plugins.Counter {
			valueType = prometheus.CounterValue
		}
		metric, err := prometheus.NewConstMetric(f.desc, valueType, m.Value, values...)
		if err != nil {
			continue // e.g. a label value that is not UTF-8
		}
		ch <- metric
	}
}

func helpOr(help, name string) string {
	if help != "" {
		return help
	}
	return "Plugin metric " + name + "."
}
