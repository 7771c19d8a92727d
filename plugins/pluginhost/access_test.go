package pluginhost_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

// TestAPluginsProjectIsClosedToThePublic: the project of an item type that
// is not public is refused to the public warrior API and kept off the
// public lists, on the frontend running the plugin and on one that runs
// none (it reads the owners from Redis); a worker token scoped to the
// plugin (or to the type) opens it, one for another plugin or another
// type does not; a type declared public is open to all.
func TestAPluginsProjectIsClosedToThePublic(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		engine := queues.NewEngine(b.Client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
		tokens, err := pluginhost.ParseWorkerTokens([]string{
			"example=site-worker-token-0001", "example:echo=echo-worker-token-01",
			"example:other=other-worker-token-1", "bittorrent=bt-worker-token-00001",
		})
		require.NoError(t, err)
		h := runningExample(t, b, engine, `{"project":"closed","tick_period":"24h"}`, tokens)
		other := runningExample(t, b, engine, "", tokens) // a frontend that runs no plugin

		for name, host := range map[string]*pluginhost.Host{"running": h, "other": other} {
			plugin, owned, allowed := host.WarriorAccess("closed", "")
			require.Equal(t, "example", plugin, name)
			require.True(t, owned, name)
			require.False(t, allowed, "%s: the public may not work a plugin's items", name)
			require.True(t, host.PrivateProject("closed"), name)
			for token, want := range map[string]bool{
				"site-worker-token-0001": true, "echo-worker-token-01": true,
				"other-worker-token-1": false, "bt-worker-token-00001": false, "site-worker-token-0002": false,
			} {
				_, _, allowed := host.WarriorAccess("closed", token)
				require.Equal(t, want, allowed, "%s: token %s", name, token)
			}
			_, owned, allowed = host.WarriorAccess("someone-elses", "")
			require.False(t, owned)
			require.True(t, allowed, "a project no plugin owns is the public's")
			require.False(t, host.PrivateProject("someone-elses"))
		}

		open := runningExample(t, b, engine, `{"project":"open-echoes","public":true,"tick_period":"24h"}`, tokens)
		_, owned, allowed := open.WarriorAccess("open-echoes", "")
		require.True(t, owned)
		require.True(t, allowed, "a type the plugin declares public is open to all")
		require.False(t, open.PrivateProject("open-echoes"))
	})
}

func TestWorkerTokensAreChecked(t *testing.T) {
	for _, bad := range []string{"example", "Bad=site-worker-token-0001", "example=short", "example:=site-worker-token-0001"} {
		_, err := pluginhost.ParseWorkerTokens([]string{bad})
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "site-worker-token-0001", "a token never reaches an error message")
	}
	got, err := pluginhost.ParseWorkerTokens([]string{"example:echo, other=site-worker-token-0001"})
	require.NoError(t, err)
	require.Equal(t, []pluginhost.WorkerToken{{Plugin: "example", Types: []string{"echo", "other"}, Token: "site-worker-token-0001"}}, got)
}
