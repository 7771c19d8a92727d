package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
)

// The same Factory behind both transports must behave the same. The gRPC
// transport runs here over go-plugin's in-memory test connection; the
// external tests run it as a real process.
func TestTransportsAgree(t *testing.T) {
	transports := map[string]func(t *testing.T, impl plugins.Plugin) plugins.Plugin{
		"in-process": func(_ *testing.T, impl plugins.Plugin) plugins.Plugin { return impl },
		"grpc": func(t *testing.T, impl plugins.Plugin) plugins.Plugin {
			// Closing the client shuts the server down (go-plugin's
			// controller); stopping it as well would race with that.
			client, _ := plugin.TestPluginGRPCConn(t, false, plugins.PluginSet(impl))
			t.Cleanup(func() { _ = client.Close() })
			raw, err := client.Dispense("plugin")
			require.NoError(t, err)
			p, ok := raw.(plugins.Plugin)
			require.True(t, ok, "dispensed %T", raw)
			return p
		},
	}
	for name, wrap := range transports {
		t.Run(name, func(t *testing.T) {
			impl, err := exampleplugin.New(t.Context(), slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			exercise(t, wrap(t, impl))
		})
	}
	t.Run("grpc: a plugin without a schema answers ErrNoSchema", func(t *testing.T) {
		impl, err := exampleplugin.New(t.Context(), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		p := transports["grpc"](t, withoutSchema{impl})
		_, err = p.(plugins.SettingsDescriber).SettingsSchema(t.Context())
		require.ErrorIs(t, err, plugins.ErrNoSchema)
	})
	t.Run("grpc errors keep their meaning", func(t *testing.T) {
		impl, err := exampleplugin.New(t.Context(), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		p := transports["grpc"](t, impl)
		expired, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel()
		_, err = p.Stats(expired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		canceled, cancel2 := context.WithCancel(t.Context())
		cancel2()
		_, err = p.Stats(canceled)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func exercise(t *testing.T, p plugins.Plugin) {
	ctx := t.Context()
	// The settings schema is asked before Configure, and crosses whole.
	describer, ok := p.(plugins.SettingsDescriber)
	require.True(t, ok, "%T describes no settings", p)
	schema, err := describer.SettingsSchema(ctx)
	require.NoError(t, err)
	require.NoError(t, schema.Validate())
	tick, ok := schema.Lookup("tick_period")
	require.True(t, ok, "tick_period in %+v", schema.Keys)
	require.JSONEq(t, `"1m"`, string(tick.Default))
	require.Equal(t, "the period of its heartbeat job", tick.Help)
	require.Len(t, schema.Keys, 7)

	require.ErrorContains(t, p.Configure(ctx, plugins.Config{Name: "example", Settings: json.RawMessage(`{"tick_period":"soon"}`)}),
		`settings: tick_period: time: invalid duration "soon"`, "the plugin's error message crosses the boundary")
	settings := json.RawMessage(`{"project":"echoes","tick_period":"90s","listen":"127.0.0.1:0"}`)
	require.NoError(t, p.Configure(ctx, plugins.Config{Name: "example", RedisURL: "redis://127.0.0.1:1", Settings: settings}))

	desc, err := p.Describe(ctx)
	require.NoError(t, err)
	require.NoError(t, desc.Validate())
	require.Equal(t, "1.0.0", desc.Version)
	require.Equal(t, []plugins.ItemType{{Name: "echo", Project: "echoes", ItemPrefix: "echo:", ReclaimTTL: time.Minute}}, desc.ItemTypes)
	require.Equal(t, []plugins.Job{{Name: "heartbeat", Period: 90 * time.Second}}, desc.Jobs)
	require.Len(t, desc.Listeners, 1)
	require.Equal(t, exampleplugin.Scopes, desc.AdminScopes, "the admin scopes cross whole")
	require.Equal(t, exampleplugin.Pages, desc.AdminPages, "the admin pages cross whole")
	require.Equal(t, "tcp", desc.Listeners[0].Network)

	at := time.UnixMilli(1_700_000_000_123)
	require.NoError(t, p.OnItemDone(ctx, plugins.ItemEvent{ItemType: "echo", Project: "echoes", Item: "echo:a", Downloader: "alice", At: at}))
	require.NoError(t, p.OnReclaim(ctx, plugins.ItemEvent{ItemType: "echo", Project: "echoes", Item: "echo:b"}))
	result, err := p.OnTick(ctx, plugins.Tick{Job: "heartbeat", Scheduled: at, At: at.Add(5 * time.Minute), Missed: 3})
	require.NoError(t, err)
	require.Equal(t, []plugins.QueueItem{{Project: "echoes", Item: fmt.Sprintf("echo:tick-%d", at.UnixMilli())}}, result.Enqueue)

	stats, err := p.Stats(ctx)
	require.NoError(t, err)
	want := map[string]float64{"items_done_total": 1, "reclaims_total": 1, "ticks_total": 1, "ticks_missed_total": 3}
	for name, value := range want {
		got, ok := metric(stats, name)
		require.True(t, ok, name)
		require.Equal(t, value, got, name)
	}
	for _, m := range stats.Metrics {
		if m.Name == "last_done" {
			require.Equal(t, plugins.Gauge, m.Kind)
			require.Equal(t, map[string]string{"item": "echo:a"}, m.Labels)
		}
	}

	// The plugin's own listener serves without the host in the way.
	resp, err := http.Get("http://" + desc.Listeners[0].Address + "/stats")
	require.NoError(t, err)
	var served plugins.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&served))
	resp.Body.Close()
	got, _ := metric(served, "items_done_total")
	require.Equal(t, 1.0, got)

	// A forwarded call crosses with its role, body and headers; the
	// plugin's answer comes back whole, and its failure as an error.
	reply, err := p.HandleRequest(ctx, plugins.Request{Method: http.MethodGet, Path: "/notes/a", Role: plugins.RolePublic})
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, reply.Status, "a public caller reaches no admin route")
	require.JSONEq(t, `{"error":"no route GET /notes/a","code":"not_found"}`, string(reply.Body))
	reply, err = p.HandleRequest(ctx, plugins.Request{Method: http.MethodPut, Path: "/notes/a", Role: plugins.RoleAdmin,
		Body: []byte(`{"text":""}`), Header: http.Header{"Content-Type": {"application/json"}}, Actor: "op from 127.0.0.1"})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, reply.Status)
	require.Equal(t, "application/json", reply.Header.Get("Content-Type"))
	_, err = p.HandleRequest(ctx, plugins.Request{Method: http.MethodGet, Path: "/notes/a", Role: plugins.RoleAdmin})
	require.ErrorContains(t, err, "127.0.0.1:1", "Redis is unreachable here: the plugin's error crosses")
	// A scoped caller crosses with its scopes: the plugin lets "reader"
	// read (and so reaches Redis) and refuses it a write itself.
	_, err = p.HandleRequest(ctx, plugins.Request{Method: http.MethodGet, Path: "/notes/a", Role: plugins.RoleScoped, Scopes: []string{"reader"}})
	require.ErrorContains(t, err, "127.0.0.1:1", "the reader's read got past the plugin's check")
	reply, err = p.HandleRequest(ctx, plugins.Request{Method: http.MethodPut, Path: "/notes/a", Role: plugins.RoleScoped, Scopes: []string{"reader"},
		Body: []byte(`{"text":"x"}`)})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, reply.Status, string(reply.Body))
	reply, err = p.HandleRequest(ctx, plugins.Request{Method: http.MethodGet, Path: "/notes/a", Role: plugins.RoleScoped})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, reply.Status, "no scope crossed, so none is held")

	require.NoError(t, p.Health(ctx))
	require.NoError(t, p.OnItemDone(ctx, plugins.ItemEvent{Project: "echoes", Item: exampleplugin.SickItem}))
	require.EqualError(t, p.Health(ctx), "example plugin was told it is sick")

	require.NoError(t, p.Close(ctx))
	_, err = http.Get("http://" + desc.Listeners[0].Address + "/stats")
	require.Error(t, err, "Close stopped the listener")
}

// withoutSchema hides the plugin's SettingsSchema, as a plugin built
// before the call has none.
type withoutSchema struct{ plugins.Plugin }
