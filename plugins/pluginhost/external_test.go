package pluginhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
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

// eventually is the patience for what a real plugin process does: start,
// die, restart. It bounds a wait for an outcome; nothing here measures time.
const eventually = 60 * time.Second

const poll = 10 * time.Millisecond

// externalOptions are host options with short supervision intervals, so a
// dead process is noticed and replaced quickly on the wall clock.
func externalOptions(t *testing.T, path string, settings string) (pluginhost.Options, *logBuffer) {
	t.Helper()
	logger, logs := newTestLogger(t)
	return pluginhost.Options{
		Plugins:          []pluginhost.Spec{{Name: "example", Path: path, Settings: json.RawMessage(settings)}},
		Logger:           logger,
		HealthInterval:   200 * time.Millisecond,
		ExitPollInterval: 20 * time.Millisecond,
		MinBackoff:       20 * time.Millisecond,
		MaxBackoff:       200 * time.Millisecond,
		StopGrace:        2 * time.Second,
	}, logs
}

func startHost(t *testing.T, opts pluginhost.Options) *pluginhost.Host {
	t.Helper()
	h, err := pluginhost.NewHost(opts)
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(func() { _ = h.Stop() })
	ctx, cancel := context.WithTimeout(t.Context(), eventually)
	defer cancel()
	require.NoError(t, h.WaitRunning(ctx, "example"))
	return h
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestExternalPlugin(t *testing.T) {
	unittier.Skip(t, "it builds and runs plugin binaries")
	bin := buildPlugin(t, "hoard-example")
	binV2 := buildPlugin(t, "hoard-example-v2")

	t.Run("handshake, describe, hooks, stats and logs", func(t *testing.T) {
		opts, logs := externalOptions(t, bin, `{"listen":"127.0.0.1:0","tick_period":"1h"}`)
		q := newRecordingQueues()
		opts.Queues = q
		h := startHost(t, opts)

		st := statusOf(h, "example")
		require.Positive(t, st.PID)
		require.Equal(t, "1.0.0", st.Description.Version)
		require.Equal(t, "example", st.Description.ItemTypes[0].Project)
		require.Len(t, st.Description.Listeners, 1)
		require.Eventually(t, func() bool { return len(q.queued("example")) == 1 }, eventually, poll, "the first tick's item is queued")

		require.Equal(t, 1, h.DeliverDone(plugins.ItemEvent{Project: "example", Item: "echo:a", Downloader: "alice"}))
		require.Eventually(t, func() bool {
			done, _ := metric(liveStats(t, h, "example"), "items_done_total")
			return done == 1
		}, eventually, poll)
		pid, _ := metric(liveStats(t, h, "example"), "pid")
		require.Equal(t, float64(st.PID), pid, "Status.PID is the plugin's process")

		// The plugin's slog records reach the host's log with their level,
		// their attributes and the plugin's name.
		require.Eventually(t, func() bool { return contains(logs.String(), "example plugin configured") }, eventually, poll)
		line := lineWith(logs.String(), "example plugin configured")
		require.Contains(t, line, "level=INFO")
		require.Contains(t, line, "plugin=example")
		require.Contains(t, line, "project=example")

		require.NoError(t, h.Stop())
		require.NoError(t, h.Stop())
		require.True(t, processGone(st.PID), "Stop ends the process")
		require.Equal(t, pluginhost.StateStopped, statusOf(h, "example").State)
	})

	t.Run("a protocol version mismatch fails clearly and is not retried", func(t *testing.T) {
		opts, _ := externalOptions(t, binV2, `{}`)
		h, err := pluginhost.NewHost(opts)
		require.NoError(t, err)
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		ctx, cancel := context.WithTimeout(t.Context(), eventually)
		defer cancel()
		err = h.WaitRunning(ctx, "example")
		require.ErrorIs(t, err, plugins.ErrIncompatible)
		st := statusOf(h, "example")
		require.Equal(t, pluginhost.StateFailed, st.State)
		require.Contains(t, st.LastError, "speaks another plugin protocol than this hoard (version 1)")
		require.Contains(t, st.LastError, "Plugin version: 2")
		require.Contains(t, st.LastError, "rebuild the plugin")
		require.Equal(t, 0, st.Restarts)
	})

	t.Run("kill -9 and the host restarts it", func(t *testing.T) {
		opts, logs := externalOptions(t, bin, `{"tick_period":"1h"}`)
		h := startHost(t, opts)
		first := statusOf(h, "example").PID
		require.NoError(t, syscall.Kill(first, syscall.SIGKILL))
		require.Eventually(t, func() bool {
			st := statusOf(h, "example")
			return st.State == pluginhost.StateRunning && st.Restarts == 1 && st.PID != 0 && st.PID != first
		}, eventually, poll)
		second := statusOf(h, "example").PID
		pid, _ := metric(liveStats(t, h, "example"), "pid")
		require.Equal(t, float64(second), pid, "calls reach the new process")
		require.Contains(t, statusOf(h, "example").LastError, "plugin process exited")
		require.Contains(t, logs.String(), "plugin down; restarting it")
	})

	t.Run("a hung hook does not hold the host past its timeout", func(t *testing.T) {
		opts, _ := externalOptions(t, bin, `{"tick_period":"1h"}`)
		opts.HookTimeout = 300 * time.Millisecond
		opts.CallTimeout = 300 * time.Millisecond
		opts.HealthFailures = 1000 // this test is about calls, not restarts
		h := startHost(t, opts)

		err := h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error {
			return p.OnItemDone(ctx, plugins.ItemEvent{Project: "example", Item: exampleplugin.HangItem})
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// The plugin still serves other calls meanwhile.
		require.NoError(t, h.Call(t.Context(), "example", func(ctx context.Context, p plugins.Plugin) error { return p.Health(ctx) }))

		h.DeliverDone(plugins.ItemEvent{Project: "example", Item: exampleplugin.HangItem})
		h.DeliverDone(plugins.ItemEvent{Project: "example", Item: "echo:b"})
		require.Eventually(t, func() bool {
			done, _ := metric(liveStats(t, h, "example"), "items_done_total")
			return done == 1 && statusOf(h, "example").HookErrors == 1
		}, eventually, poll)
	})

	t.Run("a panic kills the process, which is restarted", func(t *testing.T) {
		opts, logs := externalOptions(t, bin, `{"tick_period":"1h"}`)
		h := startHost(t, opts)
		first := statusOf(h, "example").PID
		h.DeliverDone(plugins.ItemEvent{Project: "example", Item: exampleplugin.PanicItem})
		require.Eventually(t, func() bool {
			st := statusOf(h, "example")
			return st.State == pluginhost.StateRunning && st.Restarts == 1 && st.PID != first
		}, eventually, poll)
		require.Contains(t, lineWith(logs.String(), "panic: example plugin asked to panic"), "level=ERROR")
	})

	t.Run("run by hand it explains itself", func(t *testing.T) {
		out, err := exec.Command(bin).CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 1, exit.ExitCode())
		require.Contains(t, string(out), "This program is a hoard plugin")
	})

	t.Run("completions reach the plugin through Redis", func(t *testing.T) {
		redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
			engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
			opts, _ := externalOptions(t, bin, `{"tick_period":"1h"}`)
			opts.Redis, opts.Queues, opts.Events = b.Client, pluginhost.EngineQueues(engine), pluginhost.EngineEventLog(engine)
			// Only the handover to the restarted plugin may deliver the
			// completion made while it is down: a retry after
			// EventRetryAfter would pass too, just 30 s late (it did, when
			// the hook's broken connection beat the supervisor's notice of
			// the exit), and under load past eventually.
			opts.EventRetryAfter = time.Hour
			h := startHost(t, opts)
			ctx := t.Context()

			// The first tick queued an item into the project the host
			// created; a warrior claims it and reports it done.
			var item string
			require.Eventually(t, func() bool {
				claimed, err := engine.Claim(ctx, queues.ClaimRequest{Project: "example", Downloader: "tester", Count: 1})
				if err != nil || len(claimed.Items) == 0 {
					return false
				}
				item = claimed.Items[0].Name
				return true
			}, eventually, poll)
			require.True(t, strings.HasPrefix(item, "echo:tick-"), item)
			project, err := engine.Project(ctx, "example")
			require.NoError(t, err)
			require.True(t, project.ReclaimEnabled, "the host created the project with the item type's reclaim TTL")
			require.Equal(t, queues.Duration(time.Minute), project.ReclaimTTL)

			_, err = engine.Done(ctx, queues.DoneRequest{Project: "example", Downloader: "tester", Items: []string{item}})
			require.NoError(t, err)
			lastDone := func(item string) func() bool {
				return func() bool {
					var stats plugins.Stats
					err := h.Call(ctx, "example", func(ctx context.Context, p plugins.Plugin) error {
						var err error
						stats, err = p.Stats(ctx)
						return err
					})
					if err != nil {
						return false // down or restarting
					}
					for _, m := range stats.Metrics {
						if m.Name == "last_done" && m.Labels["item"] == item {
							return true
						}
					}
					return false
				}
			}
			require.Eventually(t, lastDone(item), eventually, poll)

			// kill -9 the plugin, and complete an item while it is down:
			// the completion waits in the project's event log and reaches
			// the restarted plugin.
			pid := statusOf(h, "example").PID
			require.NotZero(t, pid)
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			_, err = engine.Enqueue(ctx, "example", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "echo:while-down"}})
			require.NoError(t, err)
			claimed, err := engine.Claim(ctx, queues.ClaimRequest{Project: "example", Downloader: "tester", Count: 1})
			require.NoError(t, err)
			require.Len(t, claimed.Items, 1)
			_, err = engine.Done(ctx, queues.DoneRequest{Project: "example", Downloader: "tester", Items: []string{"echo:while-down"}})
			require.NoError(t, err)
			require.Eventually(t, lastDone("echo:while-down"), eventually, poll, "delivered to the restarted plugin")
			require.Eventually(t, func() bool {
				p, err := b.Client.XPending(ctx, queues.EventsKey("example"), "plugin:example").Result()
				return err == nil && p.Count == 0
			}, eventually, poll, "and acknowledged")
			require.NotEqual(t, pid, statusOf(h, "example").PID)
		})
	})
}

func lineWith(logs, needle string) string {
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, needle) {
			return line
		}
	}
	return ""
}
