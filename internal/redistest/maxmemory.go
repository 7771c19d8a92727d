package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// OverMaxmemory sets maxmemory to 1 byte (policy noeviction) on every node
// of rdb until the test ends, so every node holds more than its limit:
// Redis refuses every command that may grow memory (OOM), and every script
// not flagged no-writes. Load the functions a test calls before: FUNCTION
// LOAD is refused too.
func OverMaxmemory(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := t.Context()
	set := func(ctx context.Context, node *redis.Client) error {
		before, err := node.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			return err
		}
		t.Cleanup(func() {
			ctx := context.WithoutCancel(ctx)
			_ = node.ConfigSet(ctx, "maxmemory", before["maxmemory"]).Err()
			_ = node.ConfigSet(ctx, "maxmemory-policy", before["maxmemory-policy"]).Err()
		})
		if err := node.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			return err
		}
		return node.ConfigSet(ctx, "maxmemory", "1").Err()
	}
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachShard(ctx, set)
	} else {
		err = set(ctx, rdb.(*redis.Client))
	}
	require(t, err, "set maxmemory to 1 byte")
}
