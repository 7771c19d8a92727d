package pluginhost_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

// TestAShorterPeriodIsNotHeldBackByAnOlderLease: the reaper whose
// period went from 4h to 1m did not run until its 4h lease was deleted by
// hand. The lease a 4h period left (as a 4h-periodic run takes it)
// does not hold back the same job at 1m: it runs at once.
func TestAShorterPeriodIsNotHeldBackByAnOlderLease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
		// The lease as a 4h run takes it, and as hoard took it before the
		// period was part of its name (what an upgrade finds).
		for _, old := range []string{"hoard:plugin:{example}:lease:job:heartbeat:14400000", "hoard:plugin:{example}:lease:job:heartbeat"} {
			require.NoError(t, b.Client.Set(ctx, old, "another-frontend", 4*time.Hour).Err())
		}
		runningExample(t, b, engine, `{"project":"leased","tick_period":"1m"}`, nil)
		require.Eventually(t, func() bool {
			c, err := engine.Counts(ctx, "leased")
			return err == nil && c.Todo == 1
		}, eventually, poll, "the 1m job ran at once despite the 4h lease")
	})
}

// TestAnOperatorRunsAJobNow: RunJob runs the job at once, outside its
// period (24h here) and whoever holds the period's lease, and waits for
// it; an unknown job or plugin is named as such.
func TestAnOperatorRunsAJobNow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
		h := runningExample(t, b, engine, `{"project":"manual","tick_period":"24h"}`, nil)
		todo := func() int64 {
			c, err := engine.Counts(ctx, "manual")
			if err != nil {
				return -1
			}
			return c.Todo
		}
		require.Eventually(t, func() bool { return todo() == 1 }, eventually, poll, "the first scheduled run")

		ticks := func() float64 {
			var n float64
			require.NoError(t, h.Call(ctx, "example", func(ctx context.Context, p plugins.Plugin) error {
				stats, err := p.Stats(ctx)
				for _, m := range stats.Metrics {
					if m.Name == "ticks_total" {
						n = m.Value
					}
				}
				return err
			}))
			return n
		}
		require.Equal(t, 1.0, ticks())
		require.NoError(t, h.RunJob(ctx, "example", "heartbeat"))
		require.Equal(t, 2.0, ticks(), "the job ran before RunJob returned, a day before its period")

		require.ErrorIs(t, h.RunJob(ctx, "example", "nosuch"), pluginhost.ErrNoJob)
		require.ErrorIs(t, h.RunJob(ctx, "nosuch", "heartbeat"), pluginhost.ErrNoPlugin)
	})
}

// runningExample starts the example plugin built in with settings and
// waits for it to run; with settings "" it starts a host with no plugin.
func runningExample(t *testing.T, b redistest.Backend, engine *queues.Engine, settings string, tokens []pluginhost.WorkerToken) *pluginhost.Host {
	t.Helper()
	specs := []pluginhost.Spec{}
	if settings != "" {
		specs = []pluginhost.Spec{{Name: "example", Settings: json.RawMessage(settings)}}
	}
	h := exampleHost(t, pluginhost.Options{Plugins: specs, Redis: b.Client, Queues: pluginhost.EngineQueues(engine),
		Logger: slog.New(slog.DiscardHandler), WorkerTokens: tokens})
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })
	if settings != "" {
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
	}
	return h
}
