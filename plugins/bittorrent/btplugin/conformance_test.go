package btplugin_test

import (
	"encoding/json"
	"testing"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/plugintest"
)

func TestTrackerConformsToThePluginContract(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		plugintest.Run(t, btplugin.New, plugintest.Options{
			Config:      plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(loopbackSettings)},
			BadSettings: json.RawMessage(`{"mode":"half-open"}`),
		})
	})
}
