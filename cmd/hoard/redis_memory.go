package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/redismemory"
)

// startMemoryMonitor watches the Redis's memory against its maxmemory
// (the supervised one's or an external one's) until ctx ends: gauges on
// /metrics, and an alarm in the log at most once per interval while a
// node is at threshold or above (docs/limits-and-memory.md).
func startMemoryMonitor(ctx context.Context, rdb redis.UniversalClient, threshold float64, logger *slog.Logger) (*redismemory.Monitor, error) {
	m, err := redismemory.New(redismemory.Config{Client: rdb, Threshold: threshold, Logger: logger.With("component", "redis-memory")})
	if err != nil {
		return nil, fmt.Errorf("--redis-memory-alarm / HOARD_REDIS_MEMORY_ALARM: %w", err)
	}
	go m.Run(ctx)
	return m, nil
}

// envFloat is the number in the environment variable, or def when unset;
// a malformed value is recorded in *errp.
func envFloat(name string, def float64, errp *error) float64 {
	raw := envOr(name, "")
	if raw == "" {
		return def
	}
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil && *errp == nil {
		*errp = fmt.Errorf("$%s=%q is not a number", name, raw)
	}
	if err != nil {
		return def
	}
	return v
}
