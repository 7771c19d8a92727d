package pluginhost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/internal/unittier"
	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// TestPluginWorksItsOwnItemsThroughTheHostAPI: a plugin claims its own
// items and reports them done with a result through Config.Host, in-process
// and as its own process (the Host service over go-plugin's broker), and
// the result comes back to its OnItemDone through the project's event log.
func TestPluginWorksItsOwnItemsThroughTheHostAPI(t *testing.T) {
	unittier.Skip(t, "it builds and runs a plugin binary on a real Redis")
	bin := buildPlugin(t, "hoard-example")
	for _, transport := range []string{"builtin", "external"} {
		t.Run(transport, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
				ctx := t.Context()
				engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
				logger, _ := newTestLogger(t)
				spec := pluginhost.Spec{Name: "example", Settings: json.RawMessage(`{"tick_period":"24h","worker":true}`)}
				if transport == "external" {
					spec.Path = bin
				}
				h, err := pluginhost.NewHost(pluginhost.Options{
					Plugins: []pluginhost.Spec{spec}, Builtins: map[string]plugins.Factory{"example": exampleplugin.New},
					Redis: b.Client, Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine),
					Logger: logger, EventBlock: 50 * time.Millisecond,
				})
				require.NoError(t, err)
				require.NoError(t, h.Start(ctx))
				t.Cleanup(func() { _ = h.Stop() })
				require.NoError(t, h.WaitRunning(ctx, "example"))
				require.Eventually(t, func() bool {
					_, err := engine.Project(ctx, "example")
					return err == nil
				}, eventually, poll)
				_, err = engine.Enqueue(ctx, "example", queues.Target{Queue: queues.QueueTodo},
					[]queues.QueueItem{{Name: "echo:job-1"}, {Name: "echo:a-longer-job"}})
				require.NoError(t, err)

				// The first tick's item and the two above: all worked by the
				// plugin itself, none left, each result back in a hook.
				var stats plugins.Stats
				require.Eventually(t, func() bool {
					err := h.Call(ctx, "example", func(ctx context.Context, p plugins.Plugin) error {
						var err error
						stats, err = p.Stats(ctx)
						return err
					})
					if err != nil {
						return false
					}
					// The worker counts its done after Done returns; the hook
					// may run first (its event is in Redis by then): wait for
					// both.
					done, _ := metric(stats, "items_done_total")
					worked, _ := metric(stats, "worked_total")
					return done == 3 && worked == 3
				}, eventually, poll)
				refused, _ := metric(stats, "host_refused_total")
				require.Equal(t, 1.0, refused, "a project the plugin does not own is refused")
				for _, m := range stats.Metrics {
					if m.Name == "last_result" {
						item, result, ok := strings.Cut(m.Labels["result"], " ")
						require.True(t, ok, "a result arrived: %q", m.Labels["result"])
						require.JSONEq(t, fmt.Sprintf(`{"length":%d}`, len(item)), result)
					}
				}
				counts, err := engine.Counts(ctx, "example")
				require.NoError(t, err)
				require.Equal(t, queues.Counts{Done: 3}, counts)
			})
		})
	}
}

// TestHostAPIRefusesWhatThePluginDoesNotOwn: items of no item type, other
// projects, and bad input never reach the engine.
func TestHostAPIRefusesWhatThePluginDoesNotOwn(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
		_, err := engine.CreateProject(ctx, "warriors", queues.SettingsPatch{})
		require.NoError(t, err)
		_, err = engine.Enqueue(ctx, "warriors", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "user:1"}})
		require.NoError(t, err)
		var host plugins.HostAPI
		captured := make(chan plugins.HostAPI, 1)
		factory := func(ctx context.Context, l *slog.Logger) (plugins.Plugin, error) {
			p, err := exampleplugin.New(ctx, l)
			return &hostCapture{Plugin: p, captured: captured}, err
		}
		logger, _ := newTestLogger(t)
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins:  []pluginhost.Spec{{Name: "example", Settings: json.RawMessage(`{"tick_period":"24h"}`)}},
			Builtins: map[string]plugins.Factory{"example": factory},
			Redis:    b.Client, Queues: pluginhost.EngineQueues(engine), Logger: logger,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(ctx))
		t.Cleanup(func() { _ = h.Stop() })
		require.NoError(t, h.WaitRunning(ctx, "example"))
		host = <-captured
		require.NotNil(t, host)
		// The first heartbeat tick queues one item: wait for it, so the
		// counts below do not race with it.
		require.Eventually(t, func() bool {
			c, err := engine.Counts(ctx, "example")
			return err == nil && c.Todo == 1
		}, eventually, poll)

		_, err = host.Claim(ctx, "warriors", "sneaky", 1)
		require.ErrorIs(t, err, plugins.ErrNotOwned)
		_, err = host.Counts(ctx, "warriors")
		require.ErrorIs(t, err, plugins.ErrNotOwned)
		_, err = host.Enqueue(ctx, "example", []string{"not-echo:x"})
		require.ErrorIs(t, err, plugins.ErrNotOwned)
		_, err = host.Done(ctx, "example", "worker", []string{"echo:x"}, json.RawMessage(`{not json`))
		require.Error(t, err)
		c, err := engine.Counts(ctx, "warriors")
		require.NoError(t, err)
		require.EqualValues(t, 1, c.Todo, "the warriors' item is untouched")

		n, err := host.Enqueue(ctx, "example", []string{"echo:x"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		items, err := host.Claim(ctx, "example", "worker", 5)
		require.NoError(t, err)
		require.Len(t, items, 2, "the tick's item and echo:x")
		require.Contains(t, items, "echo:x")
		released, err := host.Release(ctx, "example", "worker", []string{"echo:x"})
		require.NoError(t, err)
		require.Equal(t, 1, released)
		pc, err := host.Counts(ctx, "example")
		require.NoError(t, err)
		require.EqualValues(t, 1, pc.Out)
		require.EqualValues(t, 1, pc.Todo, "the released item waits again")
	})
}

// hostCapture hands over the HostAPI its plugin was configured with.
type hostCapture struct {
	plugins.Plugin
	captured chan plugins.HostAPI
}

func (c *hostCapture) Configure(ctx context.Context, cfg plugins.Config) error {
	select {
	case c.captured <- cfg.Host:
	default:
	}
	return c.Plugin.Configure(ctx, cfg)
}

// rankPlugin owns a score-ordered item type with its own retention and
// queues its tick's items with scores.
type rankPlugin struct {
	recordingPlugin
	enqueue []plugins.QueueItem
}

func (p *rankPlugin) Describe(context.Context) (plugins.Description, error) {
	return plugins.Description{
		ItemTypes: []plugins.ItemType{{Name: "rank", Project: "ranks", ItemPrefix: "rank:", Order: plugins.OrderScore,
			DoneMode: "count", RecentDone: 2000}},
		Jobs: []plugins.Job{{Name: "rank", Period: time.Hour}},
	}, nil
}

func (p *rankPlugin) OnTick(context.Context, plugins.Tick) (plugins.TickResult, error) {
	return plugins.TickResult{Enqueue: p.enqueue}, nil
}

func TestItemTypeOrderAndRetentionReachTheProject(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
		// The project exists already, in keep mode: the plugin's retention
		// wins (done items of its types must not grow Redis forever).
		_, err := engine.CreateProject(ctx, "ranks", queues.SettingsPatch{DoneMode: ptrTo(queues.DoneKeep)})
		require.NoError(t, err)
		plugin := &rankPlugin{recordingPlugin: recordingPlugin{l: newLedger()}, enqueue: []plugins.QueueItem{
			{Project: "ranks", Item: "rank:low", Score: 0.1},
			{Project: "ranks", Item: "rank:top", Score: 1.2},
			{Project: "ranks", Item: "rank:mid", Score: 0.8},
		}}
		logger, _ := newTestLogger(t)
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins:  []pluginhost.Spec{{Name: "ranker"}},
			Builtins: map[string]plugins.Factory{"ranker": func(context.Context, *slog.Logger) (plugins.Plugin, error) { return plugin, nil }},
			Redis:    b.Client, Queues: pluginhost.EngineQueues(engine), Logger: logger,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(ctx))
		t.Cleanup(func() { _ = h.Stop() })
		require.Eventually(t, func() bool {
			c, err := engine.Counts(ctx, "ranks")
			return err == nil && c.Scored == 3
		}, eventually, poll)
		p, err := engine.Project(ctx, "ranks")
		require.NoError(t, err)
		require.Equal(t, queues.DoneCount, p.DoneMode)
		require.Equal(t, 2000, p.RecentDone)

		got, err := engine.Claim(ctx, queues.ClaimRequest{Project: "ranks", Downloader: "worker", Count: 3})
		require.NoError(t, err)
		var order []string
		for _, it := range got.Items {
			order = append(order, it.Name)
		}
		require.Equal(t, []string{"rank:top", "rank:mid", "rank:low"}, order)
	})
}

func TestItemTypesSharingAProjectMustAgreeOnRetention(t *testing.T) {
	d := plugins.Description{ItemTypes: []plugins.ItemType{
		{Name: "a", Project: "shared", ItemPrefix: "a:", DoneMode: "keep"},
		{Name: "b", Project: "shared", ItemPrefix: "b:"},
		{Name: "c", Project: "other", ItemPrefix: "c:", Order: "random"},
		{Name: "d", Project: "other2", ItemPrefix: "d:", RecentDone: 5},
	}}
	err := d.Validate()
	require.ErrorContains(t, err, `item types "a" and "b" share project "shared" but not its retention`)
	require.ErrorContains(t, err, `item type "c": order "random"`)
	require.ErrorContains(t, err, `item type "d": recent_done 5`)
}

func ptrTo[T any](v T) *T { return &v }
