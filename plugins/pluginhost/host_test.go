package pluginhost_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// These tests run builtins inside a synctest bubble: the host's timers run
// on the bubble's virtual clock, so back-off, health intervals and job
// periods pass instantly and deterministically.

func exampleHost(t *testing.T, opts pluginhost.Options) *pluginhost.Host {
	t.Helper()
	if opts.Builtins == nil {
		opts.Builtins = map[string]plugins.Factory{"example": exampleplugin.New}
	}
	if opts.Plugins == nil {
		opts.Plugins = []pluginhost.Spec{{Name: "example"}}
	}
	if opts.Logger == nil {
		opts.Logger, _ = newTestLogger(t)
	}
	h, err := pluginhost.NewHost(opts)
	require.NoError(t, err)
	return h
}

func TestBuiltinThroughFactory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newRecordingQueues()
		h := exampleHost(t, pluginhost.Options{Queues: q})
		start := time.Now()
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		synctest.Wait()

		st := statusOf(h, "example")
		require.Equal(t, pluginhost.StateRunning, st.State)
		require.Zero(t, st.PID, "a builtin has no process")
		require.Equal(t, "1.0.0", st.Description.Version)
		require.Equal(t, []plugins.ItemType{{Name: "echo", Project: "example", ItemPrefix: "echo:", ReclaimTTL: time.Minute}}, st.Description.ItemTypes)
		require.Equal(t, []plugins.Job{{Name: "heartbeat", Period: time.Minute}}, st.Description.Jobs)

		// The host created the project with the item type's reclaim TTL
		// and ran the job at once, queuing the item the tick returned.
		ttl, ok := q.ensured("example")
		require.True(t, ok)
		require.Equal(t, time.Minute, ttl)
		require.Equal(t, []string{fmt.Sprintf("echo:tick-%d", start.UnixMilli())}, q.queued("example"))
		require.EqualValues(t, 1, statusOf(h, "example").ItemsQueued)

		// Events route by project and prefix.
		require.Equal(t, 1, h.DeliverDone(plugins.ItemEvent{Project: "example", Item: "echo:a", Downloader: "alice", At: start}))
		require.Equal(t, 0, h.DeliverDone(plugins.ItemEvent{Project: "example", Item: "other:a"}))
		require.Equal(t, 0, h.DeliverDone(plugins.ItemEvent{Project: "elsewhere", Item: "echo:a"}))
		require.Equal(t, 1, h.DeliverReclaim(plugins.ItemEvent{Project: "example", Item: "echo:b"}))
		synctest.Wait()
		stats := liveStats(t, h, "example")
		done, _ := metric(stats, "items_done_total")
		reclaims, _ := metric(stats, "reclaims_total")
		require.Equal(t, 1.0, done)
		require.Equal(t, 1.0, reclaims)

		// The cached stats (and /metrics) catch up at the next health check.
		time.Sleep(pluginhost.DefaultHealthInterval)
		synctest.Wait()
		cached, _ := metric(h.Stats()["example"], "items_done_total")
		require.Equal(t, 1.0, cached)
		families := gather(t, h)
		require.Equal(t, 1.0, families["hoard_plugin_up"])
		require.Equal(t, 1.0, families["hoard_example_items_done_total"])
		require.Equal(t, 1.0, families["hoard_example_ticks_total"], "the first run, at start")
	})
}

// gather collects the host's metrics into name -> value (the first series).
func gather(t *testing.T, h *pluginhost.Host) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(h.Collector()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			out[mf.GetName()] = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			out[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestStopIsSafeTwiceAndWithoutStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		idle := exampleHost(t, pluginhost.Options{})
		require.NoError(t, idle.Stop())
		require.NoError(t, idle.Stop())

		h := exampleHost(t, pluginhost.Options{})
		require.NoError(t, h.Start(t.Context()))
		require.Error(t, h.Start(t.Context()), "a second Start is refused")
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		require.NoError(t, h.Stop())
		require.NoError(t, h.Stop())
		require.Equal(t, pluginhost.StateStopped, statusOf(h, "example").State)
		err := h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error { return p.Health(ctx) })
		require.ErrorIs(t, err, plugins.ErrUnavailable)
	})
}

func TestHungHookDoesNotBlockTheHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := exampleHost(t, pluginhost.Options{HookTimeout: time.Second, MaxInflight: 2, HealthFailures: 1, HealthInterval: 30 * time.Second})
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))

		// The delivery is queued, the hook hangs (deaf to its context), and
		// the next event is delivered once the host gives up on it.
		require.Equal(t, 1, h.DeliverDone(plugins.ItemEvent{Project: "example", Item: exampleplugin.HangItem}))
		require.Equal(t, 1, h.DeliverDone(plugins.ItemEvent{Project: "example", Item: "echo:after"}))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		done, _ := metric(liveStats(t, h, "example"), "items_done_total")
		require.Equal(t, 1.0, done, "the event after the hung one was delivered")
		require.EqualValues(t, 1, statusOf(h, "example").HookErrors)

		// A direct call gives up at its deadline too...
		start := time.Now()
		err := h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error {
			return p.OnItemDone(ctx, plugins.ItemEvent{Project: "example", Item: exampleplugin.HangItem})
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, pluginhost.DefaultCallTimeout, time.Since(start), "virtual time: exactly the call timeout")
		// ...and with MaxInflight calls stuck, further calls fail fast
		// instead of piling up goroutines.
		err = h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error { return p.Health(ctx) })
		require.ErrorIs(t, err, plugins.ErrBusy)

		// The busy plugin fails its health check and is replaced; Close
		// releases the old instance's stuck goroutines.
		time.Sleep(30 * time.Second)
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		synctest.Wait()
		st := statusOf(h, "example")
		require.Equal(t, 1, st.Restarts)
		require.Contains(t, st.LastError, "busy")
		require.NoError(t, h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error { return p.Health(ctx) }))
	})
}

func TestPanickingBuiltinIsRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := exampleHost(t, pluginhost.Options{})
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		require.Equal(t, 1, h.DeliverDone(plugins.ItemEvent{Project: "example", Item: exampleplugin.PanicItem}))
		synctest.Wait()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		st := statusOf(h, "example")
		require.Equal(t, 1, st.Restarts)
		require.Contains(t, st.LastError, "plugin panicked: example plugin asked to panic")
	})
}

func TestUnhealthyPluginIsRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := exampleHost(t, pluginhost.Options{HealthFailures: 3})
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		h.DeliverDone(plugins.ItemEvent{Project: "example", Item: exampleplugin.SickItem})
		// Two failures are tolerated...
		time.Sleep(2*pluginhost.DefaultHealthInterval + time.Second)
		synctest.Wait()
		require.Equal(t, 0, statusOf(h, "example").Restarts)
		// ...the third restarts it, healthy again (a new instance).
		time.Sleep(pluginhost.DefaultHealthInterval)
		synctest.Wait()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		st := statusOf(h, "example")
		require.Equal(t, 1, st.Restarts)
		require.Contains(t, st.LastError, "3 health checks failed in a row")
		require.Contains(t, st.LastError, "told it is sick")
		require.NoError(t, h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error { return p.Health(ctx) }))
	})
}

// controlled is a plugin whose factory and health a test switches.
type controlled struct {
	mu          sync.Mutex
	failFactory bool
	sick        bool
	starts      []time.Time
	ticks       []plugins.Tick
	enqueue     []plugins.QueueItem
	panicTicks  int
}

func (c *controlled) factory(context.Context, *slog.Logger) (plugins.Plugin, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts = append(c.starts, time.Now())
	if c.failFactory {
		return nil, errors.New("factory told to fail")
	}
	return &controlledPlugin{c: c}, nil
}

func (c *controlled) set(f func(c *controlled)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *controlled) tickLog() []plugins.Tick {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]plugins.Tick(nil), c.ticks...)
}

func (c *controlled) startLog() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.starts...)
}

type controlledPlugin struct{ c *controlled }

func (p *controlledPlugin) Configure(context.Context, plugins.Config) error { return nil }
func (p *controlledPlugin) Describe(context.Context) (plugins.Description, error) {
	return plugins.Description{
		ItemTypes: []plugins.ItemType{{Name: "sweep", Project: "sweeps", ItemPrefix: "sweep:"}},
		Jobs:      []plugins.Job{{Name: "sweep", Period: time.Minute}},
	}, nil
}
func (p *controlledPlugin) OnItemDone(context.Context, plugins.ItemEvent) error { return nil }
func (p *controlledPlugin) OnReclaim(context.Context, plugins.ItemEvent) error  { return nil }
func (p *controlledPlugin) OnTick(_ context.Context, tick plugins.Tick) (plugins.TickResult, error) {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.c.ticks = append(p.c.ticks, tick)
	if p.c.panicTicks > 0 {
		p.c.panicTicks--
		panic("tick told to panic")
	}
	return plugins.TickResult{Enqueue: p.c.enqueue}, nil
}
func (p *controlledPlugin) Stats(context.Context) (plugins.Stats, error) { return plugins.Stats{}, nil }
func (p *controlledPlugin) HandleRequest(_ context.Context, req plugins.Request) (plugins.Response, error) {
	return plugins.NotFoundResponse(req), nil
}
func (p *controlledPlugin) Health(context.Context) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if p.c.sick {
		return errors.New("told to be sick")
	}
	return nil
}
func (p *controlledPlugin) Close(context.Context) error { return nil }

func TestMissedTicksCollapseIntoOneCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &controlled{}
		logger, _ := newTestLogger(t)
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "sched"}}, Builtins: map[string]plugins.Factory{"sched": c.factory},
			HealthFailures: 2, MinBackoff: time.Second, MaxBackoff: 8 * time.Second, Logger: logger,
		})
		require.NoError(t, err)
		t0 := time.Now()
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		ticks := c.tickLog()
		require.Len(t, ticks, 2)
		require.Equal(t, plugins.Tick{Job: "sweep", Scheduled: t0, At: t0}, ticks[0])
		require.Equal(t, plugins.Tick{Job: "sweep", Scheduled: t0.Add(time.Minute), At: t0.Add(time.Minute)}, ticks[1])

		// The plugin goes down (unhealthy, then failing to start) across
		// several periods: no tick runs meanwhile.
		c.set(func(c *controlled) { c.sick, c.failFactory = true, true })
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		require.Len(t, c.tickLog(), 2)
		require.NotEqual(t, pluginhost.StateRunning, statusOf(h, "sched").State)

		// Back up: one catch-up run stands for the missed ones.
		c.set(func(c *controlled) { c.sick, c.failFactory = false, false })
		require.NoError(t, h.WaitRunning(t.Context(), "sched"))
		synctest.Wait()
		ticks = c.tickLog()
		require.Len(t, ticks, 3, "one catch-up run, not a burst")
		catchUp := ticks[2]
		require.Equal(t, t0.Add(2*time.Minute), catchUp.Scheduled)
		require.Equal(t, int64(catchUp.At.Sub(catchUp.Scheduled)/time.Minute), catchUp.Missed)
		require.GreaterOrEqual(t, catchUp.Missed, int64(5))

		// The next run keeps the original cadence.
		next := catchUp.Scheduled.Add(time.Duration(catchUp.Missed+1) * time.Minute)
		time.Sleep(next.Sub(time.Now()) - time.Nanosecond)
		synctest.Wait()
		require.Len(t, c.tickLog(), 3)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		ticks = c.tickLog()
		require.Len(t, ticks, 4)
		require.Equal(t, plugins.Tick{Job: "sweep", Scheduled: next, At: next}, ticks[3])
	})
}

func TestRestartBackoffDoublesUpToTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &controlled{failFactory: true}
		logger, _ := newTestLogger(t)
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "sched"}}, Builtins: map[string]plugins.Factory{"sched": c.factory},
			MinBackoff: time.Second, MaxBackoff: 10 * time.Second, Logger: logger,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(t.Context()))
		time.Sleep(time.Minute)
		synctest.Wait()
		require.NoError(t, h.Stop())
		starts := c.startLog()
		var gaps []time.Duration
		for i := 1; i < len(starts) && i <= 7; i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1]))
		}
		require.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
			10 * time.Second, 10 * time.Second, 10 * time.Second}, gaps)
		st := statusOf(h, "sched")
		require.Equal(t, pluginhost.StateStopped, st.State)
		require.Contains(t, st.LastError, "factory told to fail")
	})
}

func TestTickItemsMustBelongToThePlugin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &controlled{enqueue: []plugins.QueueItem{{Project: "sweeps", Item: "sweep:1"}, {Project: "example", Item: "sweep:2"}}}
		q := newRecordingQueues()
		logger, logs := newTestLogger(t)
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "sched"}}, Builtins: map[string]plugins.Factory{"sched": c.factory},
			Queues: q, Logger: logger,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		synctest.Wait()
		require.Len(t, c.tickLog(), 1)
		require.Empty(t, q.queued("sweeps"), "one foreign item refuses the whole batch")
		require.Empty(t, q.queued("example"))
		require.Contains(t, logs.String(), "item belongs to no item type of the plugin")

		c.set(func(c *controlled) { c.enqueue = []plugins.QueueItem{{Project: "sweeps", Item: "sweep:3"}} })
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, []string{"sweep:3"}, q.queued("sweeps"))
	})
}

func TestFullBacklogDropsAndCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := exampleHost(t, pluginhost.Options{EventQueue: 2, HookTimeout: time.Hour})
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		// The first event hangs the worker for an hour; two more fill the
		// backlog; the rest are dropped without blocking the caller.
		h.DeliverDone(plugins.ItemEvent{Project: "example", Item: exampleplugin.HangItem})
		synctest.Wait()
		queued := 0
		for i := range 10 {
			queued += h.DeliverDone(plugins.ItemEvent{Project: "example", Item: fmt.Sprintf("echo:%d", i)})
		}
		require.Equal(t, 2, queued)
		require.EqualValues(t, 8, statusOf(h, "example").EventsDropped)
		require.Equal(t, 8.0, gatherLabeled(t, h, "hoard_plugin_events_dropped_total", "hook", "done"))
	})
}

// gatherLabeled returns the value of the series of name with label=value.
func gatherLabeled(t *testing.T, h *pluginhost.Host, name, label, value string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(h.Collector()))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

func TestTickCutShortByACrashRunsAgainOnTheNextInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &controlled{panicTicks: 1}
		logger, _ := newTestLogger(t)
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "sched"}}, Builtins: map[string]plugins.Factory{"sched": c.factory}, Logger: logger,
		})
		require.NoError(t, err)
		t0 := time.Now()
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		synctest.Wait()
		require.NoError(t, h.WaitRunning(t.Context(), "sched"))
		synctest.Wait()
		ticks := c.tickLog()
		require.Len(t, ticks, 2, "the run that panicked, then the same run on the new instance")
		require.Equal(t, t0, ticks[0].Scheduled)
		require.Equal(t, t0, ticks[1].Scheduled)
		require.Equal(t, pluginhost.DefaultMinBackoff, ticks[1].At.Sub(t0), "after the restart back-off, not a period later")
		require.Equal(t, 1, statusOf(h, "sched").Restarts)
	})
}
