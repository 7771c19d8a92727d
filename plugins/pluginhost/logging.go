package pluginhost

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// A plugin process logs hclog JSON lines on its stderr (plugins.Serve);
// go-plugin parses them here and hands them to an hclog.Logger, which
// forwards to hoard's slog logger with the plugin's name. Lines that are
// not JSON (a panic's stack trace, a library printing to stderr) arrive
// too, at debug level, or error level once a panic starts.

// slogTrace is the slog level hclog's Trace maps to (as on the plugin side).
const slogTrace = slog.LevelDebug - 4

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slogTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// hclogAdapter is an hclog.Logger that writes to a slog.Logger: go-plugin's
// own messages and the plugin's forwarded log lines land in hoard's log.
type hclogAdapter struct {
	logger  *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(logger *slog.Logger) *hclogAdapter { return &hclogAdapter{logger: logger} }

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := slogLevel(level)
	if !a.logger.Enabled(context.Background(), lvl) {
		return
	}
	all := make([]any, 0, len(a.implied)+len(args))
	all = append(all, a.implied...)
	for i := 0; i+1 < len(args); i += 2 {
		// go-plugin appends the plugin's own timestamp; hoard's record
		// carries the time it was received, which is close enough.
		key := args[i]
		switch key {
		case "timestamp":
			continue
		case "plugin":
			// go-plugin's "plugin" is the binary's path; hoard's "plugin"
			// is the plugin's name, already on the logger.
			key = "binary"
		}
		all = append(all, key, args[i+1])
	}
	a.logger.Log(context.Background(), lvl, msg, all...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return a.logger.Enabled(context.Background(), slogTrace) }
func (a *hclogAdapter) IsDebug() bool { return a.logger.Enabled(context.Background(), slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool  { return a.logger.Enabled(context.Background(), slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool  { return a.logger.Enabled(context.Background(), slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool { return a.logger.Enabled(context.Background(), slog.LevelError) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any{}, a.implied...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

// Named keeps the slog logger as it is: the plugin's name is already on
// every record, and go-plugin only names sub-loggers after the binary.
func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name == "" {
		c.name = name
	} else {
		c.name += "." + name
	}
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

// SetLevel is ignored: hoard's handler decides what is logged.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level hoard's handler keeps, so go-plugin
// skips parsing lines that would be dropped anyway.
func (a *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case a.IsTrace():
		return hclog.Trace
	case a.IsDebug():
		return hclog.Debug
	case a.IsInfo():
		return hclog.Info
	case a.IsWarn():
		return hclog.Warn
	case a.IsError():
		return hclog.Error
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineLogger{logger: a.logger, level: slog.LevelInfo}
}

// lineLogger logs each line written to it: a plugin's stdout and late
// stderr, which go-plugin streams to the host over gRPC.
type lineLogger struct {
	logger *slog.Logger
	level  slog.Level
	attrs  []any

	mu      sync.Mutex
	partial []byte
}

// maxLogLine caps a buffered line so a plugin writing without newlines
// cannot grow the host's memory.
const maxLogLine = 64 << 10

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.emit(w.partial[:i])
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > maxLogLine {
		w.emit(w.partial)
		w.partial = nil
	}
	if len(w.partial) == 0 {
		w.partial = nil
	}
	return len(p), nil
}

func (w *lineLogger) emit(line []byte) {
	text := strings.TrimRight(string(line), "\r")
	if text == "" {
		return
	}
	w.logger.Log(context.Background(), w.level, text, w.attrs...)
}
