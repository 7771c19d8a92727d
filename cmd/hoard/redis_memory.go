package main

import (
	"context"
	"fmt"
	"log/slog"

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
