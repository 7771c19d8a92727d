package pluginhost_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// settingsRecorder is the example plugin, remembering the settings of
// every Configure.
type settingsRecorder struct {
	plugins.Plugin
	mu   *sync.Mutex
	seen *[]string
}

func (r settingsRecorder) Configure(ctx context.Context, cfg plugins.Config) error {
	r.mu.Lock()
	*r.seen = append(*r.seen, string(cfg.Settings))
	r.mu.Unlock()
	return r.Plugin.Configure(ctx, cfg)
}

// Reconfigure restarts the plugin with the new settings at once, without
// back-off and without counting a failure.
func TestReconfigureRestartsWithNewSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []string
		factory := func(ctx context.Context, logger *slog.Logger) (plugins.Plugin, error) {
			p, err := exampleplugin.New(ctx, logger)
			return settingsRecorder{Plugin: p, mu: &mu, seen: &seen}, err
		}
		h := exampleHost(t, pluginhost.Options{
			Builtins: map[string]plugins.Factory{"example": factory},
			Plugins:  []pluginhost.Spec{{Name: "example", Settings: json.RawMessage(`{"v":1}`)}},
		})
		require.NoError(t, h.Start(t.Context()))
		defer h.Stop()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))

		require.NoError(t, h.Reconfigure("example", json.RawMessage(`{"v":2}`)))
		synctest.Wait()
		require.NoError(t, h.WaitRunning(t.Context(), "example"))
		mu.Lock()
		require.Equal(t, []string{`{"v":1}`, `{"v":2}`}, seen)
		mu.Unlock()
		st := statusOf(h, "example")
		require.Equal(t, pluginhost.StateRunning, st.State)
		require.Zero(t, st.Restarts, "a reconfigure is not a failure")

		require.ErrorIs(t, h.Reconfigure("nosuch", nil), pluginhost.ErrNoPlugin)
	})
}
