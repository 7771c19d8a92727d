package redismemory_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redismemory"
	"github.com/hoardproject/hoard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

// setMaxmemory sets maxmemory on every master of the backend and restores
// 0 (no limit, the test servers' setting) when the test ends.
func setMaxmemory(t *testing.T, b redistest.Backend, bytesFor func(used int64) int64) {
	t.Helper()
	ctx := context.Background()
	each := func(fn func(ctx context.Context, c *redis.Client) error) {
		switch c := b.Client.(type) {
		case *redis.ClusterClient:
			require.NoError(t, c.ForEachMaster(ctx, fn))
		case *redis.Client:
			require.NoError(t, fn(ctx, c))
		}
	}
	t.Cleanup(func() {
		each(func(ctx context.Context, c *redis.Client) error { return c.ConfigSet(ctx, "maxmemory", "0").Err() })
	})
	each(func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return err
				}
				return c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(bytesFor(n), 10)).Err()
			}
		}
		return nil
	})
}

func newMonitor(t *testing.T, b redistest.Backend) (*redismemory.Monitor, *clock.Fake, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	c := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m, err := redismemory.New(redismemory.Config{Client: b.Client, LogEvery: time.Minute, Now: c.Now,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	return m, c, logs
}

func TestNoLimitIsReported(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		m, c, logs := newMonitor(t, b)
		setMaxmemory(t, b, func(int64) int64 { return 0 })
		for range 5 {
			nodes, err := m.Check(context.Background())
			require.NoError(t, err)
			require.NotEmpty(t, nodes)
			for _, n := range nodes {
				require.Zero(t, n.Max)
				require.Positive(t, n.Used)
				require.False(t, n.Alarm)
			}
		}
		masters := 1
		if b.Name == "cluster" {
			masters = 3
		}
		require.Equal(t, masters, logs.lines("no memory limit"), "once per node, not once per check")
		c.Advance(time.Hour)
		_, err := m.Check(context.Background())
		require.NoError(t, err)
		require.Equal(t, masters, logs.lines("no memory limit"), "a setting is said once; the gauge keeps saying it")
		require.Equal(t, masters, countOf(t, m, "hoard_redis_memory_max_bytes"))
		require.Zero(t, sumOf(t, m, "hoard_redis_memory_max_bytes"), "0: no limit")
		require.Zero(t, sumOf(t, m, "hoard_redis_memory_alarm"))
	})
}

func TestAlarmBeforeTheLimit(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		m, c, logs := newMonitor(t, b)
		ctx := context.Background()

		// Well below the threshold: figures, no alarm.
		setMaxmemory(t, b, func(used int64) int64 { return used * 4 })
		nodes, err := m.Check(ctx)
		require.NoError(t, err)
		for _, n := range nodes {
			require.InDelta(t, 0.25, n.Ratio, 0.05)
			require.False(t, n.Alarm)
		}
		require.Zero(t, logs.lines("near its limit"))

		// At about 90% of maxmemory: the alarm, logged once per interval
		// however often it is checked, and on the gauges.
		setMaxmemory(t, b, func(used int64) int64 { return used * 10 / 9 })
		for range 10 {
			nodes, err = m.Check(ctx)
			require.NoError(t, err)
			for _, n := range nodes {
				require.True(t, n.Alarm, "%+v", n)
				require.Greater(t, n.Ratio, 0.8)
			}
		}
		require.Equal(t, len(nodes), logs.lines("near its limit"))
		c.Advance(30 * time.Second)
		_, err = m.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, len(nodes), logs.lines("near its limit"), "not within the interval")
		c.Advance(30 * time.Second)
		_, err = m.Check(ctx)
		require.NoError(t, err)
		require.Equal(t, 2*len(nodes), logs.lines("near its limit"))

		require.Equal(t, float64(len(nodes)), sumOf(t, m, "hoard_redis_memory_alarm"))
		require.Greater(t, sumOf(t, m, "hoard_redis_memory_ratio")/float64(len(nodes)), 0.8)
	})
}

// TestUnreadableRedisIsLoggedOncePerInterval: a Redis that cannot be
// read is counted on every check and logged once per interval.
func TestUnreadableRedisIsLoggedOncePerInterval(t *testing.T) {
	logs := &lockedBuffer{}
	c := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	m, err := redismemory.New(redismemory.Config{Client: client, LogEvery: time.Minute, Now: c.Now,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	for range 3 {
		_, err := m.Check(context.Background())
		require.Error(t, err)
	}
	require.Equal(t, 1, logs.lines("cannot read Redis memory"))
	c.Advance(time.Minute)
	_, err = m.Check(context.Background())
	require.Error(t, err)
	require.Equal(t, 2, logs.lines("cannot read Redis memory"))

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "hoard_redis_memory_check_errors_total" {
			require.Equal(t, 4.0, f.GetMetric()[0].GetCounter().GetValue())
			return
		}
	}
	t.Fatal("no hoard_redis_memory_check_errors_total")
}

func TestBadConfig(t *testing.T) {
	_, err := redismemory.New(redismemory.Config{})
	require.Error(t, err)
	_, err = redismemory.New(redismemory.Config{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Threshold: 1.5})
	require.ErrorContains(t, err, "between 0 and 1")
}

// gauges are the values of one gauge family of m, one per node.
func gauges(t *testing.T, m *redismemory.Monitor, name string) []float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	families, err := reg.Gather()
	require.NoError(t, err)
	var out []float64
	for _, f := range families {
		if f.GetName() == name {
			for _, metric := range f.GetMetric() {
				out = append(out, metric.GetGauge().GetValue())
			}
		}
	}
	return out
}

func sumOf(t *testing.T, m *redismemory.Monitor, name string) float64 {
	sum := 0.0
	for _, v := range gauges(t, m, name) {
		sum += v
	}
	return sum
}

func countOf(t *testing.T, m *redismemory.Monitor, name string) int { return len(gauges(t, m, name)) }
