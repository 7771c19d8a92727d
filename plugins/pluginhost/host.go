package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins"

	"github.com/hoardproject/hoard/internal/lease"
)

// Spec names one plugin the host runs.
type Spec struct {
	// Name is what hoard calls the plugin (ValidateName): in logs, metrics
	// and Redis keys.
	Name string
	// Path is the plugin binary. Empty means a builtin: Options.Builtins
	// must hold a Factory under Name.
	Path string
	// Settings is the plugin's own JSON document, passed in Configure.
	Settings json.RawMessage
}

// Queues is what the host needs from the queue engine to queue a plugin's
// items for it. cmd/hoard adapts *queues.Engine to it.
type Queues interface {
	// EnsureProject creates the project unless it exists, as spec says,
	// and applies spec's retention to it either way.
	EnsureProject(ctx context.Context, slug string, spec plugins.ProjectSpec) error
	// Enqueue appends items to the project's todo queue and returns how
	// many were queued (items out or done already are skipped).
	Enqueue(ctx context.Context, slug string, items []string) (int, error)
	// EnqueueScored puts items in the project's score-ordered queue (a
	// waiting item takes its new score) and returns how many were queued
	// or rescored.
	EnqueueScored(ctx context.Context, slug string, items []plugins.ScoredItem) (int, error)
}

// WorkQueues is the rest of the queue engine a plugin reaches through its
// HostAPI; EngineQueues implements it. With Options.Queues implementing
// it, every plugin gets Config.Host.
type WorkQueues interface {
	Queues
	Claim(ctx context.Context, slug, worker string, count int) ([]string, error)
	Done(ctx context.Context, slug, worker string, items []string, result json.RawMessage) (int, error)
	Release(ctx context.Context, slug, worker string, items []string) (int, error)
	Counts(ctx context.Context, slug string) (plugins.ProjectCounts, error)
}

// Options configure a Host. Zero durations and sizes take the defaults
// below.
type Options struct {
	Plugins  []Spec
	Builtins map[string]plugins.Factory
	// RedisURL is passed to every plugin in Configure.
	RedisURL string
	// Redis carries the job leases; nil runs every job on every host.
	Redis redis.UniversalClient
	// WorkerTokens let outside workers use the public warrior API on the
	// plugins' item types that are not public (see access.go).
	WorkerTokens []WorkerToken
	// Events is the queue engine's event log, the source of the plugins'
	// OnItemDone and OnReclaim; nil delivers only what Deliver* hands over.
	Events EventLog
	// Queues queues the items ticks return. Nil refuses them (logged).
	Queues Queues
	Logger *slog.Logger
	Clock  Clock

	// CallTimeout bounds Configure, Describe, Stats, Health and a builtin
	// Factory.
	CallTimeout time.Duration
	// HookTimeout bounds one OnItemDone or OnReclaim.
	HookTimeout time.Duration
	// TickTimeout bounds one OnTick.
	TickTimeout time.Duration
	// StartTimeout bounds an external plugin's start and handshake.
	StartTimeout time.Duration
	// PIDDir, when set, keeps each external plugin's pid file
	// (<name>.pid); a plugin a previous host left running is killed
	// before its replacement starts (see leftover.go).
	PIDDir string
	// HealthInterval is how often the host pings each plugin, calls its
	// Health and refreshes its Stats.
	HealthInterval time.Duration
	// HealthFailures in a row restart the plugin.
	HealthFailures int
	// ExitPollInterval is how often the host looks for a dead process.
	ExitPollInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart; it
	// doubles on each failure and starts over once a plugin has run for
	// MaxBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// StopGrace is how long Close may take before the process is killed.
	StopGrace time.Duration
	// EventQueue is each plugin's backlog of undelivered hook events;
	// events past it are dropped and counted.
	EventQueue int
	// MaxInflight bounds each plugin's calls still running, including
	// those past their deadline; past it calls fail with ErrBusy.
	MaxInflight int
	// ReclaimSweepInterval is how often each frontend scans the plugins'
	// projects for expired claims (to log them as reclaim events).
	ReclaimSweepInterval time.Duration
	// ReclaimSweepBatch caps the expired claims logged per scan page.
	ReclaimSweepBatch int
	// EventBlock is how long one read of an event log waits for entries.
	EventBlock time.Duration
	// EventBatch caps the entries read at once.
	EventBatch int
	// EventRetryAfter is how long an event may stay unacknowledged (its
	// hook failed, or its frontend died) before it is delivered again,
	// and how often each frontend looks for such events.
	EventRetryAfter time.Duration
	// EventMaxDeliveries is how many times an event is delivered before
	// it is given up (logged and counted).
	EventMaxDeliveries int
}

// Defaults for Options.
const (
	DefaultCallTimeout          = 10 * time.Second
	DefaultHookTimeout          = 5 * time.Second
	DefaultTickTimeout          = time.Minute
	DefaultStartTimeout         = 30 * time.Second
	DefaultHealthInterval       = 10 * time.Second
	DefaultHealthFailures       = 3
	DefaultExitPollInterval     = 500 * time.Millisecond
	DefaultMinBackoff           = time.Second
	DefaultMaxBackoff           = time.Minute
	DefaultStopGrace            = 5 * time.Second
	DefaultEventQueue           = 4096
	DefaultMaxInflight          = 8
	DefaultReclaimSweepInterval = 30 * time.Second
	DefaultReclaimSweepBatch    = 1000
	DefaultEventBlock           = 2 * time.Second
	DefaultEventBatch           = 100
	DefaultEventRetryAfter      = 30 * time.Second
	DefaultEventMaxDeliveries   = 10
)

func (o *Options) setDefaults() {
	setDuration := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setInt := func(n *int, def int) {
		if *n <= 0 {
			*n = def
		}
	}
	setDuration(&o.CallTimeout, DefaultCallTimeout)
	setDuration(&o.HookTimeout, DefaultHookTimeout)
	setDuration(&o.TickTimeout, DefaultTickTimeout)
	setDuration(&o.StartTimeout, DefaultStartTimeout)
	setDuration(&o.HealthInterval, DefaultHealthInterval)
	setDuration(&o.ExitPollInterval, DefaultExitPollInterval)
	setDuration(&o.MinBackoff, DefaultMinBackoff)
	setDuration(&o.MaxBackoff, DefaultMaxBackoff)
	setDuration(&o.StopGrace, DefaultStopGrace)
	setDuration(&o.ReclaimSweepInterval, DefaultReclaimSweepInterval)
	setInt(&o.HealthFailures, DefaultHealthFailures)
	setInt(&o.EventQueue, DefaultEventQueue)
	setInt(&o.MaxInflight, DefaultMaxInflight)
	setInt(&o.ReclaimSweepBatch, DefaultReclaimSweepBatch)
	setDuration(&o.EventBlock, DefaultEventBlock)
	setInt(&o.EventBatch, DefaultEventBatch)
	setDuration(&o.EventRetryAfter, DefaultEventRetryAfter)
	setInt(&o.EventMaxDeliveries, DefaultEventMaxDeliveries)
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
}

// reservedNames would make a plugin's metrics collide with hoard's own
// (hoard_<name>_...).
var reservedNames = map[string]bool{"plugin": true, "http": true, "project": true, "metrics": true, "hoard": true, "go": true, "process": true}

// Host runs and supervises hoard's plugins: it starts each one (builtin or
// external), configures it, learns what it owns, ticks its jobs, delivers
// its item events, polls its health and stats, and restarts it when it dies
// or fails its health checks. Nothing a plugin does can block the host's
// callers: every call has a deadline and every event delivery is
// asynchronous and bounded.
type Host struct {
	opts  Options
	log   *slog.Logger
	owner string // this host's identity in job leases

	supervisors []*supervisor
	byName      map[string]*supervisor

	// owned are the projects the plugins' item types live in, from the
	// descriptions and from Redis (access.go).
	ownedMu sync.RWMutex
	owned   map[string]ProjectOwner

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	stopOnce sync.Once
}

// NewHost checks the options: names valid and unique, every builtin known,
// every binary present and executable. A plugin that is configured wrong
// stops hoard at start; one that fails later is only restarted.
func NewHost(opts Options) (*Host, error) {
	opts.setDefaults()
	h := &Host{opts: opts, log: opts.Logger.With("component", "plugins"), byName: map[string]*supervisor{},
		owned: map[string]ProjectOwner{}}
	var errs []error
	for _, spec := range opts.Plugins {
		if err := plugins.ValidateName(spec.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		if reservedNames[spec.Name] {
			errs = append(errs, fmt.Errorf("plugin name %q is reserved by hoard's own metrics", spec.Name))
			continue
		}
		if h.byName[spec.Name] != nil {
			errs = append(errs, fmt.Errorf("plugin %q is configured twice", spec.Name))
			continue
		}
		if len(spec.Settings) > 0 && !json.Valid(spec.Settings) {
			errs = append(errs, fmt.Errorf("plugin %q: settings are not valid JSON", spec.Name))
			continue
		}
		if spec.Path == "" {
			if opts.Builtins[spec.Name] == nil {
				errs = append(errs, fmt.Errorf("plugin %q has no path and is not built in (builtins: %v)", spec.Name, builtinNames(opts.Builtins)))
				continue
			}
		} else if err := checkExecutable(spec.Path); err != nil {
			errs = append(errs, fmt.Errorf("plugin %q: %w", spec.Name, err))
			continue
		}
		s := newSupervisor(h, spec)
		h.supervisors = append(h.supervisors, s)
		h.byName[spec.Name] = s
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h.owner = lease.NewOwner()
	return h, nil
}

func builtinNames(m map[string]plugins.Factory) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	if info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

// Start starts every plugin's supervisor. It does not wait for the
// plugins: one that fails to start is retried in the background, and
// WaitRunning tells when one is up. Stop ends them; ctx's values are kept,
// its cancellation is not.
func (h *Host) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return errors.New("plugin host already started")
	}
	h.started = true
	// Even a frontend that runs no plugin keeps the others' projects
	// closed to the public.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel
	if err := h.loadOwners(ctx); err != nil {
		h.log.Warn("cannot read the plugins' projects; reading them again in the background", "err", err)
	}
	h.wg.Add(1)
	go h.refreshOwners(runCtx)
	for _, s := range h.supervisors {
		s.start(runCtx, &h.wg)
	}
	return nil
}

// Stop stops every plugin (Close, then kill after the grace period) and
// waits for the host's goroutines. It is safe to call twice, or without
// Start.
func (h *Host) Stop() error {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		cancel := h.cancel
		h.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		h.wg.Wait()
	})
	return nil
}

// State is where a plugin is in its life.
type State string

// Plugin states.
const (
	StateStarting State = "starting" // launching, configuring, describing
	StateRunning  State = "running"
	StateBackoff  State = "backoff" // down, waiting to restart
	StateFailed   State = "failed"  // will not be restarted (ErrIncompatible)
	StateStopped  State = "stopped" // the host stopped
)

// Status is a snapshot of one plugin.
type Status struct {
	Name  string `json:"name"`
	Path  string `json:"path,omitempty"` // "" for a builtin
	State State  `json:"state"`
	// PID of the plugin process (0 for a builtin or when not running).
	PID int `json:"pid,omitempty"`
	// Since is when the plugin entered State.
	Since time.Time `json:"since"`
	// Restarts counts runs that ended (the process died, a call panicked,
	// health checks failed); failed launches show in LastError instead.
	Restarts  int    `json:"restarts"`
	LastError string `json:"last_error,omitempty"`
	// Description is the last one the plugin gave (kept while it is down,
	// so its events still queue).
	Description   plugins.Description `json:"description"`
	EventsDropped uint64              `json:"events_dropped"`
	HookErrors    uint64              `json:"hook_errors"`
	EventsHandled uint64              `json:"events_handled"`
	EventsRetried uint64              `json:"events_retried"`
	EventsGivenUp uint64              `json:"events_given_up"`
	TicksRun      uint64              `json:"ticks_run"`
	TickErrors    uint64              `json:"tick_errors"`
	ItemsQueued   uint64              `json:"items_queued"`
}

// Status returns every plugin's status, in configuration order.
func (h *Host) Status() []Status {
	out := make([]Status, 0, len(h.supervisors))
	for _, s := range h.supervisors {
		out = append(out, s.status())
	}
	return out
}

// Stats returns each plugin's metrics as last polled (with the health
// check), by plugin name. It never calls a plugin.
func (h *Host) Stats() map[string]plugins.Stats {
	out := make(map[string]plugins.Stats, len(h.supervisors))
	for _, s := range h.supervisors {
		out[s.spec.Name] = s.cachedStats()
	}
	return out
}

// WaitRunning waits until the named plugin is running. It returns an error
// wrapping ErrIncompatible if the plugin failed for good, ErrUnavailable if
// the host stopped, and ctx's error when ctx ends first.
func (h *Host) WaitRunning(ctx context.Context, name string) error {
	s := h.byName[name]
	if s == nil {
		return fmt.Errorf("%w %q", ErrNoPlugin, name)
	}
	for {
		st, changed := s.stateAndChanged()
		switch st.State {
		case StateRunning:
			return nil
		case StateFailed:
			return fmt.Errorf("plugin %q failed: %s: %w", name, st.LastError, plugins.ErrIncompatible)
		case StateStopped:
			return fmt.Errorf("plugin %q: %w", name, plugins.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Call runs fn against the named plugin's current instance with the
// host's CallTimeout, for callers that need a plugin directly (an admin
// status page). It returns ErrUnavailable while the plugin is down.
func (h *Host) Call(ctx context.Context, name string, fn func(context.Context, plugins.Plugin) error) error {
	s := h.byName[name]
	if s == nil {
		return fmt.Errorf("%w %q", ErrNoPlugin, name)
	}
	inst := s.running()
	if inst == nil {
		return fmt.Errorf("plugin %q: %w", name, plugins.ErrUnavailable)
	}
	return inst.call(ctx, h.opts.CallTimeout, fn)
}

// Reconfigure gives the named plugin new settings: the host restarts it
// (Close, then a new instance Configured with them), which is how the
// contract changes a running plugin's settings. It returns once the
// restart is asked for; the plugin's state goes through starting to
// running as after any restart, and a plugin that refuses the settings
// is retried with back-off like one that fails to start.
func (h *Host) Reconfigure(name string, settings json.RawMessage) error {
	s := h.byName[name]
	if s == nil {
		return fmt.Errorf("%w %q", ErrNoPlugin, name)
	}
	s.mu.Lock()
	s.spec.Settings = settings
	s.mu.Unlock()
	select {
	case s.reconfigured <- struct{}{}:
	default: // a restart is already pending; it reads the new settings
	}
	return nil
}

// ErrNoPlugin: no plugin of that name is configured.
var ErrNoPlugin = errors.New("no plugin")

// HandleRequest forwards one call of a plugin's own API (its admin calls,
// its page data) to the named plugin, with the host's CallTimeout. The
// caller (the HTTP server) has authenticated it and records the changes
// the answer lists. A plugin's answer is checked here, so a plugin of
// another build cannot make the server write a bad status or an
// unbounded body.
func (h *Host) HandleRequest(ctx context.Context, name string, req plugins.Request) (plugins.Response, error) {
	// fn may still be running when Call gives up on it (a hung plugin):
	// the answer travels through a channel, never a shared variable.
	answer := make(chan plugins.Response, 1)
	err := h.Call(ctx, name, func(ctx context.Context, p plugins.Plugin) error {
		resp, err := p.HandleRequest(ctx, req)
		if err == nil {
			answer <- resp
		}
		return err
	})
	if err != nil {
		return plugins.Response{}, err
	}
	resp := <-answer
	if resp.Status == 0 {
		resp.Status = 200
	}
	switch {
	case resp.Status < 100 || resp.Status > 599:
		return plugins.Response{}, fmt.Errorf("plugin %q answered status %d", name, resp.Status)
	case len(resp.Body) > plugins.MaxResponseBody:
		return plugins.Response{}, fmt.Errorf("plugin %q answered %d bytes; the limit is %d", name, len(resp.Body), plugins.MaxResponseBody)
	case len(resp.Changes) > plugins.MaxChanges:
		return plugins.Response{}, fmt.Errorf("plugin %q listed %d changes; the limit is %d", name, len(resp.Changes), plugins.MaxChanges)
	}
	return resp, nil
}

// DeliverDone queues OnItemDone for every plugin that owns the item (the
// event's ItemType is filled in per plugin). It never blocks: a plugin
// whose backlog is full loses the event, counted in its status. It returns
// how many plugins the event was queued for.
func (h *Host) DeliverDone(ev plugins.ItemEvent) int { return h.deliver(hookDone, ev) }

// DeliverReclaim queues OnReclaim the same way.
func (h *Host) DeliverReclaim(ev plugins.ItemEvent) int { return h.deliver(hookReclaim, ev) }

func (h *Host) deliver(hook hookKind, ev plugins.ItemEvent) int {
	queued := 0
	for _, s := range h.supervisors {
		if s.offer(hook, ev) {
			queued++
		}
	}
	return queued
}

// lease takes (or renews, when this host holds it) a job's lease in Redis
// for ttl, so one frontend runs each period. Without Redis every host runs
// every job; when Redis fails the job runs anyway (ticks are meant to be
// idempotent, and a skipped reaper is worse than a doubled one).
// ErrNoJob: the plugin describes no job of that name.
var ErrNoJob = errors.New("no such job")

// RunJob runs one of a plugin's jobs now, as an operator asks, and returns
// when the tick is done (or ctx ends). It runs between the scheduled ticks
// (a plugin's ticks never overlap), whoever holds the period's lease, and
// counts as the period's run.
func (h *Host) RunJob(ctx context.Context, name, job string) error {
	s := h.byName[name]
	if s == nil {
		return fmt.Errorf("%w %q", ErrNoPlugin, name)
	}
	if s.running() == nil {
		return fmt.Errorf("plugin %q: %w", name, plugins.ErrUnavailable)
	}
	req := runRequest{job: job, done: make(chan error, 1)}
	select {
	case s.runNow <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// forceLease takes a job's lease whoever holds it (a run now).
func (h *Host) forceLease(ctx context.Context, key string, ttl time.Duration) {
	if h.opts.Redis == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	if err := h.opts.Redis.Set(ctx, key, h.owner, ttl).Err(); err != nil {
		h.log.Warn("cannot take the job's lease for a run now; running it anyway", "key", key, "err", err)
	}
}

func (h *Host) lease(ctx context.Context, key string, ttl time.Duration) bool {
	if h.opts.Redis == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	ok, err := lease.Take(ctx, h.opts.Redis, key, h.owner, ttl)
	if err != nil {
		h.log.Warn("job lease unavailable; running the job anyway", "key", key, "err", err)
		return true
	}
	return ok
}
