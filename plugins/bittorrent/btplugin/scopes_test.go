package btplugin_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
)

// TestAdminScopes: the scopes the plugin declares are valid, the site's
// opens torrents, users and reading the outbox, and neither opens the
// client whitelist's changes or the reaper's.
func TestAdminScopes(t *testing.T) {
	require.NoError(t, plugins.Description{AdminScopes: btplugin.AdminScopes}.Validate())
	scope := map[string]plugins.AdminScope{}
	for _, s := range btplugin.AdminScopes {
		scope[s.Name] = s
	}
	site, viewer := scope["site"], scope["viewer"]
	require.True(t, site.Allows("PUT", "/torrents/"+"ab"))
	require.True(t, site.Allows("DELETE", "/users/"+"passkey"))
	require.True(t, site.Allows("GET", "/outbox/events"))
	require.True(t, site.Allows("POST", "/outbox/ack"))
	require.True(t, site.Allows("PUT", "/credit/windows/holiday"))
	require.False(t, site.Allows("POST", "/outbox/dead/retry"))
	require.False(t, site.Allows("PUT", "/clients/qB"))
	require.False(t, site.Allows("POST", "/reaper/extend"))
	require.True(t, viewer.Allows("GET", "/reaper/counts"))
	require.False(t, viewer.Allows("PUT", "/torrents/ab"))
}
