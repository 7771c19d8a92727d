package plugintest_test

import (
	"encoding/json"
	"testing"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
	"github.com/hoardproject/hoard/plugins/plugintest"
)

func TestExamplePluginConforms(t *testing.T) {
	plugintest.Run(t, exampleplugin.New, plugintest.Options{
		Config:      plugins.Config{Settings: json.RawMessage(`{"tick_period":"1m","listen":"127.0.0.1:0"}`)},
		BadSettings: json.RawMessage(`{"tick_period":"soon"}`),
	})
}
