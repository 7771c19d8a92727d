package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/redismemory"
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
	// envErr is a malformed number or duration in the environment,
	// reported when the command runs.
	envErr error
}

func serveCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the tracker (with a supervised local redis-server unless HOARD_REDIS_URL is set)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.envErr != nil {
				return o.envErr
			}
			o.redisFsyncAsked = cmd.Flags().Changed("redis-fsync") || os.Getenv("HOARD_REDIS_FSYNC") != ""
			return runServe(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", envOr("HOARD_LISTEN", "127.0.0.1:8080"), "address to listen on ($HOARD_LISTEN)")
	f.StringVar(&o.redisURL, "redis-url", envOr("HOARD_REDIS_URL", ""), "redis:// or unix:// URL, or comma-separated cluster nodes; empty = run a local redis-server ($HOARD_REDIS_URL)")
	f.StringVar(&o.redisFsync, "redis-fsync", envOr("HOARD_REDIS_FSYNC", string(localredis.DefaultFsyncPolicy)),
		"the supervised redis-server's appendfsync: everysec (a Redis or machine crash can lose ~1 s of acknowledged writes), always (loses none, slower: see README \"Durability\") or no; an external Redis keeps its own setting ($HOARD_REDIS_FSYNC)")
	f.Float64Var(&o.redisMemoryAlarm, "redis-memory-alarm", envFloat("HOARD_REDIS_MEMORY_ALARM", redismemory.DefaultThreshold, &o.envErr),
		"share of the Redis's maxmemory at which hoard logs an alarm and sets hoard_redis_memory_alarm, supervised or external ($HOARD_REDIS_MEMORY_ALARM)")
	f.StringVar(&o.redisMaxMemory, "redis-maxmemory", envOr("HOARD_REDIS_MAXMEMORY", localredis.DefaultMaxMemory),
		"the supervised redis-server's memory limit: a size (4gb, 512mb), a share of the machine's memory (50%) or 0 for none; past it writes are refused, nothing is evicted ($HOARD_REDIS_MAXMEMORY)")
	f.DurationVar(&o.redisReplayTarget, "redis-aof-replay-target", envDuration("HOARD_REDIS_AOF_REPLAY_TARGET", localredis.DefaultAOFReplayTarget, &o.envErr),
		"rewrite the supervised redis-server's AOF once replaying its newest part would take longer than this; 0 leaves it to Redis's size trigger ($HOARD_REDIS_AOF_REPLAY_TARGET)")
	f.StringVar(&o.dataDir, "data-dir", envOr("HOARD_DATA_DIR", "./data"), "where the local redis-server keeps its data and offloaded segment files go ($HOARD_DATA_DIR)")
	f.StringVar(&o.node, "node", os.Getenv("HOARD_NODE"), "this frontend's name in segment records, which it refills (default: an id kept in the data directory) ($HOARD_NODE)")
	f.StringVar(&o.adminToken, "admin-token", envOr("HOARD_ADMIN_TOKEN", ""), "token the admin API requires ($HOARD_ADMIN_TOKEN)")
	f.StringVar(&o.metricsToken, "metrics-token", envOr("HOARD_METRICS_TOKEN", ""), "token /metrics requires; empty = open ($HOARD_METRICS_TOKEN)")
	f.BoolVar(&o.insecureNoAdminToken, "insecure-no-admin-token", false, "DEVELOPMENT ONLY: allow admin calls without a token when none is set")
	f.StringVar(&o.projectsFile, "projects-file", envOr("HOARD_PROJECTS_FILE", "projects.json"), "Warrior HQ projects.json to serve ($HOARD_PROJECTS_FILE)")
	f.StringVar(&o.publicURL, "public-url", envOr("HOARD_PUBLIC_URL", ""), "public base URL, for leaderboard links ($HOARD_PUBLIC_URL)")
	f.StringSliceVar(&o.trustedProxies, "trusted-proxy", splitList(envOr("HOARD_TRUSTED_PROXIES", "")), "proxy IP/CIDR whose X-Forwarded-For is trusted; repeatable ($HOARD_TRUSTED_PROXIES, comma-separated)")
	f.BoolVar(&o.createListed, "create-listed-projects", false, "create any project named in the projects file that does not exist yet")
	f.StringVar(&o.logFormat, "log-format", envOr("HOARD_LOG_FORMAT", "text"), "text or json")
	f.StringVar(&o.logLevel, "log-level", envOr("HOARD_LOG_LEVEL", "info"), "debug, info, warn or error: debug adds the supervised redis-server's own lines and plugins' debug output ($HOARD_LOG_LEVEL)")
	f.IntVar(&o.maxViewers, "max-viewers", envInt("HOARD_MAX_VIEWERS", 0, &o.envErr),
		"live leaderboard viewers per frontend; 0 = derived from the descriptor limit, which also bounds a larger value ($HOARD_MAX_VIEWERS)")
	f.IntVar(&o.maxViewersPerAddress, "max-viewers-per-address", envInt("HOARD_MAX_VIEWERS_PER_ADDRESS", leaderboard.DefaultMaxViewersPerAddress, &o.envErr),
		"live viewers per client IPv4 address or IPv6 /64; more get 429 ($HOARD_MAX_VIEWERS_PER_ADDRESS)")
	f.DurationVar(&o.viewerIdleTimeout, "viewer-idle-timeout", envDuration("HOARD_VIEWER_IDLE_TIMEOUT", leaderboard.DefaultViewerIdleTimeout, &o.envErr),
		"drop a viewer that sent nothing, not even a pong, for this long ($HOARD_VIEWER_IDLE_TIMEOUT)")
	addPluginFlags(cmd, &o.plugins)
	return cmd
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

// envInt is the integer in the environment variable, or def when unset;
// a malformed value is recorded in *errp.
func envInt(name string, def int, errp *error) int {
	raw := envOr(name, "")
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil && *errp == nil {
		*errp = fmt.Errorf("$%s=%q is not a whole number", name, raw)
	}
	if err != nil {
		return def
	}
	return n
}

// envDuration is the duration in the environment variable (e.g. "70s"),
// or def when unset; a malformed value is recorded in *errp.
func envDuration(name string, def time.Duration, errp *error) time.Duration {
	raw := envOr(name, "")
	if raw == "" {
		return def
	}
	d, err := time.ParseDuration(raw)
	if err != nil && *errp == nil {
		*errp = fmt.Errorf("$%s=%q is not a duration such as 70s", name, raw)
	}
	if err != nil {
		return def
	}
	return d
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

func newLogger(format string, level slog.Level) *slog.Logger {
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
	logger := newLogger(o.logFormat, level)
	slog.SetDefault(logger)
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
	maxViewers, err := viewerLimits(o, raiseDescriptorLimit(logger), logger)
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
		logger.Warn("--redis-fsync / HOARD_REDIS_FSYNC applies only to the supervised redis-server; with HOARD_REDIS_URL set, appendfsync is the Redis operator's setting (see README \"Durability\")", "asked", fsync)
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

	engine := queues.NewEngine(rdb, queues.Options{Logger: logger})
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
