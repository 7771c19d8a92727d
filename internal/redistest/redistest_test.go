package redistest_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

func TestTwoKeyScriptRunsOnEveryBackend(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		const script = `
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
return {redis.call('GET', KEYS[1]), redis.call('LLEN', KEYS[2])}`
		result, err := b.Client.Eval(ctx, script, []string{"{p}:a", "{p}:b"}, "hello").Slice()
		require.NoError(t, err)
		require.Equal(t, []any{"hello", int64(1)}, result)
	})
}

func TestClusterBackendIsARealCluster(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		if b.Name != "cluster" {
			t.Skip("by design: only the cluster backend is a cluster")
		}
		cluster, ok := b.Client.(*redis.ClusterClient)
		require.True(t, ok, "cluster backend client is %T", b.Client)
		info, err := cluster.ClusterInfo(t.Context()).Result()
		require.NoError(t, err)
		require.Contains(t, info, "cluster_state:ok")
		require.Contains(t, info, "cluster_known_nodes:3")

		var masters atomic.Int32 // ForEachMaster calls concurrently
		require.NoError(t, cluster.ForEachMaster(t.Context(), func(_ context.Context, _ *redis.Client) error {
			masters.Add(1)
			return nil
		}))
		require.EqualValues(t, 3, masters.Load())
	})
}

func TestEachSubtestStartsEmpty(t *testing.T) {
	// Keys in different slots: on the cluster they live on different masters,
	// and Flush must empty all of them.
	keys := []string{"alpha", "bravo", "charlie", "delta", "echo"}
	for range 2 {
		redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
			ctx := t.Context()
			for _, key := range keys {
				exists, err := b.Client.Exists(ctx, key).Result()
				require.NoError(t, err)
				require.Zero(t, exists, "key %q survived the flush", key)
				require.NoError(t, b.Client.Set(ctx, key, strings.ToUpper(key), 0).Err())
			}
		})
	}
}
