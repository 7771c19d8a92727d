// Package plugintest is the conformance suite every hoard plugin passes, in
// the spirit of chihaya's storage tests: Run drives a plugin's Factory
// through the contract, in-process and over go-plugin's gRPC transport, and
// checks what the host relies on. It imports only the contract, so a
// plugin's own tests can run it without the rest of hoard.
package plugintest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
)

// Options say how to configure the plugin under test.
type Options struct {
	// Config is what Configure gets (Name defaults to "conformance").
	Config plugins.Config
	// BadSettings, when set, is a settings document Configure must refuse
	// with an error (and without panicking).
	BadSettings json.RawMessage
	// Timeout bounds each call (default 10 s).
	Timeout time.Duration
}

// Transports are the ways the suite runs a plugin.
var Transports = map[string]func(t *testing.T, impl plugins.Plugin) plugins.Plugin{
	"in-process": func(_ *testing.T, impl plugins.Plugin) plugins.Plugin { return impl },
	"grpc": func(t *testing.T, impl plugins.Plugin) plugins.Plugin {
		t.Helper()
		client, _ := plugin.TestPluginGRPCConn(t, false, plugins.PluginSet(impl))
		t.Cleanup(func() { _ = client.Close() })
		raw, err := client.Dispense(plugins.PluginSetKey)
		require.NoError(t, err)
		p, ok := raw.(plugins.Plugin)
		require.True(t, ok, "dispensed %T, not a plugins.Plugin", raw)
		return p
	},
}

// Run checks the plugin factory builds over every transport:
//   - a bad settings document is refused by Configure with an error;
//   - Configure then Describe give a valid description, the same twice;
//   - Health is nil once configured; Stats are valid metrics (names,
//     kinds, labels within the contract's limits);
//   - every described job can be ticked, and a tick only queues items of
//     the plugin's own item types, at most MaxTickEnqueue;
//   - hooks are idempotent: the same done and reclaim event delivered
//     twice, for every item type, never fails the second time when it did
//     not fail the first;
//   - a call whose context is already cancelled returns (promptly) instead
//     of hanging;
//   - Close succeeds, and a second Close is harmless.
func Run(t *testing.T, factory plugins.Factory, opts Options) {
	t.Helper()
	if opts.Config.Name == "" {
		opts.Config.Name = "conformance"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	for name, wrap := range Transports {
		t.Run(name, func(t *testing.T) {
			impl, err := factory(t.Context(), slog.New(slog.DiscardHandler))
			require.NoError(t, err, "the factory builds the plugin")
			run(t, wrap(t, impl), opts)
		})
	}
}

func run(t *testing.T, p plugins.Plugin, opts Options) {
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(t.Context(), opts.Timeout) }

	if len(opts.BadSettings) > 0 {
		ctx, cancel := call()
		bad := opts.Config
		bad.Settings = opts.BadSettings
		require.Error(t, p.Configure(ctx, bad), "Configure refuses bad settings")
		cancel()
	}
	ctx, cancel := call()
	require.NoError(t, p.Configure(ctx, opts.Config), "Configure")
	cancel()
	closed := false
	t.Cleanup(func() {
		if !closed {
			ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
			defer cancel()
			_ = p.Close(ctx)
		}
	})

	ctx, cancel = call()
	desc, err := p.Describe(ctx)
	cancel()
	require.NoError(t, err, "Describe")
	require.NoError(t, desc.Validate(), "the description is valid")
	ctx, cancel = call()
	again, err := p.Describe(ctx)
	cancel()
	require.NoError(t, err)
	require.Equal(t, desc.ItemTypes, again.ItemTypes, "item types are stable")
	require.Equal(t, desc.Jobs, again.Jobs, "jobs are stable")

	ctx, cancel = call()
	require.NoError(t, p.Health(ctx), "healthy once configured")
	cancel()
	checkStats(t, p, call)

	now := time.Now()
	for _, job := range desc.Jobs {
		ctx, cancel := call()
		result, err := p.OnTick(ctx, plugins.Tick{Job: job.Name, Scheduled: now, At: now})
		cancel()
		require.NoError(t, err, "tick of job %s", job.Name)
		require.LessOrEqual(t, len(result.Enqueue), plugins.MaxTickEnqueue, "job %s queues too much", job.Name)
		for _, item := range result.Enqueue {
			_, owned := desc.Owner(item.Project, item.Item)
			require.True(t, owned, "job %s queued %q in %q, which no item type of the plugin owns", job.Name, item.Item, item.Project)
		}
	}

	for _, it := range desc.ItemTypes {
		ev := plugins.ItemEvent{ItemType: it.Name, Project: it.Project, Item: it.ItemPrefix + "conformance-item",
			Downloader: "conformance", At: now}
		for _, hook := range []struct {
			name string
			fn   func(context.Context, plugins.ItemEvent) error
		}{{"OnItemDone", p.OnItemDone}, {"OnReclaim", p.OnReclaim}} {
			ctx, cancel := call()
			first := hook.fn(ctx, ev)
			cancel()
			if first != nil {
				continue // a plugin may refuse an item it does not know
			}
			ctx, cancel = call()
			require.NoError(t, hook.fn(ctx, ev), "%s of %s is idempotent: the host delivers at least once", hook.name, it.Name)
			cancel()
		}
	}

	cancelled, cancelNow := context.WithCancel(t.Context())
	cancelNow()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		_, _ = p.Stats(cancelled)
	}()
	select {
	case <-returned:
	case <-time.After(opts.Timeout):
		t.Fatal("Stats with a cancelled context did not return")
	}

	ctx, cancel = call()
	require.NoError(t, p.Close(ctx), "Close")
	cancel()
	closed = true
	ctx, cancel = call()
	defer cancel()
	if err := p.Close(ctx); err != nil && !errors.Is(err, plugins.ErrUnavailable) {
		require.NotContains(t, strings.ToLower(err.Error()), "panic", "a second Close must not panic")
	}
}

func checkStats(t *testing.T, p plugins.Plugin, call func() (context.Context, context.CancelFunc)) {
	t.Helper()
	ctx, cancel := call()
	defer cancel()
	stats, err := p.Stats(ctx)
	require.NoError(t, err, "Stats")
	require.LessOrEqual(t, len(stats.Metrics), plugins.MaxMetrics)
	kinds := map[string]plugins.MetricKind{}
	for _, m := range stats.Metrics {
		require.True(t, plugins.ValidMetricName(m.Name), "metric name %q", m.Name)
		require.Contains(t, []plugins.MetricKind{plugins.Counter, plugins.Gauge}, m.Kind, "metric %s kind", m.Name)
		require.LessOrEqual(t, len(m.Labels), plugins.MaxMetricLabels, "metric %s labels", m.Name)
		for label := range m.Labels {
			require.True(t, plugins.ValidMetricName(label), "metric %s label %q", m.Name, label)
		}
		if k, ok := kinds[m.Name]; ok {
			require.Equal(t, k, m.Kind, "metric %s changes kind", m.Name)
		}
		kinds[m.Name] = m.Kind
	}
}
