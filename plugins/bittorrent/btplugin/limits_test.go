package btplugin_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
)

func TestLimitSettingsAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p, err := btpluginNew()
		require.NoError(t, err)
		require.NoError(t, configure(p, b, `{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_rate":-1,"passkey_misses":-1}}`))
		for _, c := range []struct{ settings, want string }{
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_rate":-2}}`, "limits.announce_rate"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_burst":-1}}`, "AnnounceBurst"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"passkey_misses":-3}}`, "limits.passkey_misses"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"passkey_miss_window":"soon"}}`, "passkey_miss_window"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"addresses":-1}}`, "MaxAddresses"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"annouce_rate":1}}`, "annouce_rate"},
			{`{"http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"max_peers_per_torrent":-2}}`, "limits.max_peers_per_torrent"},
		} {
			err := configure(p, b, c.settings)
			require.ErrorContains(t, err, c.want)
			require.NoError(t, p.Health(t.Context()), "still configured")
		}
		require.NoError(t, p.Close(t.Context()))
	})
}
