package pluginhost_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

func TestParseSpecs(t *testing.T) {
	dir := t.TempDir()
	settingsFile := filepath.Join(dir, "bt.json")
	require.NoError(t, os.WriteFile(settingsFile, []byte(`{"listen":":6969"}`), 0o600))

	specs, err := pluginhost.ParseSpecs(
		[]string{"bittorrent=/usr/lib/hoard/hoard-bittorrent", " example ", ""},
		[]string{"bittorrent=@" + settingsFile, `example={"tick_period":"1m"}`},
	)
	require.NoError(t, err)
	require.Equal(t, []pluginhost.Spec{
		{Name: "bittorrent", Path: "/usr/lib/hoard/hoard-bittorrent", Settings: json.RawMessage(`{"listen":":6969"}`)},
		{Name: "example", Settings: json.RawMessage(`{"tick_period":"1m"}`)},
	}, specs)

	for _, tc := range []struct {
		plugins, settings []string
		want              string
	}{
		{[]string{"Bad=/x"}, nil, `plugin name "Bad" must be`},
		{[]string{"a=/x", "a=/y"}, nil, `plugin "a" is named twice`},
		{[]string{"a=/x"}, []string{"b={}"}, `--plugin-settings for "b", which no --plugin names`},
		{[]string{"a=/x"}, []string{"a={"}, "settings are not valid JSON"},
		{[]string{"a=/x"}, []string{"a"}, "want NAME=JSON or NAME=@FILE"},
		{[]string{"a=/x"}, []string{"a=@" + filepath.Join(dir, "missing.json")}, "no such file"},
	} {
		_, err := pluginhost.ParseSpecs(tc.plugins, tc.settings)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestNewHostRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o600))
	builtins := map[string]plugins.Factory{"example": (&controlled{}).factory}
	for _, tc := range []struct {
		spec pluginhost.Spec
		want string
	}{
		{pluginhost.Spec{Name: "nothere"}, `plugin "nothere" has no path and is not built in (builtins: [example])`},
		{pluginhost.Spec{Name: "x", Path: filepath.Join(dir, "missing")}, "no such file"},
		{pluginhost.Spec{Name: "x", Path: dir}, "is a directory"},
		{pluginhost.Spec{Name: "x", Path: notExecutable}, "is not executable"},
		{pluginhost.Spec{Name: "http"}, "reserved"},
		{pluginhost.Spec{Name: "a{b}"}, "must be 1-32 of a-z"},
		{pluginhost.Spec{Name: "example", Settings: json.RawMessage("{")}, "settings are not valid JSON"},
	} {
		_, err := pluginhost.NewHost(pluginhost.Options{Plugins: []pluginhost.Spec{tc.spec}, Builtins: builtins})
		require.ErrorContains(t, err, tc.want, tc.spec.Name)
	}
	_, err := pluginhost.NewHost(pluginhost.Options{Plugins: []pluginhost.Spec{{Name: "example"}, {Name: "example"}}, Builtins: builtins})
	require.ErrorContains(t, err, "configured twice")
}

// statsPlugin returns whatever metrics the test gives it.
type statsPlugin struct {
	controlledPlugin
	metrics []plugins.Metric
}

func (p *statsPlugin) Stats(context.Context) (plugins.Stats, error) {
	return plugins.Stats{Metrics: p.metrics}, nil
}

func TestPluginMetricsNeverBreakTheScrape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		metrics := []plugins.Metric{
			{Name: "announces_total", Help: "Announces.", Kind: plugins.Counter, Value: 5, Labels: map[string]string{"proto": "udp"}},
			{Name: "announces_total", Kind: plugins.Counter, Value: 7, Labels: map[string]string{"proto": "http"}},
			{Name: "announces_total", Kind: plugins.Counter, Value: 9, Labels: map[string]string{"proto": "http"}},   // duplicate series
			{Name: "announces_total", Kind: plugins.Gauge, Value: 1, Labels: map[string]string{"proto": "ws"}},       // kind changes
			{Name: "announces_total", Kind: plugins.Counter, Value: 1, Labels: map[string]string{"family": "inet6"}}, // labels change
			{Name: "bad-name", Kind: plugins.Gauge, Value: 1},
			{Name: "swarms", Kind: plugins.Gauge, Value: 3},
			{Name: "no_kind", Value: 1},
			{Name: "bad_label", Kind: plugins.Gauge, Value: 1, Labels: map[string]string{"__name__": "x"}},
			{Name: "bad_value", Kind: plugins.Gauge, Value: 1, Labels: map[string]string{"v": "\xff"}},
		}
		factory := func(context.Context, *slog.Logger) (plugins.Plugin, error) {
			return &statsPlugin{controlledPlugin: controlledPlugin{c: &controlled{}}, metrics: metrics}, nil
		}
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "bit-torrent"}}, Builtins: map[string]plugins.Factory{"bit-torrent": factory},
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "bit-torrent"))
		synctest.Wait()

		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(h.Collector()))
		mfs, err := reg.Gather()
		require.NoError(t, err, "the whole scrape succeeds")
		series := map[string]float64{}
		kinds := map[string]string{}
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "hoard_bit_torrent_") {
				continue
			}
			kinds[mf.GetName()] = mf.GetType().String() + " " + mf.GetHelp()
			for _, m := range mf.GetMetric() {
				key := mf.GetName()
				for _, lp := range m.GetLabel() {
					key += " " + lp.GetName() + "=" + lp.GetValue()
				}
				series[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		require.Equal(t, map[string]float64{
			"hoard_bit_torrent_announces_total proto=http": 7,
			"hoard_bit_torrent_announces_total proto=udp":  5,
			"hoard_bit_torrent_swarms":                     3,
		}, series)
		require.Equal(t, map[string]string{
			"hoard_bit_torrent_announces_total": "COUNTER Announces.",
			"hoard_bit_torrent_swarms":          "GAUGE Plugin metric swarms.",
		}, kinds)
	})
}
