package pluginhost_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

func TestMain(m *testing.M) { redistest.RunMain(m, removeBuiltPlugins) }

// newFakeClock is hoard's fake clock, which only moves when told to.
func newFakeClock(start time.Time) *clock.Fake { return clock.NewFake(start) }

// recordingQueues is a Queues that remembers what it was asked.
type recordingQueues struct {
	mu       sync.Mutex
	projects map[string]plugins.ProjectSpec
	items    map[string][]string
	scored   map[string][]plugins.ScoredItem
}

func newRecordingQueues() *recordingQueues {
	return &recordingQueues{projects: map[string]plugins.ProjectSpec{}, items: map[string][]string{}, scored: map[string][]plugins.ScoredItem{}}
}

func (q *recordingQueues) EnsureProject(_ context.Context, slug string, spec plugins.ProjectSpec) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.projects[slug] = spec
	return nil
}

func (q *recordingQueues) EnqueueScored(_ context.Context, slug string, items []plugins.ScoredItem) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.scored[slug] = append(q.scored[slug], items...)
	return len(items), nil
}

func (q *recordingQueues) Enqueue(_ context.Context, slug string, items []string) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items[slug] = append(q.items[slug], items...)
	return len(items), nil
}

func (q *recordingQueues) queued(slug string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.items[slug]...)
}

func (q *recordingQueues) ensured(slug string) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	spec, ok := q.projects[slug]
	return spec.ReclaimTTL, ok
}

// logBuffer collects log records for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	t.Helper()
	buf := &logBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// metric finds a metric's value in a plugin's stats.
func metric(stats plugins.Stats, name string) (float64, bool) {
	for _, m := range stats.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// liveStats asks the plugin for its stats now (not the cached copy).
func liveStats(t *testing.T, h *pluginhost.Host, name string) plugins.Stats {
	t.Helper()
	var stats plugins.Stats
	err := h.Call(context.Background(), name, func(ctx context.Context, p plugins.Plugin) error {
		var err error
		stats, err = p.Stats(ctx)
		return err
	})
	require.NoError(t, err)
	return stats
}

func statusOf(h *pluginhost.Host, name string) pluginhost.Status {
	for _, st := range h.Status() {
		if st.Name == name {
			return st
		}
	}
	return pluginhost.Status{}
}

// The test plugin binaries, built once for the package: three tests ran
// the same link each.
var builtPlugins struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
}

// buildPlugin builds one of the test plugin binaries the first time a
// test asks for it and returns its path.
func buildPlugin(t *testing.T, cmd string) string {
	t.Helper()
	builtPlugins.mu.Lock()
	defer builtPlugins.mu.Unlock()
	if bin, ok := builtPlugins.bins[cmd]; ok {
		return bin
	}
	if builtPlugins.dir == "" {
		dir, err := os.MkdirTemp("", "hoard-pluginhost-test-bin-")
		require.NoError(t, err)
		builtPlugins.dir, builtPlugins.bins = dir, map[string]string{}
	}
	out := filepath.Join(builtPlugins.dir, cmd)
	build := exec.Command("go", "build", "-o", out, "../internal/exampleplugin/cmd/"+cmd)
	output, err := build.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", cmd, output)
	builtPlugins.bins[cmd] = out
	return out
}

func removeBuiltPlugins() {
	if builtPlugins.dir != "" {
		_ = os.RemoveAll(builtPlugins.dir)
	}
}

func contains(haystack, needle string) bool { return strings.Contains(haystack, needle) }
