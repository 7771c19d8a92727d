package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// redisLogger puts go-redis's own messages (reconnects, pool and cluster
// notices) into hoard's log, so --log-format json writes only JSON lines;
// go-redis otherwise prints raw lines to stderr.
type redisLogger struct{ logger *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.logger.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}
