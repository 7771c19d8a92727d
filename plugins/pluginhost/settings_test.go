package pluginhost_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// The host asks a plugin for its settings schema without configuring it,
// in-process and from its binary alike, and says when there is none.
func TestDescribeSettings(t *testing.T) {
	builtins := map[string]plugins.Factory{
		"example": exampleplugin.New,
		"mute": func(ctx context.Context, logger *slog.Logger) (plugins.Plugin, error) {
			p, err := exampleplugin.New(ctx, logger)
			return struct{ plugins.Plugin }{p}, err // hides SettingsSchema
		},
	}
	bin := buildPlugin(t, "hoard-example")
	for name, spec := range map[string]pluginhost.Spec{
		"builtin": {Name: "example"},
		"binary":  {Name: "example", Path: bin},
	} {
		t.Run(name, func(t *testing.T) {
			schema, err := pluginhost.DescribeSettings(t.Context(), spec, builtins, nil, 30*time.Second)
			require.NoError(t, err)
			k, ok := schema.Lookup("tick_period")
			require.True(t, ok)
			require.JSONEq(t, `"1m"`, string(k.Default))
		})
	}
	_, err := pluginhost.DescribeSettings(t.Context(), pluginhost.Spec{Name: "mute"}, builtins, nil, time.Minute)
	require.ErrorIs(t, err, plugins.ErrNoSchema)
	_, err = pluginhost.DescribeSettings(t.Context(), pluginhost.Spec{Name: "nothing"}, builtins, nil, time.Minute)
	require.EqualError(t, err, `no builtin plugin "nothing"`)
	_, err = pluginhost.DescribeSettings(t.Context(), pluginhost.Spec{Name: "example", Path: "/nonexistent/plugin"}, builtins, nil, time.Minute)
	require.ErrorContains(t, err, "/nonexistent/plugin")
}
