package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/queues"
)

// syncBuffer collects a child's log while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestViewersCannotStarveWarriorsUnderALowDescriptorLimit: a built hoard
// serve runs under `ulimit -n 256` (HOARD_TEST_VIEWER_NOFILE sets another
// limit, to measure). Viewers are opened from one loopback address until
// refused (429 at the per-address cap), then from further addresses until
// refused (503 at the total cap derived from the limit), all held open;
// /healthz and a warrior's request still answer. Before, the cap was
// 20,000 whatever the limit, and the descriptors ran out first.
func TestViewersCannotStarveWarriorsUnderALowDescriptorLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("by design: binds 127.0.0.x source addresses, which only Linux routes to loopback by default")
	}
	client := redistest.Parallel(t).Client.(*redis.Client)
	nofile := uint64(256)
	if raw := os.Getenv("HOARD_TEST_VIEWER_NOFILE"); raw != "" {
		n, err := strconv.ParseUint(raw, 10, 64)
		require.NoError(t, err, "HOARD_TEST_VIEWER_NOFILE")
		nofile = n
	}
	wantTotal := leaderboard.ViewerCap(nofile)
	perAddress := leaderboard.DefaultMaxViewersPerAddress
	require.Positive(t, wantTotal)

	ctx := t.Context()
	engine := queues.NewEngine(client, queues.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	_, err := engine.CreateProject(ctx, "fdlimit", queues.SettingsPatch{})
	require.NoError(t, err)
	_, err = engine.Enqueue(ctx, "fdlimit", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "still-served"}})
	require.NoError(t, err)

	hoard := builtBinary(t, ".")
	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	base := fmt.Sprintf("127.0.0.1:%d", port)
	// ulimit -n sets the soft and the hard limit: hoard cannot raise it.
	serve := exec.Command("bash", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile), hoard, "serve",
		"--listen", base, "--data-dir", t.TempDir(), "--projects-file", "/nonexistent")
	serve.Env = append(os.Environ(), "HOARD_REDIS_URL=redis://"+client.Options().Addr, "HOARD_ADMIN_TOKEN=fdlimit-token")
	var log syncBuffer
	serve.Stderr = &log
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	require.Eventually(t, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond, "hoard serve answers /healthz: %s", &log)
	require.Contains(t, log.String(), fmt.Sprintf("soft_before=%d soft=%d hard=%d", nofile, nofile, nofile))
	require.Contains(t, log.String(), fmt.Sprintf("max_viewers=%d max_viewers_per_address=%d", wantTotal, perAddress))

	// dialFrom opens one viewer from a 127.0.0.x source address; it
	// returns the handshake's status.
	dialFrom := func(source net.IP) int {
		dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second,
			NetDialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: source}}).DialContext}
		conn, resp, err := dialer.DialContext(ctx, "ws://"+base+"/fdlimit/ws", nil)
		if err != nil {
			require.ErrorIs(t, err, websocket.ErrBadHandshake, "viewer from %s", source)
			return resp.StatusCode
		}
		t.Cleanup(func() { conn.Close() })
		return resp.StatusCode
	}
	start := time.Now()
	total, addresses, withViewers := 0, 0, 0
	var refusal int
	for refusal == 0 {
		addresses++
		require.LessOrEqual(t, addresses, wantTotal/perAddress+1, "the total cap never refused a viewer")
		source := net.IPv4(127, 0, byte(addresses/200), byte(1+addresses%200))
		fromThis := 0
		for {
			status := dialFrom(source)
			if status == http.StatusSwitchingProtocols {
				fromThis++
				total++
				continue
			}
			if status == http.StatusTooManyRequests {
				require.Equal(t, perAddress, fromThis, "refused at the per-address cap, from %s", source)
			} else {
				refusal = status
			}
			break
		}
		if fromThis > 0 {
			withViewers++
		}
		if addresses == 1 {
			require.Equal(t, perAddress, fromThis, "one address opens exactly the per-address cap")
		}
	}
	t.Logf("under ulimit -n %d: %d viewers from one address, %d from %d addresses in all (%s), then %d",
		nofile, perAddress, total, withViewers, time.Since(start).Round(time.Millisecond), refusal)
	require.Equal(t, http.StatusServiceUnavailable, refusal, "the total cap refuses with 503")
	require.Equal(t, wantTotal, total)

	// With every viewer slot taken and held, hoard still answers.
	resp, err := http.Get("http://" + base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+base+"/fdlimit/request",
		strings.NewReader(`{"downloader":"fdwarrior","api_version":"2","version":"20240101.01"}`))
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "still-served")
	require.NotContains(t, log.String(), "too many open files")
}
