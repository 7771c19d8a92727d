package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/unittier"
)

// TestRedisMemoryOnMetrics: hoard serve on an external Redis with a
// maxmemory, and an alarm threshold under the share it uses, puts the
// figures and the alarm on its own /metrics; a threshold that is not a
// share is refused. (The alarm's logging is internal/redismemory's test.)
func TestRedisMemoryOnMetrics(t *testing.T) {
	var single redistest.Backend
	for _, b := range redistest.Require(t) {
		if b.Name == "single" {
			single = b
		}
	}
	if single.Client == nil {
		t.Skip("no single-node backend")
	}
	ctx := context.Background()
	client := single.Client.(*redis.Client)
	info := client.Info(ctx, "memory").Val()
	used, err := strconv.ParseInt(regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(info)[1], 10, 64)
	require.NoError(t, err)
	// The limit leaves room for what serve adds (a few MB of clients and
	// scripts would cross it and make Redis refuse writes): the alarm
	// threshold is put under the share in use instead.
	require.NoError(t, client.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*4, 10)).Err())
	t.Cleanup(func() { _ = client.ConfigSet(context.Background(), "maxmemory", "0").Err() })

	body := serveMetrics(t, "--redis-url", single.URL, "--redis-memory-alarm", "0.01")
	node := regexp.QuoteMeta(client.Options().Addr)
	value := func(name string) float64 { return metricValue(t, body, name, node) }
	require.Equal(t, float64(used*4), value("hoard_redis_memory_max_bytes"))
	require.Equal(t, 1.0, value("hoard_redis_memory_alarm"))
	require.InDelta(t, value("hoard_redis_memory_used_bytes")/float64(used*4), value("hoard_redis_memory_ratio"), 1e-9)

	_, err = runCLI(t, "", "serve", "--redis-url", single.URL, "--redis-memory-alarm", "1.5", "--data-dir", t.TempDir())
	require.ErrorContains(t, err, "--redis-memory-alarm / HOARD_REDIS_MEMORY_ALARM")
}

// TestRedisMemoryOfTheSupervisedRedis: with no Redis URL, the figures are
// the supervised redis-server's, whose maxmemory is the one asked for
// (--redis-maxmemory), and 0 (no limit) when asked for none.
func TestRedisMemoryOfTheSupervisedRedis(t *testing.T) {
	unittier.Skip(t, "it runs hoard serve with its own redis-server")
	t.Setenv("HOARD_REDIS_URL", "")
	body := serveMetrics(t, "--redis-maxmemory", "256mb")
	require.Equal(t, float64(256<<20), metricValue(t, body, "hoard_redis_memory_max_bytes", `[^"]+`))
	require.Positive(t, metricValue(t, body, "hoard_redis_memory_used_bytes", `[^"]+`))
	require.Equal(t, 0.0, metricValue(t, body, "hoard_redis_memory_alarm", `[^"]+`))

	body = serveMetrics(t, "--redis-maxmemory", "0")
	require.Equal(t, 0.0, metricValue(t, body, "hoard_redis_memory_max_bytes", `[^"]+`))
	require.Positive(t, metricValue(t, body, "hoard_redis_memory_used_bytes", `[^"]+`))
	require.Equal(t, 0.0, metricValue(t, body, "hoard_redis_memory_alarm", `[^"]+`))
}

// serveMetrics runs hoard serve with args until the test ends and returns
// its /metrics once the memory figures are in.
func serveMetrics(t *testing.T, args ...string) string {
	t.Helper()
	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The directories are made before the cleanup below is registered, so
	// they are removed after hoard has stopped, not under its running
	// redis-server (cleanups run last registered first).
	dataDir, projectsFile := filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "none.json")
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := rootCommand()
		cmd.SetArgs(append([]string{"serve", "--listen", addr, "--data-dir", dataDir,
			"--projects-file", projectsFile, "--log-level", "error"}, args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		done <- cmd.ExecuteContext(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		body = string(raw)
		return strings.Contains(body, "hoard_redis_memory_ratio{")
	}, 60*time.Second, 50*time.Millisecond)
	return body
}

// metricValue is the value of name{node=~node} in a /metrics body.
func metricValue(t *testing.T, body, name, node string) float64 {
	t.Helper()
	m := regexp.MustCompile(name + `\{node="` + node + `"\} (\S+)`).FindStringSubmatch(body)
	require.NotNil(t, m, name)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}
