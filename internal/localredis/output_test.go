package localredis

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// Lines redis-server 7.0.15 printed on one start and stop, and on a bad
// config file.
func TestOutputLevel(t *testing.T) {
	cases := []struct {
		line       string
		level      slog.Level
		overcommit bool
	}{
		{"6230:C 25 Nov 2026 10:18:53.401 # oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo", slog.LevelDebug, false},
		{"6230:C 25 Nov 2026 10:18:53.405 # Redis version=7.0.15, bits=64, commit=00000000, modified=0, pid=6230, just started", slog.LevelDebug, false},
		{"6230:C 25 Nov 2026 10:18:53.405 # Configuration loaded", slog.LevelDebug, false},
		{"6230:M 25 Nov 2026 10:18:53.406 * monotonic clock: POSIX clock_gettime", slog.LevelDebug, false},
		{"6230:M 25 Nov 2026 10:18:53.406 * Running mode=standalone, port=0.", slog.LevelDebug, false},
		{"6230:M 25 Nov 2026 10:18:53.406 # Server initialized", slog.LevelDebug, false},
		{"6230:M 25 Nov 2026 10:18:53.406 # WARNING Memory overcommit must be enabled! Without it, a background save or replication may fail under low memory condition.", slog.LevelDebug, true},
		{"6230:M 25 Nov 2026 10:18:53.408 * The server is now ready to accept connections at /tmp/rs.sock", slog.LevelDebug, false},
		{"6230:signal-handler (1795601935) Received SIGTERM scheduling shutdown...", slog.LevelDebug, false},
		{"6230:M 25 Nov 2026 10:18:55.415 # User requested shutdown...", slog.LevelDebug, false},
		{"6230:M 25 Nov 2026 10:18:55.415 # Redis is now ready to exit, bye bye...", slog.LevelDebug, false},
		// Real warnings and errors stay warnings.
		{"6230:M 25 Nov 2026 10:18:53.406 # WARNING: The TCP backlog setting of 511 cannot be enforced", slog.LevelWarn, false},
		{"6230:M 25 Nov 2026 10:20:01.002 # Background AOF rewrite terminated with error", slog.LevelWarn, false},
		{"*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***", slog.LevelWarn, false},
		{">>> 'port \"abc\"'", slog.LevelWarn, false},
		{"argument couldn't be parsed into an integer", slog.LevelWarn, false},
	}
	for _, c := range cases {
		level, overcommit := outputLevel(c.line)
		require.Equal(t, c.level, level, c.line)
		require.Equal(t, c.overcommit, overcommit, c.line)
	}
}
