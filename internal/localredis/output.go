package localredis

import (
	"log/slog"
	"regexp"
	"strings"
)

// redisLogLine is a line of Redis's own log:
// "<pid>:<role> <date> <time> <level> <message>", where the level is one of
// . (debug), - (verbose), * (notice) and # (warning).
var redisLogLine = regexp.MustCompile(`^\d+:[XCSM] \d{1,2} \w{3} \d{4} \d{2}:\d{2}:\d{2}\.\d{3} ([.*#-]) (.*)$`)

// routineWarnings are lines Redis 7.0 logs at its warning level although
// every start and stop prints them (later Redis logs most at notice).
var routineWarnings = []string{
	"oO0OoO0OoO0Oo Redis is starting",
	"Redis version=",
	"Configuration loaded",
	"Server initialized",
	"Warning: no config file specified",
	"User requested shutdown",
	"Received SIGTERM",
	"Received SIGINT",
	"Redis is now ready to exit",
}

const overcommitWarningPrefix = "WARNING Memory overcommit must be enabled"

// overcommitAdvice replaces Redis's paragraph about vm.overcommit_memory,
// which it repeats on every start, with one line hoard logs once.
const overcommitAdvice = "vm.overcommit_memory is 0, so a Redis background save or AOF rewrite can fail " +
	"when memory is short; to allow it: sysctl vm.overcommit_memory=1 (and the same in /etc/sysctl.conf)"

// outputLevel is the level a line of redis-server's output is logged at in
// hoard's log. Redis's start-up and shutdown chatter is debug: an operator
// reading hoard's log wants hoard's events. What Redis says at its warning
// level stays a warning, and so does anything that is not a log line at
// all (a config file error, a crash report), which is printed raw.
// overcommit reports Redis's overcommit warning, which the caller turns into
// one line of its own.
func outputLevel(line string) (level slog.Level, overcommit bool) {
	match := redisLogLine.FindStringSubmatch(line)
	if match == nil {
		// "<pid>:signal-handler (…) Received SIGTERM scheduling shutdown..."
		if pid, rest, ok := strings.Cut(line, ":"); ok && pid != "" && strings.Trim(pid, "0123456789") == "" &&
			strings.HasPrefix(rest, "signal-handler ") {
			return slog.LevelDebug, false
		}
		return slog.LevelWarn, false
	}
	redisLevel, message := match[1], match[2]
	if redisLevel != "#" {
		return slog.LevelDebug, false
	}
	if strings.HasPrefix(message, overcommitWarningPrefix) {
		return slog.LevelDebug, true
	}
	for _, routine := range routineWarnings {
		if strings.HasPrefix(message, routine) {
			return slog.LevelDebug, false
		}
	}
	return slog.LevelWarn, false
}
