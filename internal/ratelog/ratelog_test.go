package ratelog_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/ratelog"
)

type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// TestAFloodIsOneLinePerIntervalAndCountedExactly: 5,000 events of one
// kind from 50 goroutines within an interval write one line; every event
// is counted. After the interval the next event writes a line that says
// how many went unlogged; another kind has its own interval.
func TestAFloodIsOneLinePerIntervalAndCountedExactly(t *testing.T) {
	out := &lines{}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	l := ratelog.New(ratelog.Config{Logger: slog.New(slog.NewTextHandler(out, nil)), Interval: time.Minute, Clock: clk})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 100 {
				l.Log(ctx, slog.LevelError, "unavailable/503", "request failed", "path", "/p/request")
			}
		})
	}
	wg.Wait()
	require.Len(t, out.list(), 1)
	require.Contains(t, out.list()[0], "kind=unavailable/503 unlogged=0")
	require.Equal(t, uint64(5000), l.Total("unavailable/503"))

	clk.Advance(59 * time.Second)
	require.False(t, l.Log(ctx, slog.LevelError, "unavailable/503", "request failed"))
	require.True(t, l.Log(ctx, slog.LevelWarn, "websocket/503", "viewer refused"), "another kind is not held back")
	clk.Advance(time.Second)
	require.True(t, l.Log(ctx, slog.LevelError, "unavailable/503", "request failed"))
	got := out.list()
	require.Len(t, got, 3)
	require.Contains(t, got[2], "unlogged=5000", "4,999 of the flood and the one at 59 s")
	require.Equal(t, []ratelog.Count{{Kind: "unavailable/503", Total: 5002}, {Kind: "websocket/503", Total: 1}}, l.Counts())
}

// TestKindsAreBounded: kinds past MaxKinds are counted as "other".
func TestKindsAreBounded(t *testing.T) {
	l := ratelog.New(ratelog.Config{Logger: slog.New(slog.NewTextHandler(&lines{}, nil)), MaxKinds: 3})
	for i := range 10 {
		l.Log(context.Background(), slog.LevelInfo, fmt.Sprintf("k%d", i), "x")
	}
	require.Len(t, l.Counts(), 4, "three kinds and other")
	require.Equal(t, uint64(7), l.Total(ratelog.OtherKind))
}
