package plugins

import (
	"io"
	"log/slog"
)

// A plugin process logs JSON lines in hclog's format on its stderr; go-plugin
// parses them on the host side and hands them to an hclog.Logger, which
// here forwards to hoard's slog logger with the plugin's name. Lines that
// are not JSON (a panic's stack trace, a library printing to stderr) arrive
// too, at debug level, or error level once a panic starts.

// hclogTimeFormat is the timestamp layout go-plugin parses.
const hclogTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// slogTrace is the slog level hclog's Trace maps to.
const slogTrace = slog.LevelDebug - 4

// newPluginSideLogger returns the logger a plugin process writes with: slog
// records as hclog JSON lines on w (the process' original stderr).
func newPluginSideLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slogTrace,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format(hclogTimeFormat))
			case slog.LevelKey:
				return slog.String("@level", hclogLevelName(a.Value.Any().(slog.Level)))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	}))
}

func hclogLevelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}
