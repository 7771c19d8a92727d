package main

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// libraryCount counts the libraries named name on every master.
func libraryCount(t *testing.T, rdb redis.UniversalClient, name string) int {
	t.Helper()
	var mu sync.Mutex
	n := 0
	count := func(ctx context.Context, node *redis.Client) error {
		libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result()
		mu.Lock()
		n += len(libs)
		mu.Unlock()
		return err
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(t.Context(), count))
	} else {
		require.NoError(t, count(t.Context(), rdb.(*redis.Client)))
	}
	return n
}

// hoard doctor --functions deletes an earlier build's library on every
// master and keeps the server's own.
func TestCLIDoctorFunctions(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		_, ts := cliServer(t, b)

		var own *luascript.Script
		for _, s := range luascript.Loaded() {
			if s.File() == "config_write.lua" {
				own = s
			}
		}
		require.NotNil(t, own)
		stale := luascript.FromSource("-- an earlier build's script\nreturn 1")
		require.NoError(t, stale.Load(t.Context(), b.Client))
		require.NoError(t, own.Load(t.Context(), b.Client))
		masters := libraryCount(t, b.Client, own.Name())
		require.Positive(t, masters)
		require.Equal(t, masters, libraryCount(t, b.Client, stale.Name()), "the control: loaded on every master")

		_, err := runCLI(t, ts.URL, "doctor", "--functions", "someproject")
		require.ErrorContains(t, err, "takes no project")
		out, err := runCLI(t, ts.URL, "doctor", "--functions")
		require.NoError(t, err, out)
		require.Contains(t, out, "deleted "+stale.Name())
		require.NotContains(t, out, own.Name())
		require.Zero(t, libraryCount(t, b.Client, stale.Name()), "deleted on every master")
		require.Equal(t, masters, libraryCount(t, b.Client, own.Name()), "the server's own library stays")

		out, err = runCLI(t, ts.URL, "doctor", "--functions")
		require.NoError(t, err, out)
		require.Contains(t, out, "0 function libraries deleted")
	})
}
