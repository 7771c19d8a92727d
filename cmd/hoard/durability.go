package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/localredis"
)

// logRedisDurability says at start how durable an external Redis's
// acknowledged writes are (docs/durability.md), so the window an operator
// accepts is in the log, not a guess. Hosted Redis often refuses CONFIG;
// then it says it cannot tell, and nothing else changes. asked, when not
// empty, is the policy the operator asked hoard for, which an external
// Redis does not take from hoard: a difference is a warning.
func logRedisDurability(ctx context.Context, rdb redis.UniversalClient, asked localredis.FsyncPolicy, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	report := func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		appendOnly, err := configValue(ctx, node, "appendonly")
		if err == nil {
			var fsync string
			if fsync, err = configValue(ctx, node, "appendfsync"); err == nil {
				logNodeDurability(logger, addr, appendOnly, fsync, asked)
				return nil
			}
		}
		logger.Info("cannot read the Redis's AOF settings (CONFIG GET refused?); its operator's appendonly and appendfsync decide what a Redis crash loses",
			"redis", addr, "error", err)
		return nil
	}
	switch client := rdb.(type) {
	case *redis.ClusterClient:
		_ = client.ForEachMaster(ctx, report)
	case *redis.Client:
		_ = report(ctx, client)
	}
}

func configValue(ctx context.Context, node *redis.Client, name string) (string, error) {
	values, err := node.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	return values[name], nil
}

func logNodeDurability(logger *slog.Logger, addr, appendOnly, fsync string, asked localredis.FsyncPolicy) {
	switch {
	case appendOnly != "yes":
		logger.Warn("the Redis has no AOF (appendonly no): a crash of Redis loses every write since its last RDB snapshot, acknowledged dones included; set appendonly yes on it",
			"redis", addr, "appendonly", appendOnly)
	case asked != "" && fsync != string(asked):
		logger.Warn("the Redis's appendfsync differs from --redis-fsync / HOARD_REDIS_FSYNC, which only the supervised redis-server takes; set it on the Redis (CONFIG SET appendfsync and its config file)",
			"redis", addr, "appendfsync", fsync, "asked", asked)
	default:
		logger.Info("redis durability", "redis", addr, "appendonly", appendOnly, "appendfsync", fsync)
	}
}
