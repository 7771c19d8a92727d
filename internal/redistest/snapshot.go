package redistest

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Snapshot is every key of a backend with its DUMP and whether it has a
// TTL (every master's, on a cluster), so a test can show that a refused
// input changed nothing: take one before, one after, require them equal.
func Snapshot(ctx context.Context, rdb redis.UniversalClient) (map[string]string, error) {
	out := map[string]string{}
	var mu sync.Mutex
	read := func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				v, err := node.Dump(ctx, k).Result()
				if err != nil {
					return fmt.Errorf("DUMP %s: %w", k, err)
				}
				ttl, err := node.PTTL(ctx, k).Result()
				if err != nil {
					return fmt.Errorf("PTTL %s: %w", k, err)
				}
				mu.Lock()
				out[k] = fmt.Sprintf("%x ttl=%v", v, ttl > 0)
				mu.Unlock()
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err := cluster.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error { return read(ctx, master) })
		return out, err
	}
	return out, read(ctx, rdb)
}
