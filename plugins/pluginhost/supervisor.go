package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/plugins"
)

type hookKind int

const (
	hookDone hookKind = iota
	hookReclaim
	hookKinds
)

func (k hookKind) String() string {
	if k == hookDone {
		return "done"
	}
	return "reclaim"
}

type delivery struct {
	hook hookKind
	ev   plugins.ItemEvent
}

// supervisor keeps one plugin running. Its goroutines: run (launch, watch,
// restart), schedule (ticks), deliverLoop (events handed to Deliver*) and
// followEventLogs (the projects' event logs).
type supervisor struct {
	h      *Host
	spec   Spec
	log    *slog.Logger
	events chan delivery
	// runNow takes operators' run-now requests to the schedule loop.
	runNow chan runRequest
	// reconfigured wakes watch to restart the plugin with the settings
	// Reconfigure put in spec (buffered: a second change while one is
	// pending is taken by the same restart).
	reconfigured chan struct{}

	mu        sync.Mutex
	state     State
	since     time.Time
	inst      *instance
	desc      plugins.Description
	lastErr   string
	restarts  int
	stats     plugins.Stats
	ensured   map[string]bool
	changed   chan struct{} // closed and replaced on every state change
	tickCount map[string]*tickCounters

	dropped       [hookKinds]atomic.Uint64
	hookErrors    [hookKinds]atomic.Uint64
	eventsHandled [hookKinds]atomic.Uint64
	eventsRetried atomic.Uint64
	eventsGivenUp atomic.Uint64
	eventsTrimmed atomic.Uint64
	lastEventLog  atomic.Int64 // unix ns of the last event-log error logged
	itemsQueued   atomic.Uint64
	lastHookLog   atomic.Int64 // unix ns of the last hook error logged
}

type tickCounters struct {
	ok, failed, skipped uint64
}

func newSupervisor(h *Host, spec Spec) *supervisor {
	return &supervisor{
		h:         h,
		spec:      spec,
		log:       h.opts.Logger.With("plugin", spec.Name),
		events:    make(chan delivery, h.opts.EventQueue),
		state:     StateStarting,
		since:     h.opts.Clock.Now(),
		ensured:   map[string]bool{},
		changed:   make(chan struct{}),
		tickCount: map[string]*tickCounters{},
		runNow:    make(chan runRequest),

		reconfigured: make(chan struct{}, 1),
	}
}

func (s *supervisor) start(ctx context.Context, wg *sync.WaitGroup) {
	loops := []func(context.Context){s.run, s.schedule, s.deliverLoop}
	if s.h.opts.Events != nil {
		loops = append(loops, s.followEventLogs)
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
}

// setState records a transition and wakes everyone waiting for one.
func (s *supervisor) setState(state State, inst *instance, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.inst, s.since = state, inst, s.h.opts.Clock.Now()
	if err != nil {
		s.lastErr = err.Error()
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *supervisor) stateAndChanged() (Status, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{State: s.state, LastError: s.lastErr}, s.changed
}

func (s *supervisor) running() *instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateRunning {
		return nil
	}
	return s.inst
}

// waitRunning blocks until the plugin runs (or ctx ends: nil) and returns
// the instance, its description and the channel closed on the next change.
func (s *supervisor) waitRunning(ctx context.Context) (*instance, plugins.Description, <-chan struct{}) {
	for {
		s.mu.Lock()
		state, inst, desc, changed := s.state, s.inst, s.desc, s.changed
		s.mu.Unlock()
		if state == StateRunning {
			return inst, desc, changed
		}
		select {
		case <-ctx.Done():
			return nil, plugins.Description{}, nil
		case <-changed:
		}
	}
}

func (s *supervisor) description() plugins.Description {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.desc
}

func (s *supervisor) status() Status {
	s.mu.Lock()
	st := Status{
		Name: s.spec.Name, Path: s.spec.Path, State: s.state, Since: s.since, Restarts: s.restarts,
		LastError: s.lastErr, Description: s.desc,
	}
	if s.state == StateRunning && s.inst != nil {
		st.PID = s.inst.pid
	}
	for _, c := range s.tickCount {
		st.TicksRun += c.ok + c.failed
		st.TickErrors += c.failed
	}
	s.mu.Unlock()
	for k := range hookKinds {
		st.EventsDropped += s.dropped[k].Load()
		st.HookErrors += s.hookErrors[k].Load()
		st.EventsHandled += s.eventsHandled[k].Load()
	}
	st.EventsRetried = s.eventsRetried.Load()
	st.EventsGivenUp = s.eventsGivenUp.Load()
	st.ItemsQueued = s.itemsQueued.Load()
	return st
}

func (s *supervisor) cachedStats() plugins.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// sleep waits d on the host's clock; false when ctx ended first.
func (s *supervisor) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-s.h.opts.Clock.After(d):
		return true
	}
}

// run keeps the plugin running until ctx ends: launch, watch, and on death
// or failed health, stop it and launch again after a back-off that doubles
// up to MaxBackoff (and starts over once a run lasted MaxBackoff).
func (s *supervisor) run(ctx context.Context) {
	opts := &s.h.opts
	backoff := opts.MinBackoff
	defer s.setState(StateStopped, nil, nil)
	for {
		s.setState(StateStarting, nil, nil)
		inst, err := s.launch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, plugins.ErrIncompatible) {
				s.log.Error("plugin cannot run with this hoard; not restarting it", "err", err)
				s.setState(StateFailed, nil, err)
				<-ctx.Done()
				return
			}
			s.log.Error("plugin failed to start", "err", err, "retry_in", backoff)
			s.setState(StateBackoff, nil, err)
			if !s.sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, opts.MaxBackoff)
			continue
		}
		started := opts.Clock.Now()
		s.setState(StateRunning, inst, nil)
		desc := s.description()
		s.log.Info("plugin running", "pid", inst.pid, "version", desc.Version, "item_types", len(desc.ItemTypes),
			"jobs", len(desc.Jobs), "listeners", desc.Listeners)
		reason := s.watch(ctx, inst)
		if ctx.Err() != nil {
			inst.stop(opts.StopGrace)
			return
		}
		if errors.Is(reason, errReconfigured) {
			// Not a failure: no back-off, no restart counted.
			s.setState(StateStarting, nil, nil)
			inst.stop(opts.StopGrace)
			s.log.Info("plugin restarting with its new settings")
			continue
		}
		s.setState(StateBackoff, nil, reason)
		inst.stop(opts.StopGrace)
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		if opts.Clock.Now().Sub(started) >= opts.MaxBackoff {
			backoff = opts.MinBackoff
		}
		s.log.Warn("plugin down; restarting it", "reason", reason, "retry_in", backoff)
		if !s.sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, opts.MaxBackoff)
	}
}

// errReconfigured is watch's reason when Reconfigure asked for a restart.
var errReconfigured = errors.New("settings changed")

// launch starts an instance, configures it, reads its description and
// creates the projects its item types live in.
func (s *supervisor) launch(ctx context.Context) (*instance, error) {
	opts := &s.h.opts
	var inst *instance
	var err error
	if s.spec.Path == "" {
		inst, err = startBuiltin(ctx, opts.Builtins[s.spec.Name], s.log, opts.CallTimeout, opts.MaxInflight)
	} else {
		if opts.PIDDir != "" {
			if _, err := killLeftover(opts.PIDDir, s.spec.Name, s.spec.Path, s.log); err != nil {
				s.log.Warn("cannot clear a leftover plugin", "err", err)
			}
		}
		inst, err = startExternal(s.spec.Path, s.log, opts.StartTimeout, opts.MaxInflight)
		if err == nil && opts.PIDDir != "" && inst.pid > 0 {
			if err := writePIDFile(opts.PIDDir, s.spec.Name, inst.pid); err != nil {
				s.log.Warn("cannot write the plugin's pid file", "err", err)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	fail := func(step string, err error) (*instance, error) {
		inst.stop(opts.StopGrace)
		return nil, fmt.Errorf("%s: %w", step, err)
	}
	// This launch takes the newest settings: a Reconfigure pending from
	// before it needs no second restart.
	select {
	case <-s.reconfigured:
	default:
	}
	s.mu.Lock()
	settings := s.spec.Settings
	s.mu.Unlock()
	cfg := plugins.Config{Name: s.spec.Name, RedisURL: opts.RedisURL, Settings: settings, Host: s.hostAPI()}
	if err := inst.call(ctx, opts.CallTimeout, func(ctx context.Context, p plugins.Plugin) error { return p.Configure(ctx, cfg) }); err != nil {
		return fail("configure", err)
	}
	var desc plugins.Description
	err = inst.call(ctx, opts.CallTimeout, func(ctx context.Context, p plugins.Plugin) error {
		var err error
		desc, err = p.Describe(ctx)
		return err
	})
	if err != nil {
		return fail("describe", err)
	}
	if err := desc.Validate(); err != nil {
		return fail("describe", err)
	}
	// The contract checks a project name's shape; the queue engine also
	// reserves some names.
	for _, project := range desc.Projects() {
		if err := queues.ValidateSlug(project); err != nil {
			return fail("describe", err)
		}
	}
	s.mu.Lock()
	s.desc = desc
	s.mu.Unlock()
	s.h.recordOwners(ctx, s.spec.Name, desc)
	for _, project := range desc.Projects() {
		if err := s.ensureProject(ctx, desc, project); err != nil {
			// Not fatal: the project is ensured again before items are
			// queued into it.
			s.log.Warn("cannot create the plugin's project", "project", project, "err", err)
		}
	}
	s.refreshStats(ctx, inst)
	return inst, nil
}

func (s *supervisor) ensureProject(ctx context.Context, desc plugins.Description, project string) error {
	q := s.h.opts.Queues
	if q == nil {
		return nil
	}
	s.mu.Lock()
	done := s.ensured[project]
	s.mu.Unlock()
	if done {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.h.opts.CallTimeout)
	defer cancel()
	if err := q.EnsureProject(ctx, project, desc.ProjectSpec(project)); err != nil {
		return err
	}
	s.mu.Lock()
	s.ensured[project] = true
	s.mu.Unlock()
	return nil
}

// runRequest is an operator's "run this job now" (Host.RunJob).
type runRequest struct {
	job  string
	done chan error // buffered: the schedule loop never waits on it
}

// runRequested runs a job now, between the scheduled ticks (ticks of one
// plugin never overlap), and counts it as this period's run: the next is
// a period later.
func (s *supervisor) runRequested(ctx context.Context, inst *instance, desc plugins.Description, jobs map[string]plugins.Job,
	due map[string]time.Time, req runRequest) {
	j, ok := jobs[req.job]
	if !ok {
		req.done <- fmt.Errorf("%w: %q", ErrNoJob, req.job)
		return
	}
	now := s.h.opts.Clock.Now()
	s.log.Info("job run now, as an operator asked", "job", j.Name)
	err := s.runTick(ctx, inst, desc, j, plugins.Tick{Job: j.Name, Scheduled: now, At: now}, true)
	if err == nil {
		due[j.Name] = now.Add(j.Period)
	}
	req.done <- err
}

// watch returns why the instance must be replaced: its process exited, an
// in-process call panicked, it failed HealthFailures health checks in a
// row, or ctx ended.
func (s *supervisor) watch(ctx context.Context, inst *instance) error {
	opts := &s.h.opts
	exitPoll := opts.Clock.After(opts.ExitPollInterval)
	healthTick := opts.Clock.After(opts.HealthInterval)
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-inst.broken:
			return inst.brokenErr
		case <-s.reconfigured:
			return errReconfigured
		case <-exitPoll:
			if inst.exited() {
				return errors.New("plugin process exited")
			}
			exitPoll = opts.Clock.After(opts.ExitPollInterval)
		case <-healthTick:
			if err := s.checkHealth(ctx, inst); err != nil {
				failures++
				s.log.Warn("plugin health check failed", "err", err, "failures", failures, "limit", opts.HealthFailures)
				if inst.exited() {
					return errors.New("plugin process exited")
				}
				if failures >= opts.HealthFailures {
					return fmt.Errorf("%d health checks failed in a row, the last: %w", failures, err)
				}
			} else {
				failures = 0
			}
			healthTick = opts.Clock.After(opts.HealthInterval)
		}
	}
}

// checkHealth pings the connection, asks the plugin, and refreshes the
// cached stats while it is at it.
func (s *supervisor) checkHealth(ctx context.Context, inst *instance) error {
	opts := &s.h.opts
	if err := inst.ping(ctx, opts.CallTimeout); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	if err := inst.call(ctx, opts.CallTimeout, func(ctx context.Context, p plugins.Plugin) error { return p.Health(ctx) }); err != nil {
		return err
	}
	s.refreshStats(ctx, inst)
	return nil
}

func (s *supervisor) refreshStats(ctx context.Context, inst *instance) {
	var stats plugins.Stats
	err := inst.call(ctx, s.h.opts.CallTimeout, func(ctx context.Context, p plugins.Plugin) error {
		var err error
		stats, err = p.Stats(ctx)
		return err
	})
	if err != nil {
		s.log.Debug("plugin stats unavailable", "err", err)
		return
	}
	if len(stats.Metrics) > plugins.MaxMetrics {
		s.log.Warn("plugin returned too many metrics; keeping the first ones", "metrics", len(stats.Metrics), "limit", plugins.MaxMetrics)
		stats.Metrics = stats.Metrics[:plugins.MaxMetrics]
	}
	s.mu.Lock()
	s.stats = stats
	s.mu.Unlock()
}

// offer queues an event for the plugin if it owns the item. It never
// blocks: a full backlog drops the event and counts it.
func (s *supervisor) offer(hook hookKind, ev plugins.ItemEvent) bool {
	t, ok := s.description().Owner(ev.Project, ev.Item)
	if !ok {
		return false
	}
	ev.ItemType = t.Name
	select {
	case s.events <- delivery{hook: hook, ev: ev}:
		return true
	default:
		s.dropped[hook].Add(1)
		return false
	}
}

// deliverLoop calls the hooks one event at a time, in order, waiting while
// the plugin is down (the backlog still bounds what waits).
func (s *supervisor) deliverLoop(ctx context.Context) {
	for {
		var d delivery
		select {
		case <-ctx.Done():
			return
		case d = <-s.events:
		}
		inst, _, _ := s.waitRunning(ctx)
		if inst == nil {
			return
		}
		err := inst.call(ctx, s.h.opts.HookTimeout, func(ctx context.Context, p plugins.Plugin) error {
			if d.hook == hookDone {
				return p.OnItemDone(ctx, d.ev)
			}
			return p.OnReclaim(ctx, d.ev)
		})
		if err != nil {
			s.hookErrors[d.hook].Add(1)
			s.logHookError(d, err)
		}
	}
}

// logHookError logs at most one hook failure per hookLogInterval, so a
// plugin that fails every event cannot flood hoard's log; the counters in
// Status and /metrics have the totals.
func (s *supervisor) logHookError(d delivery, err error) {
	if !s.logDue(&s.lastHookLog) {
		return
	}
	s.log.Warn("plugin hook failed", "hook", d.hook.String(), "project", d.ev.Project, "item", d.ev.Item, "err", err,
		"errors_total", s.hookErrors[d.hook].Load())
}

// logDue reports whether a rate-limited log line (its last time kept in
// last) may be written now: at most one per 10 s of the host's clock, so a
// plugin failing every event cannot flood hoard's log.
func (s *supervisor) logDue(last *atomic.Int64) bool {
	const interval = 10 * time.Second
	now := s.h.opts.Clock.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(interval) && last.CompareAndSwap(prev, now)
}

// schedule ticks the plugin's jobs. A job first runs as soon as the plugin
// is up, then every period. Runs never overlap, and runs missed while the
// plugin was down (or the host was paused) collapse into one catch-up run
// whose Tick.Missed counts them.
func (s *supervisor) schedule(ctx context.Context) {
	clock := s.h.opts.Clock
	due := map[string]time.Time{}
	for {
		inst, desc, changed := s.waitRunning(ctx)
		if inst == nil {
			return
		}
		now := clock.Now()
		jobs := map[string]plugins.Job{}
		for _, j := range desc.Jobs {
			jobs[j.Name] = j
			if _, ok := due[j.Name]; !ok {
				due[j.Name] = now
			}
		}
		for name := range due {
			if _, ok := jobs[name]; !ok {
				delete(due, name)
			}
		}
		if len(jobs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case req := <-s.runNow:
				req.done <- fmt.Errorf("%w: %q (the plugin has no jobs)", ErrNoJob, req.job)
			}
			continue
		}
		next := time.Time{}
		for _, t := range due {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
		if next.After(now) {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-clock.After(next.Sub(now)):
			case req := <-s.runNow:
				s.runRequested(ctx, inst, desc, jobs, due, req)
			}
			continue
		}
		names := make([]string, 0, len(jobs))
		for name := range jobs {
			names = append(names, name)
		}
		slices.Sort(names)
		cutShort := false
		for _, name := range names {
			j, scheduled := jobs[name], due[name]
			if scheduled.After(now) {
				continue
			}
			missed := int64(now.Sub(scheduled) / j.Period)
			err := s.tick(ctx, inst, desc, j, plugins.Tick{Job: j.Name, Scheduled: scheduled, At: now, Missed: missed})
			if err != nil && (inst.dead() || errors.Is(err, plugins.ErrUnavailable)) {
				// The instance died under the tick: keep the run due, so
				// the next instance runs it (as the catch-up) rather than
				// a period later.
				cutShort = true
				break
			}
			due[name] = scheduled.Add(time.Duration(missed+1) * j.Period)
		}
		if cutShort {
			// Wait for the supervisor to notice; a connection that only
			// blinked is retried after a health interval, never in a loop.
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-clock.After(s.h.opts.HealthInterval):
			}
		}
	}
}

func (s *supervisor) countTick(job string, f func(*tickCounters)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.tickCount[job]
	if c == nil {
		c = &tickCounters{}
		s.tickCount[job] = c
	}
	f(c)
}

// tick runs one job under its lease and queues the items it returns. The
// error is the plugin's (a failure to queue is logged, not returned).
func (s *supervisor) tick(ctx context.Context, inst *instance, desc plugins.Description, job plugins.Job, tick plugins.Tick) error {
	return s.runTick(ctx, inst, desc, job, tick, false)
}

// runTick runs one tick of job. forced (an operator's run now) runs it
// whoever holds the period's lease, and takes the lease, so the other
// frontends count this run as the period's.
func (s *supervisor) runTick(ctx context.Context, inst *instance, desc plugins.Description, job plugins.Job, tick plugins.Tick, forced bool) error {
	ttl := job.Period - job.Period/10
	key := jobLeaseKey(s.spec.Name, job.Name, job.Period)
	if forced {
		s.h.forceLease(ctx, key, ttl)
	} else if !s.h.lease(ctx, key, ttl) {
		s.countTick(job.Name, func(c *tickCounters) { c.skipped++ })
		s.log.Debug("job ran elsewhere this period", "job", job.Name)
		return nil
	}
	if tick.Missed > 0 {
		s.log.Info("job catching up once for missed runs", "job", job.Name, "missed", tick.Missed)
	}
	var result plugins.TickResult
	err := inst.call(ctx, s.h.opts.TickTimeout, func(ctx context.Context, p plugins.Plugin) error {
		var err error
		result, err = p.OnTick(ctx, tick)
		return err
	})
	if err != nil {
		s.countTick(job.Name, func(c *tickCounters) { c.failed++ })
		s.log.Warn("job failed", "job", job.Name, "err", err)
		return err
	}
	s.countTick(job.Name, func(c *tickCounters) { c.ok++ })
	if len(result.Enqueue) > 0 {
		if err := s.enqueue(ctx, desc, result.Enqueue); err != nil {
			s.log.Warn("cannot queue the job's items", "job", job.Name, "items", len(result.Enqueue), "err", err)
		}
	}
	return nil
}

// enqueue queues a tick's items, each into its project, refusing the lot
// if any item belongs to no item type of the plugin.
func (s *supervisor) enqueue(ctx context.Context, desc plugins.Description, items []plugins.QueueItem) error {
	if len(items) > plugins.MaxTickEnqueue {
		return fmt.Errorf("a tick returned %d items; the limit is %d", len(items), plugins.MaxTickEnqueue)
	}
	q := s.h.opts.Queues
	if q == nil {
		return errors.New("the host has no queue engine to queue items with")
	}
	byProject := map[string][]string{}
	scoredByProject := map[string][]plugins.ScoredItem{}
	var order []string
	for _, item := range items {
		t, ok := desc.Owner(item.Project, item.Item)
		if !ok {
			return fmt.Errorf("item %q of project %q: %w", item.Item, item.Project, plugins.ErrNotOwned)
		}
		if err := queues.ValidateItem(item.Item); err != nil {
			return err
		}
		if byProject[item.Project] == nil && scoredByProject[item.Project] == nil {
			order = append(order, item.Project)
		}
		if t.Scored() {
			scoredByProject[item.Project] = append(scoredByProject[item.Project], plugins.ScoredItem{Item: item.Item, Score: item.Score})
		} else {
			byProject[item.Project] = append(byProject[item.Project], item.Item)
		}
	}
	for _, project := range order {
		if err := s.ensureProject(ctx, desc, project); err != nil {
			return fmt.Errorf("create project %q: %w", project, err)
		}
		qctx, cancel := context.WithTimeout(ctx, s.h.opts.CallTimeout)
		var n int
		var err error
		if fifo := byProject[project]; len(fifo) > 0 {
			n, err = q.Enqueue(qctx, project, fifo)
		}
		if scored := scoredByProject[project]; err == nil && len(scored) > 0 {
			var m int
			m, err = q.EnqueueScored(qctx, project, scored)
			n += m
		}
		cancel()
		s.itemsQueued.Add(uint64(n))
		if err != nil {
			// The project may have been deleted since: ensure it again
			// next time.
			s.mu.Lock()
			delete(s.ensured, project)
			s.mu.Unlock()
			return fmt.Errorf("queue into %q: %w", project, err)
		}
	}
	return nil
}
