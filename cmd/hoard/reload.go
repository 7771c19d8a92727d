package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/server"
)

// reloader applies a SIGHUP: it reads the configuration file and the
// variables again under the same command line, applies what can change
// while hoard runs (log level, projects file, plugin settings, the live
// viewers' limits), and logs
// each other setting that changed as needing a restart. A file with an
// error changes nothing.
type reloader struct {
	current serveOptions
	level   *slog.LevelVar
	plugins *pluginhost.Host
	server  *server.Server
	logger  *slog.Logger
	// nofile is the descriptor limit hoard runs under, which bounds the
	// viewer cap (viewerLimits) at a reload as at the start.
	nofile uint64
}

// run reloads on every SIGHUP until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload()
		}
	}
}

// watchHangups delivers SIGHUP to r until ctx ends.
func (r *reloader) watchHangups(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		r.run(ctx, hup)
	}()
}

func (r *reloader) reload() {
	next, err := r.read()
	if err != nil {
		r.logger.Error("reload refused: nothing changed", "err", err)
		return
	}
	var applied, needRestart []string
	for _, s := range serveSettings {
		if settingString(s, &r.current) == settingString(s, &next) {
			continue
		}
		if !s.reload {
			needRestart = append(needRestart, s.fileKey())
			continue
		}
		if err := r.apply(s, next); err != nil {
			r.logger.Error("reload: cannot apply a setting; it keeps its value", "key", s.fileKey(), "err", err)
			continue
		}
		applied = append(applied, s.fileKey())
	}
	// The projects file is read again even when its path did not change.
	r.server.SetProjectsFile(r.current.projectsFile)
	for _, key := range needRestart {
		r.logger.Warn("reload: this setting changed but cannot change while hoard runs; restart hoard to apply it", "key", key)
	}
	r.logger.Info("reloaded", "applied", applied, "need_restart", needRestart)
}

// read resolves the settings again: the same flags, the variables, the
// file as it is now.
func (r *reloader) read() (serveOptions, error) {
	var next serveOptions
	fs := serveFlagSet(&next)
	if err := fs.Parse(r.current.commandLine); err != nil {
		return next, err
	}
	var file *configFile
	if r.current.configPath != "" {
		var err error
		if file, err = loadConfigFile(r.current.configPath); err != nil {
			return next, err
		}
	}
	if err := applySettings(fs, file); err != nil {
		return next, err
	}
	if _, err := parseLogLevel(next.logLevel); err != nil {
		return next, err
	}
	if _, err := pluginhost.ParseSpecs(next.plugins.plugins, next.plugins.settings); err != nil {
		return next, err
	}
	return next, nil
}

func (r *reloader) apply(s setting, next serveOptions) error {
	switch s.flag {
	case "log-level":
		level, err := parseLogLevel(next.logLevel)
		if err != nil {
			return err
		}
		r.level.Set(level)
		r.current.logLevel = next.logLevel
	case "projects-file":
		r.current.projectsFile = next.projectsFile
	case "plugin-settings":
		return r.applyPluginSettings(next)
	case "max-viewers", "max-viewers-per-address", "viewer-idle-timeout":
		return r.applyViewerLimits(next)
	default:
		return fmt.Errorf("no way to apply %s while running", s.fileKey())
	}
	return nil
}

// applyViewerLimits gives the leaderboard its new viewer limits, checked
// and bounded as at the start; the three change together.
func (r *reloader) applyViewerLimits(next serveOptions) error {
	if next.maxViewers == r.current.maxViewers && next.maxViewersPerAddress == r.current.maxViewersPerAddress &&
		next.viewerIdleTimeout == r.current.viewerIdleTimeout {
		return nil // applied with another of the three
	}
	total, err := viewerLimits(next, r.nofile, r.logger)
	if err != nil {
		return err
	}
	r.server.SetViewerLimits(total, next.maxViewersPerAddress, next.viewerIdleTimeout)
	r.current.maxViewers, r.current.maxViewersPerAddress, r.current.viewerIdleTimeout =
		next.maxViewers, next.maxViewersPerAddress, next.viewerIdleTimeout
	return nil
}

// applyPluginSettings restarts each plugin whose settings changed with
// its new ones (pluginhost.Host.Reconfigure).
func (r *reloader) applyPluginSettings(next serveOptions) error {
	if !slices.Equal(r.current.plugins.plugins, next.plugins.plugins) {
		return fmt.Errorf("the plugins themselves changed: restart hoard to apply it")
	}
	before, err := pluginhost.ParseSpecs(r.current.plugins.plugins, r.current.plugins.settings)
	if err != nil {
		return err
	}
	after, err := pluginhost.ParseSpecs(next.plugins.plugins, next.plugins.settings)
	if err != nil {
		return err
	}
	for i, spec := range after {
		if bytes.Equal(spec.Settings, before[i].Settings) {
			continue
		}
		if err := r.plugins.Reconfigure(spec.Name, spec.Settings); err != nil {
			return err
		}
		r.logger.Info("reload: plugin restarts with its new settings", "plugin", spec.Name)
	}
	r.current.plugins.settings = next.plugins.settings
	return nil
}

// settingString is a setting's value in o, for comparing two reads.
func settingString(s setting, o *serveOptions) string {
	switch p := s.ptr(o).(type) {
	case *string:
		return *p
	case *bool:
		return fmt.Sprint(*p)
	case *int:
		return fmt.Sprint(*p)
	case *float64:
		return fmt.Sprint(*p)
	case *time.Duration:
		return p.String()
	case *[]string:
		return strings.Join(*p, "\x00")
	}
	return ""
}
