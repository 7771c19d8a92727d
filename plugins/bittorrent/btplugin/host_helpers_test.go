package btplugin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

// hostTracker runs the tracker with settings as a builtin in a real plugin
// host over the real queue engine, as hoard serve does, and returns the
// engine, the host and the tracker's first instance (a restart would be a
// failure of the test that asks).
func hostTracker(t *testing.T, b redistest.Backend, settings string) (*queues.Engine, *pluginhost.Host, *btplugin.Tracker) {
	t.Helper()
	ctx := t.Context()
	trackers := make(chan *btplugin.Tracker, 1)
	factory := func(ctx context.Context, l *slog.Logger) (plugins.Plugin, error) {
		p, err := btplugin.New(ctx, l)
		select {
		case trackers <- p.(*btplugin.Tracker):
		default:
		}
		return p, err
	}
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
	h, err := pluginhost.NewHost(pluginhost.Options{
		Plugins:  []pluginhost.Spec{{Name: "bittorrent", Settings: json.RawMessage(settings)}},
		Builtins: map[string]plugins.Factory{"bittorrent": factory},
		Redis:    b.Client, RedisURL: b.URL, Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine),
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)), EventBlock: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { _ = h.Stop() })
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, h.WaitRunning(waitCtx, "bittorrent"))
	return engine, h, <-trackers
}
