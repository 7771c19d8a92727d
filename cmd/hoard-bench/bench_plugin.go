package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// defaultPluginBinary is hoard-bittorrent beside this binary (make bench
// builds both into bin/), or "" when there is none: the tracker then runs
// in this process.
func defaultPluginBinary() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	path := filepath.Join(filepath.Dir(self), "hoard-bittorrent")
	if info, err := os.Stat(path); err != nil || info.IsDir() {
		return ""
	}
	return path
}

// startExternalBenchTracker runs hoard's BitTorrent plugin as operators
// do, a hoard-bittorrent process under a plugin host over go-plugin, so
// its CPU is its own process's (/proc/<pid>/stat), apart from the load
// generator's.
func startExternalBenchTracker(ctx context.Context, name, binary, redisURL string, settings json.RawMessage, logger *slog.Logger) (*announceTarget, func(), error) {
	host, err := pluginhost.NewHost(pluginhost.Options{
		Plugins:  []pluginhost.Spec{{Name: "bittorrent", Path: binary, Settings: settings}},
		RedisURL: redisURL, Logger: logger,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("hoard plugin %s: %w", binary, err)
	}
	if err := host.Start(ctx); err != nil {
		return nil, nil, err
	}
	stop := func() { _ = host.Stop() }
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := host.WaitRunning(waitCtx, "bittorrent"); err != nil {
		stop()
		return nil, nil, fmt.Errorf("hoard plugin %s: %w", binary, err)
	}
	st := host.Status()[0]
	if st.PID == 0 {
		stop()
		return nil, nil, fmt.Errorf("hoard plugin %s runs with no process id", binary)
	}
	t := &announceTarget{name: name, hoard: true}
	t.processCPU = func() (time.Duration, error) { return processCPU(st.PID) }
	if err := t.setListeners(st.Description.Listeners); err != nil {
		stop()
		return nil, nil, err
	}
	return t, stop, nil
}
