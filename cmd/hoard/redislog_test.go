package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// go-redis's own messages come out as JSON lines under --log-format json.
func TestRedisLoggerWritesThroughSlog(t *testing.T) {
	var buf bytes.Buffer
	l := redisLogger{slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %s\n", 5, "refused")
	line := strings.TrimSpace(buf.String())
	require.NotContains(t, line, "\n")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
	require.Equal(t, "redis: connection pool: failed to dial after 5 attempts: refused", rec["msg"])
	require.Equal(t, "go-redis", rec["component"])
}
