// Package server is hoard's HTTP front: the seesaw warrior API, the admin
// API, projects.json and /now. Handlers are methods on small structs that
// depend on narrow interfaces; one middleware renders every error.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/internal/http1"
	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/queues"
)

// Config configures the HTTP server.
type Config struct {
	// Listen is the address to listen on, e.g. "127.0.0.1:8080".
	Listen string
	// AdminToken is the bootstrap admin's token: it may do everything,
	// accounts included, and is logged as BootstrapActor. Accounts' own
	// tokens work beside it. Empty refuses every admin call (accounts'
	// too) unless InsecureNoAdminToken is set (local development only:
	// every call is then an admin's).
	AdminToken           string
	InsecureNoAdminToken bool
	// Accounts, when set, is the accounts store (tests); by default the
	// server opens one on the engine's Redis.
	Accounts *accounts.Store
	// AdminIdleTimeout ends a web admin session unused for this long
	// (0 = accounts.DefaultIdleTimeout). Behind a TLS-terminating proxy,
	// a PublicURL of https:// marks the session cookie Secure.
	AdminIdleTimeout time.Duration
	// ProjectsFile is the Warrior HQ projects.json to serve.
	ProjectsFile string
	// PublicURL is this tracker's public base URL, for leaderboard links.
	PublicURL string
	// TrustedProxies are the proxies whose X-Forwarded-For is believed.
	// Empty trusts none, so a client cannot spoof its IP past a block.
	TrustedProxies []string
	// WarriorBodyBytes and AdminBodyBytes cap request bodies.
	WarriorBodyBytes int64
	AdminBodyBytes   int64
	Logger           *slog.Logger
	// MetricsToken, or AdminToken, is required to read /metrics
	// (Authorization: Bearer …) whenever either is set; with neither,
	// /metrics is open.
	MetricsToken string
	// Collectors add metrics to /metrics (the plugin host's, for one).
	Collectors []prometheus.Collector
	// Offloader, when set, serves the segment and export admin calls
	// (its owner starts and stops it).
	Offloader *queues.Offloader
	// Plugins, when set, puts the plugins' states and totals on the
	// index page and in /plugins.json (the plugin host).
	Plugins PluginSource
	// PluginAPI, when set, serves each plugin's own API and page data by
	// forwarding them (the plugin host; see pluginapi.go): the server
	// links none of a plugin's code.
	PluginAPI PluginAPI
	// PluginAccess, when set, keeps the plugins' projects from the public
	// warrior API and the public project lists (the plugin host).
	PluginAccess PluginAccess
	// PluginJobs, when set, lets operators run a plugin's job now (the
	// plugin host).
	PluginJobs PluginJobs
	// MaxViewers, MaxViewersPerAddress and ViewerIdleTimeout bound the
	// leaderboard's websocket viewers; zero takes the hub's defaults
	// (see leaderboard.Config).
	MaxViewers           int
	MaxViewersPerAddress int
	ViewerIdleTimeout    time.Duration
	// NetHTTPOnly serves the warrior calls through net/http and gin as
	// every other request, instead of the warrior listener
	// (warriorconn.go): for comparing the two, and a way back should a
	// client need net/http's reading.
	NetHTTPOnly bool
}

// Defaults for Config.
const (
	DefaultWarriorBodyBytes = 2 << 20
	DefaultAdminBodyBytes   = 64 << 20
)

// Server is the HTTP server. Start it with Start and stop it with Stop.
type Server struct {
	cfg     Config
	engine  *queues.Engine
	hub     *leaderboard.Hub
	handler http.Handler
	logger  *slog.Logger
	health  *Health
	// projects serves projects.json; a reload may point it elsewhere.
	projects *ProjectsFile

	// warriors answers the warrior calls on the main port and hands
	// every other connection to http; nil with Config.NetHTTPOnly.
	warriors *warriorListener

	mu       sync.Mutex
	http     *http.Server
	listener net.Listener
	stopped  bool
	serveErr chan error
	// stopFlusher ends the engine's counter flusher; flusherDone closes
	// when its final flush is over.
	stopFlusher context.CancelFunc
	flusherDone chan struct{}
}

// New builds the server and its routes.
func New(cfg Config, engine *queues.Engine) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WarriorBodyBytes <= 0 {
		cfg.WarriorBodyBytes = DefaultWarriorBodyBytes
	}
	if cfg.AdminBodyBytes <= 0 {
		cfg.AdminBodyBytes = DefaultAdminBodyBytes
	}
	gin.SetMode(gin.ReleaseMode)
	router := gin.New()
	if err := router.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("trusted proxies: %w", err)
	}
	// Metrics wrap Recovery and renderErrors, to record the final status.
	metrics := NewMetrics(engine, cfg.Logger)
	if err := metrics.Register(cfg.Collectors...); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	refusals := ratelog.New(ratelog.Config{Logger: cfg.Logger, Clock: engine.Clock()})
	if err := metrics.Register(refusalCollector{refusals}); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	router.Use(metrics.Middleware(), gin.Recovery(), renderErrors(refusals))

	hub := leaderboard.NewHub(leaderboard.Config{
		Logger: cfg.Logger, Clock: engine.Clock(), MaxViewers: cfg.MaxViewers,
		MaxViewersPerAddress: cfg.MaxViewersPerAddress, IdleTimeout: cfg.ViewerIdleTimeout,
	}, engine.Redis(), engine)
	pages := &Pages{Engine: engine, Hub: hub, Clock: engine.Clock(), Plugins: cfg.Plugins, Access: cfg.PluginAccess}
	stats := &StatsJSON{Engine: engine, Clock: engine.Clock()}
	warrior := &WarriorAPI{Engine: engine, MaxBodyBytes: cfg.WarriorBodyBytes, StatsJSON: stats, Pages: pages, Access: cfg.PluginAccess}
	admin := &AdminAPI{Engine: engine, Logger: cfg.Logger, MaxBodyBytes: cfg.AdminBodyBytes,
		Functions: processFunctions{rdb: engine.Redis()}}
	if cfg.Offloader != nil {
		admin.Offloader = cfg.Offloader
	}
	projects := &ProjectsFile{Path: cfg.ProjectsFile, Engine: engine, PublicURL: cfg.PublicURL, CacheFor: 10 * time.Second,
		Access: cfg.PluginAccess, Clock: engine.Clock()}

	router.GET("/now", func(c *gin.Context) {
		c.String(http.StatusOK, "%s\n", strconv.FormatInt(engine.Clock().Now().Unix(), 10))
	})
	health := &Health{Engine: engine, Plugins: cfg.Plugins}
	router.GET("/healthz", health.Alive)
	router.GET("/readyz", health.Ready)
	router.GET("/projects.json", projects.Serve)
	downloaders := &Downloaders{Engine: engine, Clock: engine.Clock(), Access: cfg.PluginAccess}
	router.GET("/downloaders/*path", downloaders.Serve)
	backfeed := &Backfeed{Engine: engine, MaxBodyBytes: DefaultBackfeedBodyBytes}
	router.POST("/backfeed/legacy/:key", backfeed.Serve)
	router.GET("/", pages.Index)
	router.GET("/plugins.json", (&PluginsJSON{Source: cfg.Plugins}).Serve)
	router.GET("/tracker.json", (&TrackerJSON{Source: cfg.Plugins}).Serve)
	router.GET("/tracker/", func(c *gin.Context) {
		c.Data(http.StatusOK, "text/html; charset=utf-8", leaderboard.TrackerPage())
	})
	router.StaticFS("/static", http.FS(leaderboard.Static()))
	router.GET("/metrics", metrics.Serve(cfg.MetricsToken, cfg.AdminToken))
	store := cfg.Accounts
	if store == nil {
		store = accounts.New(engine.Redis(), engine.Clock())
	}
	idle := cfg.AdminIdleTimeout
	if idle <= 0 {
		idle = accounts.DefaultIdleTimeout
	}
	authn := &auth{token: cfg.AdminToken, insecure: cfg.InsecureNoAdminToken, accounts: store,
		limiter: newFailureLimiter(engine.Clock().Now), scopes: pluginScopes(cfg.Plugins), logger: cfg.Logger,
		idle: idle, secureCookie: strings.HasPrefix(cfg.PublicURL, "https://")}
	authn.registerWebAdmin(router)
	adminGroup := router.Group(adminPrefix, authn.middleware)
	admin.register(adminGroup)
	forward := &pluginForwarder{api: cfg.PluginAPI, jobs: cfg.PluginJobs, engine: engine, logger: cfg.Logger}
	adminGroup.POST("/jobs/:plugin/:job/run", forward.runJob)
	adminGroup.Any("/plugins/:plugin/*path", forward.admin)
	adminGroup.GET("/plugin-pages", authn.pluginPages(cfg.Plugins))
	// The BitTorrent plugin's API was served here before plugins served
	// their own; the old path stays an alias, so sites need not change.
	adminGroup.Any("/bittorrent/*path", forward.alias("bittorrent"))
	router.GET("/tracker/:page", forward.page)
	(&AccountsAPI{Store: store, Admin: admin}).register(adminGroup)
	registerPprof(router.Group(pprofPrefix, authn.middleware))
	// Warrior paths are routed on the raw path by WarriorAPI.Dispatch:
	// gin's tree cannot express "/<slug>/multi=N//request".
	router.NoRoute(warrior.Dispatch)

	srv := &Server{cfg: cfg, engine: engine, hub: hub, handler: router, logger: cfg.Logger, health: health, projects: projects}
	if !cfg.NetHTTPOnly {
		trusted, err := parseTrustedProxies(cfg.TrustedProxies)
		if err != nil {
			return nil, fmt.Errorf("trusted proxies: %w", err)
		}
		srv.warriors = newWarriorListener(warrior, metrics, refusals, cfg.Logger, trusted)
	}
	return srv, nil
}

// Handler returns the server's routes, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens and serves in the background; it returns once the
// listener is bound, so Addr is valid.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.http != nil {
		return errors.New("server already started")
	}
	// The live hub subscribes before the first viewer can connect.
	if err := s.hub.Start(ctx); err != nil {
		return fmt.Errorf("leaderboard hub: %w", err)
	}
	// http1.Listen: no TCP keep-alive probes (every connection is
	// bounded by the server's own timeouts, a websocket by the hub's
	// pings) and, on Linux, no accept before a request's first bytes.
	// Seesaw opens a connection per request (docs/warrior-path.md).
	ln, err := http1.Listen(ctx, s.cfg.Listen)
	if err != nil {
		_ = s.hub.Stop()
		return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	s.listener = ln
	s.http = &http.Server{
		Handler:           withGrownStack(s.handler),
		ConnContext:       noteConnStack,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	// The warrior path's counters are buffered in the engine and flushed
	// once a second (queues/counters.go); Stop flushes them a last time.
	flushCtx, stopFlusher := context.WithCancel(context.WithoutCancel(ctx))
	s.stopFlusher, s.flusherDone = stopFlusher, make(chan struct{})
	go func() {
		defer close(s.flusherDone)
		s.engine.RunCounterFlusher(flushCtx)
	}()
	s.serveErr = make(chan error, 1)
	served := ln
	if s.warriors != nil {
		handoff := newHandoffListener(ln.Addr())
		s.warriors.start(ln, handoff)
		served = handoff
	}
	go func() {
		err := s.http.Serve(served)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr <- err
	}()
	s.logger.InfoContext(ctx, "listening", "addr", ln.Addr().String(),
		"admin_api", map[bool]string{true: "token", false: "disabled"}[s.cfg.AdminToken != ""])
	return nil
}

// Addr is the bound address, after Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Done reports the server's exit: nil after Stop, or the error that ended it.
func (s *Server) Done() <-chan error { return s.serveErr }

// SetProjectsFile serves another projects.json (or the same one re-read
// at once), for a reload.
func (s *Server) SetProjectsFile(path string) { s.projects.SetPath(path) }

// SetViewerLimits changes the live viewers' caps and idle timeout, for a
// reload (leaderboard.Hub.SetViewerLimits).
func (s *Server) SetViewerLimits(maxViewers, perAddress int, idle time.Duration) {
	s.hub.SetViewerLimits(maxViewers, perAddress, idle)
}

// Drain marks the server as going away: /readyz answers 503 from now on,
// so a load balancer sends new traffic elsewhere, while every request is
// still served until Stop.
func (s *Server) Drain() { s.health.draining.Store(true) }

// Stop drains in-flight requests for up to 10 s, then closes. Calling it
// twice, or before Start, is safe.
func (s *Server) Stop() error {
	s.Drain()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.http == nil {
		s.stopped = true
		return nil
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.warriors != nil {
		// No new connections; idle ones closed. A connection handed to
		// net/http from here is closed (the handoff listener is).
		s.warriors.close()
	}
	err := s.http.Shutdown(ctx)
	if err != nil {
		err = s.http.Close()
	}
	if s.warriors != nil {
		s.warriors.wait(ctx)
	}
	// Shutdown leaves hijacked (websocket) connections alone; the hub
	// closes them.
	_ = s.hub.Stop()
	s.stopFlusher()
	<-s.flusherDone
	return err
}
