package main

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Overrides for what the Go toolchain records in the binary, set with
// -ldflags "-X main.version=… -X main.commit=… -X main.buildTime=…" by a
// build that knows better (a release tarball built outside git).
var (
	version   string
	commit    string
	buildTime string
)

// buildVersion is what `hoard --version` prints and hoard_build_info
// carries.
type buildVersion struct {
	Version, Commit, BuildTime, GoVersion string
}

// currentBuild reads the build info Go stamps into every binary (module
// version, vcs.revision, vcs.time, vcs.modified); -ldflags overrides win.
func currentBuild() buildVersion {
	b := buildVersion{Version: "(devel)", Commit: "unknown", BuildTime: "unknown", GoVersion: "unknown"}
	if info, ok := debug.ReadBuildInfo(); ok {
		b.GoVersion = info.GoVersion
		if v := info.Main.Version; v != "" {
			b.Version = v
		}
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.BuildTime = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && b.Commit != "unknown" {
			b.Commit += "-dirty"
		}
	}
	if version != "" {
		b.Version = version
	}
	if commit != "" {
		b.Commit = commit
	}
	if buildTime != "" {
		b.BuildTime = buildTime
	}
	return b
}

func (b buildVersion) String() string {
	return fmt.Sprintf("hoard %s (commit %s, built %s, %s)", b.Version, b.Commit, b.BuildTime, b.GoVersion)
}

// collector is the hoard_build_info gauge: always 1, the build in its
// labels, so a dashboard can show which build each frontend runs.
func (b buildVersion) collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hoard_build_info",
		Help: "Always 1; the labels say which build of hoard is running.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "build_time": b.BuildTime, "go_version": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
