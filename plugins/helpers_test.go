package plugins_test

import "github.com/hoardproject/hoard/plugins"

// metric finds a metric's value in a plugin's stats.
func metric(stats plugins.Stats, name string) (float64, bool) {
	for _, m := range stats.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}
