package pluginhost_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/plugins/pluginhost"

	"github.com/hoardproject/hoard/internal/clock"
)

// ledger records every hook call across all the instances (and hosts) of a
// recording plugin, so a test can count how often each event was handled.
type ledger struct {
	mu       sync.Mutex
	done     map[string]int
	reclaims map[string][]string // item -> who held each expired claim
	// hang makes the hook for this item block until release is closed
	// (or the call's context ends), as a frontend that is killed while
	// handling it would.
	hang    string
	hanging chan struct{}
	release chan struct{}
	// failures makes OnItemDone fail for an item this many times.
	failures map[string]int
}

func newLedger() *ledger {
	return &ledger{done: map[string]int{}, reclaims: map[string][]string{}, failures: map[string]int{},
		hanging: make(chan struct{}, 1), release: make(chan struct{})}
}

func (l *ledger) factory(context.Context, *slog.Logger) (plugins.Plugin, error) {
	return &recordingPlugin{l: l}, nil
}

func (l *ledger) doneCount(item string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done[item]
}

func (l *ledger) doneTotal() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.done {
		n += c
	}
	return n
}

func (l *ledger) reclaimsOf(item string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reclaims[item]...)
}

type recordingPlugin struct{ l *ledger }

func (p *recordingPlugin) Configure(context.Context, plugins.Config) error { return nil }
func (p *recordingPlugin) Describe(context.Context) (plugins.Description, error) {
	return plugins.Description{ItemTypes: []plugins.ItemType{
		{Name: "work", Project: "evproj", ItemPrefix: "w:", ReclaimTTL: time.Minute},
	}}, nil
}

func (p *recordingPlugin) OnItemDone(ctx context.Context, ev plugins.ItemEvent) error {
	p.l.mu.Lock()
	hang := ev.Item == p.l.hang
	if n := p.l.failures[ev.Item]; n > 0 {
		p.l.failures[ev.Item] = n - 1
		p.l.mu.Unlock()
		return errors.New("told to fail")
	}
	p.l.mu.Unlock()
	if hang {
		p.l.hanging <- struct{}{}
		select {
		case <-p.l.release:
		case <-ctx.Done():
		}
		return errors.New("the frontend died while handling this")
	}
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	p.l.done[ev.Item]++
	return nil
}

func (p *recordingPlugin) OnReclaim(_ context.Context, ev plugins.ItemEvent) error {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	p.l.reclaims[ev.Item] = append(p.l.reclaims[ev.Item], ev.Downloader)
	return nil
}

func (p *recordingPlugin) OnTick(context.Context, plugins.Tick) (plugins.TickResult, error) {
	return plugins.TickResult{}, nil
}
func (p *recordingPlugin) Stats(context.Context) (plugins.Stats, error) { return plugins.Stats{}, nil }
func (p *recordingPlugin) HandleRequest(_ context.Context, req plugins.Request) (plugins.Response, error) {
	return plugins.NotFoundResponse(req), nil
}
func (p *recordingPlugin) Health(context.Context) error { return nil }
func (p *recordingPlugin) Close(context.Context) error  { return nil }

type eventRig struct {
	t      *testing.T
	ctx    context.Context
	b      redistest.Backend
	clock  *clock.Fake
	qclock *queues.FakeClock
	engine *queues.Engine
	l      *ledger
}

func newEventRig(t *testing.T, b redistest.Backend) *eventRig {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	qclock := queues.NewFakeClock(t0)
	engine := queues.NewEngine(b.Client, queues.Options{Clock: qclock, Logger: slog.New(slog.DiscardHandler)})
	return &eventRig{t: t, ctx: t.Context(), b: b, clock: newFakeClock(t0), qclock: qclock, engine: engine, l: newLedger()}
}

// frontend starts one hoard frontend's plugin host on the shared Redis.
func (r *eventRig) frontend() *pluginhost.Host {
	logger, _ := newTestLogger(r.t)
	h, err := pluginhost.NewHost(pluginhost.Options{
		Plugins:  []pluginhost.Spec{{Name: "rec"}},
		Builtins: map[string]plugins.Factory{"rec": r.l.factory},
		Redis:    r.b.Client, Queues: pluginhost.EngineQueues(r.engine), Events: pluginhost.EngineEventLog(r.engine),
		Clock: r.clock, Logger: logger, HealthInterval: time.Hour,
		EventBlock: 20 * time.Millisecond, EventRetryAfter: 50 * time.Millisecond,
		ReclaimSweepInterval: time.Hour, HookTimeout: 10 * time.Second,
	})
	require.NoError(r.t, err)
	require.NoError(r.t, h.Start(r.ctx))
	r.t.Cleanup(func() { _ = h.Stop() })
	require.NoError(r.t, h.WaitRunning(r.ctx, "rec"))
	return h
}

func (r *eventRig) waitProject() {
	require.Eventually(r.t, func() bool {
		p, err := r.engine.Project(r.ctx, "evproj")
		return err == nil && p.Settings.EventLog > 0
	}, eventually, poll, "the host creates the project with its event log on")
}

// complete queues, claims and completes items as a warrior would.
func (r *eventRig) complete(items ...string) {
	entries := make([]queues.QueueItem, len(items))
	for i, it := range items {
		entries[i] = queues.QueueItem{Name: it}
	}
	_, err := r.engine.Enqueue(r.ctx, "evproj", queues.Target{Queue: queues.QueueTodo}, entries)
	require.NoError(r.t, err)
	got, err := r.engine.Claim(r.ctx, queues.ClaimRequest{Project: "evproj", Downloader: "warrior", Count: len(items)})
	require.NoError(r.t, err)
	require.Len(r.t, got.Items, len(items))
	_, err = r.engine.Done(r.ctx, queues.DoneRequest{Project: "evproj", Downloader: "warrior", Items: items})
	require.NoError(r.t, err)
}

// pending counts the group's entries not yet acknowledged.
func (r *eventRig) pending() int64 {
	p, err := r.b.Client.XPending(r.ctx, queues.EventsKey("evproj"), "plugin:rec").Result()
	require.NoError(r.t, err)
	return p.Count
}

// advance moves the host's clock (which paces the retry passes) and waits
// for real time to pass the retry idle time Redis measures.
func (r *eventRig) advance() {
	time.Sleep(60 * time.Millisecond) //nolint: Redis measures idle time itself
	r.clock.Advance(time.Second)
}

func TestTwoFrontendsHandleEachCompletionOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newEventRig(t, b)
		r.frontend()
		r.frontend()
		r.waitProject()
		var items []string
		for i := range 40 {
			item := fmt.Sprintf("w:%02d", i)
			items = append(items, item)
			r.complete(item)
		}
		r.complete("other:x") // no item type owns it: no hook, still acknowledged
		require.Eventually(t, func() bool { return r.l.doneTotal() == 40 && r.pending() == 0 }, eventually, poll)
		for _, item := range items {
			require.Equal(t, 1, r.l.doneCount(item), "%s handled once across two frontends", item)
		}
	})
}

// TestCompletionsWhileNoFrontendRanAreDelivered: the old pub/sub hint was
// lost when nobody listened.
func TestCompletionsWhileNoFrontendRanAreDelivered(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newEventRig(t, b)
		h := r.frontend()
		r.waitProject()
		require.NoError(t, h.Stop())
		r.complete("w:a", "w:b")
		r.complete("w:c")
		r.frontend()
		require.Eventually(t, func() bool { return r.l.doneTotal() == 3 && r.pending() == 0 }, eventually, poll)
	})
}

// TestEventOfAFrontendKilledMidHookIsHandledByAnother: the frontend that
// read the event never acknowledges it (it is gone); once it has been
// pending for EventRetryAfter, the other frontend takes it over.
func TestEventOfAFrontendKilledMidHookIsHandledByAnother(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newEventRig(t, b)
		r.l.hang = "w:victim"
		first := r.frontend()
		r.waitProject()
		r.complete("w:victim")
		<-r.l.hanging // the first frontend is inside the hook
		r.l.mu.Lock()
		r.l.hang = "" // the replacement handles it normally
		r.l.mu.Unlock()
		second := r.frontend()
		// Nothing is delivered twice while the first may still finish.
		require.Zero(t, r.l.doneCount("w:victim"))
		// "kill" the first: it never acknowledges (Stop cancels the hook,
		// which then fails, as a dead process's would).
		require.NoError(t, first.Stop())
		require.Eventually(t, func() bool {
			r.advance()
			return r.l.doneCount("w:victim") == 1 && r.pending() == 0
		}, eventually, poll)
		require.EqualValues(t, 1, statusOf(second, "rec").EventsRetried)
	})
}

func TestFailingHookIsRetriedThenGivenUp(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newEventRig(t, b)
		r.l.failures["w:flaky"] = 2
		r.l.failures["w:broken"] = 1000
		h := r.frontend()
		r.waitProject()
		r.complete("w:flaky")
		r.complete("w:broken")
		require.Eventually(t, func() bool {
			r.advance()
			return r.l.doneCount("w:flaky") == 1 && statusOf(h, "rec").EventsGivenUp == 1
		}, eventually, poll)
		require.Zero(t, r.l.doneCount("w:broken"))
		require.Zero(t, r.pending(), "the given-up entry is acknowledged")
		st := statusOf(h, "rec")
		require.GreaterOrEqual(t, st.HookErrors, uint64(2+pluginhost.DefaultEventMaxDeliveries))
	})
}

// TestReclaimReachesThePluginWhenTheQueueReclaimsFirst is the bug of the
// old sweep: on an active project, a claim.lua reclaim moved the expired
// item's deadline before the host's sweep read it, and OnReclaim was never
// called.
func TestReclaimReachesThePluginWhenTheQueueReclaimsFirst(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newEventRig(t, b)
		r.frontend()
		r.waitProject()
		_, err := r.engine.Enqueue(r.ctx, "evproj", queues.Target{Queue: queues.QueueTodo},
			[]queues.QueueItem{{Name: "w:slow"}, {Name: "w:idle"}})
		require.NoError(t, err)
		got, err := r.engine.Claim(r.ctx, queues.ClaimRequest{Project: "evproj", Downloader: "alice", Count: 2})
		require.NoError(t, err)
		require.Len(t, got.Items, 2)
		r.qclock.Advance(61 * time.Second)
		// Another warrior gets one of them back at once: before any scan.
		got, err = r.engine.Claim(r.ctx, queues.ClaimRequest{Project: "evproj", Downloader: "bob", Count: 1})
		require.NoError(t, err)
		require.Len(t, got.Items, 1)
		taken := got.Items[0].Name
		other := "w:idle"
		if taken == other {
			other = "w:slow"
		}
		require.Eventually(t, func() bool { return len(r.l.reclaimsOf(taken)) == 1 }, eventually, poll)
		require.Equal(t, []string{"alice"}, r.l.reclaimsOf(taken))
		// The one nobody reclaimed reaches the plugin through the scan.
		r.clock.Advance(time.Hour)
		require.Eventually(t, func() bool { return len(r.l.reclaimsOf(other)) == 1 }, eventually, poll)
		require.Equal(t, []string{"alice"}, r.l.reclaimsOf(other))
		r.clock.Advance(time.Hour)
		require.Eventually(t, func() bool { return r.pending() == 0 }, eventually, poll)
		require.Len(t, r.l.reclaimsOf(taken), 1, "each expiry is delivered once")
		require.Len(t, r.l.reclaimsOf(other), 1, "each expiry is delivered once")
	})
}
