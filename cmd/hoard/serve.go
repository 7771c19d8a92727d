package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

type serveOptions struct {
	listen     string
	redisURL   string
	redisFsync string
	// redisFsyncAsked: the policy came from the flag or the environment,
	// not the default, so an external Redis that differs deserves a warning.
	redisFsyncAsked  bool
	redisMemoryAlarm float64
	// redisMaxMemory is the supervised redis-server's maxmemory, as given
	// (localredis.ParseMaxMemory's forms).
	redisMaxMemory string
	// redisReplayTarget bounds the AOF's replay (0: hoard never rewrites
	// the AOF itself).
	redisReplayTarget    time.Duration
	dataDir              string
	node                 string
	adminToken           string
	metricsToken         string
	insecureNoAdminToken bool
	projectsFile         string
	publicURL            string
	trustedProxies       []string
	createListed         bool
	logFormat            string
	logLevel             string
	plugins              pluginOptions
	maxViewers           int
	maxViewersPerAddress int
	viewerIdleTimeout    time.Duration
	// allFrontendsCountBatches: no frontend of a build from before claim
	// batches runs on this Redis (queues.Options.PreBatchFrontends).
	allFrontendsCountBatches bool
	// configPath is the configuration file (empty: none), and
	// commandLine the flags given, for a reload.
	configPath  string
	commandLine []string
}

func serveCommand() *cobra.Command {
	var o serveOptions
	var configPath string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the tracker (with a supervised local redis-server unless HOARD_REDIS_URL is set)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				configPath = os.Getenv("HOARD_CONFIG")
			}
			// The command line, kept so a reload re-reads the file and the
			// variables under the same flags.
			o.commandLine = commandLine(cmd.Flags())
			var file *configFile
			if configPath != "" {
				var err error
				if file, err = loadConfigFile(configPath); err != nil {
					return err
				}
			}
			if err := applySettings(cmd.Flags(), file); err != nil {
				return err
			}
			o.configPath = configPath
			o.redisFsyncAsked = cmd.Flags().Changed("redis-fsync")
			return runServe(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "configuration file (TOML; hoard config defaults prints one): flags and variables override it ($HOARD_CONFIG)")
	for _, s := range serveSettings {
		s.register(f, &o)
	}
	return cmd
}

// commandLine is the flags the command line set, as arguments.
func commandLine(fs *pflag.FlagSet) []string {
	var args []string
	fs.Visit(func(f *pflag.Flag) {
		if f.Name == "config" {
			return
		}
		if list, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range list.GetSlice() {
				args = append(args, "--"+f.Name+"="+v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// engineOptions are the queue engine's options from serve's.
func engineOptions(o serveOptions, logger *slog.Logger) queues.Options {
	if !o.allFrontendsCountBatches {
		logger.Info("--all-frontends-count-batches=false: every multi done reads each item's claim record; set it true once no frontend of a build from before claim batches runs")
	}
	return queues.Options{Logger: logger, PreBatchFrontends: !o.allFrontendsCountBatches}
}

// viewerLimits checks the viewer options and resolves the total cap from
// the descriptor limit: an explicit cap above what the limit allows is
// lowered, with a warning.
func viewerLimits(o serveOptions, nofile uint64, logger *slog.Logger) (total int, err error) {
	switch {
	case o.maxViewers < 0:
		return 0, fmt.Errorf("--max-viewers must be 0 (derived from the descriptor limit) or more, not %d", o.maxViewers)
	case o.maxViewersPerAddress < 1:
		return 0, fmt.Errorf("--max-viewers-per-address must be at least 1, not %d", o.maxViewersPerAddress)
	case o.viewerIdleTimeout < time.Second:
		return 0, fmt.Errorf("--viewer-idle-timeout must be at least 1s, not %s", o.viewerIdleTimeout)
	}
	total, lowered := leaderboard.MaxViewersFor(o.maxViewers, nofile)
	if lowered {
		logger.Warn("--max-viewers is more than the descriptor limit leaves for viewers; lowered",
			"asked", o.maxViewers, "max_viewers", total, "descriptor_limit", nofile)
	}
	if total == 0 {
		logger.Warn("the descriptor limit leaves no room for live viewers: every websocket is refused; raise the hard limit (ulimit -Hn, LimitNOFILE=)",
			"descriptor_limit", nofile)
	}
	logger.Info("live viewers", "max_viewers", total, "max_viewers_per_address", o.maxViewersPerAddress,
		"viewer_idle_timeout", o.viewerIdleTimeout)
	return total, nil
}

func newLogger(format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// parseLogLevel reads --log-level.
func parseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level / HOARD_LOG_LEVEL: %q is not debug, info, warn or error", s)
	}
	return level, nil
}

func runServe(ctx context.Context, o serveOptions) error {
	// Checked before anything starts: a typo must not quietly run Redis
	// with a weaker policy than the operator asked for.
	fsync, err := localredis.ParseFsyncPolicy(o.redisFsync)
	if err != nil {
		return fmt.Errorf("--redis-fsync / HOARD_REDIS_FSYNC: %w", err)
	}
	level, err := parseLogLevel(o.logLevel)
	if err != nil {
		return err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return fmt.Errorf("--log-format / HOARD_LOG_FORMAT: %q is not text or json", o.logFormat)
	}
	maxMemory, err := redisMaxMemory(o.redisMaxMemory)
	if err != nil {
		return err
	}
	if o.redisReplayTarget < 0 {
		return fmt.Errorf("--redis-aof-replay-target / HOARD_REDIS_AOF_REPLAY_TARGET must be 0 (off) or positive, not %s", o.redisReplayTarget)
	}
	replayTarget := o.redisReplayTarget
	if replayTarget == 0 {
		replayTarget = -1 // localredis: off
	}
	if o.plugins.eventRetry <= 0 {
		return fmt.Errorf("--plugin-event-retry must be positive, got %s", o.plugins.eventRetry)
	}
	// A LevelVar, so a SIGHUP can change the level of every logger made
	// from this one.
	levelVar := new(slog.LevelVar)
	levelVar.Set(level)
	logger := newLogger(o.logFormat, levelVar)
	slog.SetDefault(logger)
	redis.SetLogger(redisLogger{logger})
	if o.adminToken == "" && !o.insecureNoAdminToken {
		logger.Warn("HOARD_ADMIN_TOKEN is not set: every admin call will be refused")
	}
	if o.adminToken == "" && o.insecureNoAdminToken {
		logger.Warn("INSECURE: the admin API accepts calls without a token (--insecure-no-admin-token)")
	}
	if o.adminToken == "" && o.metricsToken == "" {
		logger.Warn("INSECURE: /metrics is open to anyone who can reach this port (project names, downloaders' activity, plugin state); set HOARD_ADMIN_TOKEN or HOARD_METRICS_TOKEN to close it")
	}
	// Raised before anything is opened or started, so the children inherit
	// it and the viewer cap is computed from the limit hoard runs under.
	nofile := raiseDescriptorLimit(logger)
	maxViewers, err := viewerLimits(o, nofile, logger)
	if err != nil {
		return err
	}

	redisURL := o.redisURL
	if redisURL == "" {
		dir, err := filepath.Abs(filepath.Join(o.dataDir, "redis"))
		if err != nil {
			return err
		}
		// The redis-server outlives a crash of hoard (a keeper stops it if
		// no hoard adopts it within localredis.DefaultOrphanGrace), so a
		// restarted hoard adopts it in milliseconds instead of replaying
		// the AOF: a crash of hoard is never an outage. A clean stop
		// (the deferred Stop) stops it.
		child := localredis.New(localredis.Config{DataDir: dir, AppendOnly: true, AppendFsync: fsync, MaxMemory: maxMemory,
			AOFReplayTarget: replayTarget, OutliveCrash: true, Logger: logger.With("component", "redis-server")})
		if err := child.Start(ctx); err != nil {
			return err
		}
		defer func() {
			if err := child.Stop(); err != nil {
				logger.Error("stopping redis-server", "err", err)
			}
		}()
		redisURL = child.URL()
		logger.Info("started local redis-server", "url", redisURL, "data_dir", dir, "appendfsync", fsync, "maxmemory", maxMemory)
	} else if o.redisFsyncAsked {
		logger.Warn("--redis-fsync / HOARD_REDIS_FSYNC applies only to the supervised redis-server; with HOARD_REDIS_URL set, appendfsync is the Redis operator's setting (see docs/durability.md)", "asked", fsync)
	}
	rdb, err := newRedisClient(redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := pingWithRetry(ctx, rdb); err != nil {
		return err
	}
	if o.redisURL != "" {
		var asked localredis.FsyncPolicy // none: the operator's Redis decides
		if o.redisFsyncAsked {
			asked = fsync
		}
		logRedisDurability(ctx, rdb, asked, logger)
	}

	// Stopped before the client closes (defers run last first), so a
	// check in flight ends quietly.
	memoryCtx, stopMemory := context.WithCancel(ctx)
	defer stopMemory()
	memory, err := startMemoryMonitor(memoryCtx, rdb, o.redisMemoryAlarm, logger)
	if err != nil {
		return err
	}

	engine := queues.NewEngine(rdb, engineOptions(o, logger))
	if o.createListed {
		if err := createListedProjects(ctx, engine, o.projectsFile, logger); err != nil {
			return err
		}
	}
	// The offloader keeps Redis memory bounded for projects that ask for it
	// (offload_above, done_mode); its files live under the data directory.
	offloader := &queues.Offloader{Engine: engine, Dir: o.dataDir, Node: o.node, Logger: logger.With("component", "offload")}
	if err := offloader.Start(ctx); err != nil {
		return fmt.Errorf("offloader: %w", err)
	}
	defer offloader.Stop()

	pluginHost, err := startPlugins(ctx, o.plugins, o.dataDir, redisURL, rdb, engine, logger)
	if err != nil {
		return err
	}
	defer pluginHost.Stop()
	srv, err := server.New(server.Config{
		Listen: o.listen, AdminToken: o.adminToken, InsecureNoAdminToken: o.insecureNoAdminToken, MetricsToken: o.metricsToken,
		ProjectsFile: o.projectsFile, PublicURL: o.publicURL, TrustedProxies: o.trustedProxies, Logger: logger,
		// The plugins' own APIs and page data are forwarded to them: the
		// host builds none of a plugin's stores and writes none of its keys.
		Offloader: offloader, Collectors: []prometheus.Collector{pluginHost.Collector(), memory, currentBuild().collector()},
		Plugins: pluginHost, PluginAPI: pluginHost, PluginAccess: pluginHost, PluginJobs: pluginHost, MaxViewers: maxViewers, MaxViewersPerAddress: o.maxViewersPerAddress,
		ViewerIdleTimeout: o.viewerIdleTimeout,
	}, engine)
	if err != nil {
		return err
	}
	// Watched before the server answers, so whoever waits for it to be
	// ready may send a SIGHUP (unwatched, it would end the process).
	reloadCtx, stopReload := context.WithCancel(ctx)
	defer stopReload()
	(&reloader{current: o, level: levelVar, plugins: pluginHost, server: srv, logger: logger, nofile: nofile}).watchHangups(reloadCtx)
	if err := srv.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-srv.Done():
		if err != nil {
			return fmt.Errorf("http server: %w", err)
		}
	}
	return srv.Stop()
}

// redisMaxMemory resolves --redis-maxmemory to bytes. Where the machine's
// memory is unknown (not Linux), the default share becomes no limit.
func redisMaxMemory(value string) (int64, error) {
	total := localredis.MachineMemory()
	if total == 0 && value == localredis.DefaultMaxMemory {
		return 0, nil
	}
	n, err := localredis.ParseMaxMemory(value, total)
	if err != nil {
		return 0, fmt.Errorf("--redis-maxmemory / HOARD_REDIS_MAXMEMORY: %w", err)
	}
	return n, nil
}

func pingWithRetry(ctx context.Context, rdb redis.UniversalClient) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cannot reach redis: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// createListedProjects creates the projects named in projects.json that do
// not exist yet, so `make run` serves the example project at once.
func createListedProjects(ctx context.Context, engine *queues.Engine, path string, logger *slog.Logger) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	var doc struct {
		Projects []struct {
			Name  string `json:"name"`
			Title string `json:"title"`
		} `json:"projects"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range doc.Projects {
		title := p.Title
		_, err := engine.CreateProject(ctx, p.Name, queues.SettingsPatch{Title: &title})
		var qe *queues.Error
		switch {
		case err == nil:
			logger.Info("created project from projects file", "project", p.Name)
		case errors.As(err, &qe) && qe.Code == queues.CodeExists:
		default:
			return fmt.Errorf("create project %q from %s: %w", p.Name, path, err)
		}
	}
	return nil
}
