package localredis_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/unittier"
)

// requireRedisServer skips the test when redis-server is missing, except on
// CI where a missing binary is a broken runner and must fail loudly.
func requireRedisServer(t *testing.T) {
	t.Helper()
	unittier.Skip(t, "it starts redis-servers")
	if _, err := exec.LookPath("redis-server"); err != nil {
		reason := "redis-server is not installed (" + err.Error() + "); `make test` installs it"
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func startServer(t *testing.T, cfg localredis.Config) *localredis.Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	server := localredis.New(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop() })
	return server
}

func clientFor(t *testing.T, server *localredis.Server) *redis.Client {
	t.Helper()
	options, err := redis.ParseURL(server.URL())
	require.NoError(t, err)
	require.Equal(t, server.Network(), options.Network)
	require.Equal(t, server.Address(), options.Addr)
	client := redis.NewClient(options)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestDataSurvivesRestartWithAOF(t *testing.T) {
	requireRedisServer(t)
	dataDir := t.TempDir()
	ctx := t.Context()

	first := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true})
	require.Equal(t, "unix", first.Network())
	require.Equal(t, filepath.Join(dataDir, "redis.sock"), first.Address())
	require.True(t, strings.HasPrefix(first.URL(), "unix:///"), first.URL())
	require.NoError(t, clientFor(t, first).Set(ctx, "survivor", "still here", 0).Err())
	require.NoError(t, first.Stop())
	require.NoError(t, first.Stop(), "a second Stop must be harmless")

	second := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true})
	value, err := clientFor(t, second).Get(ctx, "survivor").Result()
	require.NoError(t, err)
	require.Equal(t, "still here", value)

	info, err := clientFor(t, second).ConfigGet(ctx, "notify-keyspace-events").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []rune("xE"), []rune(info["notify-keyspace-events"]))
}

func TestServerCanBeRestartedAfterStop(t *testing.T) {
	requireRedisServer(t)
	server := startServer(t, localredis.Config{DataDir: t.TempDir()})
	require.NoError(t, server.Stop())
	require.NoError(t, server.Start(t.Context()))
	require.NoError(t, clientFor(t, server).Ping(t.Context()).Err())
}

func TestTCPPortListensOnLoopback(t *testing.T) {
	requireRedisServer(t)
	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	server := startServer(t, localredis.Config{DataDir: t.TempDir(), Port: port})
	require.Equal(t, "tcp", server.Network())
	require.Equal(t, "127.0.0.1:"+strconv.Itoa(port), server.Address())
	require.Equal(t, "redis://127.0.0.1:"+strconv.Itoa(port)+"/0", server.URL())
	require.NoError(t, clientFor(t, server).Ping(t.Context()).Err())
}

func TestTooLongSocketPathFallsBackToTCP(t *testing.T) {
	requireRedisServer(t)
	dataDir := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	server := startServer(t, localredis.Config{DataDir: dataDir})
	require.Equal(t, "tcp", server.Network())
	require.True(t, strings.HasPrefix(server.Address(), "127.0.0.1:"), server.Address())
	require.NoError(t, clientFor(t, server).Ping(t.Context()).Err())
}

func TestStopWithoutStartAndAfterFailedStart(t *testing.T) {
	server := localredis.New(localredis.Config{DataDir: t.TempDir(), Binary: "/nonexistent/redis-server"})
	require.NoError(t, server.Stop())
	require.Error(t, server.Start(t.Context()))
	require.NoError(t, server.Stop())
	require.NoError(t, server.Stop())
}

func TestMissingBinary(t *testing.T) {
	server := localredis.New(localredis.Config{DataDir: t.TempDir(), Binary: "/nonexistent/redis-server", Logger: testLogger()})
	err := server.Start(t.Context())
	require.ErrorIs(t, err, localredis.ErrRedisServerNotFound)
	require.Contains(t, err.Error(), "apt-get install --no-install-recommends redis-server")
	require.Contains(t, err.Error(), "HOARD_REDIS_URL")
}

func TestSecondServerOnSameDataDirIsRefused(t *testing.T) {
	requireRedisServer(t)
	dataDir := t.TempDir()
	first := startServer(t, localredis.Config{DataDir: dataDir})

	second := localredis.New(localredis.Config{DataDir: dataDir, LockWait: 300 * time.Millisecond, Logger: testLogger()})
	began := time.Now()
	err := second.Start(t.Context())
	require.Error(t, err)
	require.Contains(t, err.Error(), "in use by another hoard")
	require.Contains(t, err.Error(), "did not exit within 300ms")
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "it waited for the owner, boundedly")
	require.NoError(t, second.Stop())

	// The refused attempt must not have disturbed the first server.
	require.NoError(t, clientFor(t, first).Ping(t.Context()).Err())
}

func TestKilledChildIsRestarted(t *testing.T) {
	requireRedisServer(t)
	dataDir := t.TempDir()
	server := startServer(t, localredis.Config{DataDir: dataDir})
	client := clientFor(t, server)
	ctx := t.Context()

	pid := childPID(t, dataDir)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	require.Eventually(t, func() bool {
		pingCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if client.Ping(pingCtx).Err() != nil {
			return false
		}
		// Make sure we are talking to a new process, not the dying one.
		newPID, err := readPID(dataDir)
		return err == nil && newPID != pid
	}, 5*time.Second, 50*time.Millisecond)

	require.NoError(t, server.Stop())
}

func childPID(t *testing.T, dataDir string) int {
	t.Helper()
	pid, err := readPID(dataDir)
	require.NoError(t, err)
	return pid
}

func readPID(dataDir string) (int, error) {
	content, err := os.ReadFile(filepath.Join(dataDir, "redis.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(content)))
	if err != nil {
		return 0, errors.New("bad pidfile: " + err.Error())
	}
	return pid, nil
}

func TestStartFailureExplainsItself(t *testing.T) {
	requireRedisServer(t)
	server := localredis.New(localredis.Config{
		DataDir:   t.TempDir(),
		ExtraArgs: []string{"--no-such-directive", "yes"},
		Logger:    testLogger(),
	})
	err := server.Start(t.Context())
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), "exited during start-up")
	require.Contains(t, err.Error(), "no-such-directive", "the error should carry redis-server's own complaint")
	require.NoError(t, server.Stop())
}

func TestStalePidfileDoesNotBlockStart(t *testing.T) {
	requireRedisServer(t)
	dataDir := t.TempDir()
	// A pid that certainly belongs to no running process any more.
	finished := exec.Command("true")
	require.NoError(t, finished.Run())
	stalePID := strconv.Itoa(finished.ProcessState.Pid())
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "redis.pid"), []byte(stalePID+"\n"), 0o600))

	server := startServer(t, localredis.Config{DataDir: dataDir})
	require.NoError(t, clientFor(t, server).Ping(t.Context()).Err())
}

// TestFsyncPolicyReachesRedisServer: the AOF runs with the policy asked
// for, and with everysec when none is.
func TestFsyncPolicyReachesRedisServer(t *testing.T) {
	requireRedisServer(t)
	for _, tc := range []struct {
		asked localredis.FsyncPolicy
		want  string
	}{{"", "everysec"}, {localredis.FsyncAlways, "always"}, {localredis.FsyncNo, "no"}} {
		server := startServer(t, localredis.Config{DataDir: t.TempDir(), AppendOnly: true, AppendFsync: tc.asked})
		client := clientFor(t, server)
		appendOnly, err := client.ConfigGet(t.Context(), "appendonly").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"appendonly": "yes"}, appendOnly)
		fsync, err := client.ConfigGet(t.Context(), "appendfsync").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"appendfsync": tc.want}, fsync, "asked %q", tc.asked)
		// Redis's own rewrite trigger at the size that replays in the
		// default 5 s at the assumed 25 MB/s (hoard's own trigger, on the
		// incremental part, is aof.go's), and rewrites written as RDB.
		rewrite, err := client.ConfigGet(t.Context(), "auto-aof-rewrite-*").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"auto-aof-rewrite-min-size": "125000000", "auto-aof-rewrite-percentage": "100"}, rewrite)
		preamble, err := client.ConfigGet(t.Context(), "aof-use-rdb-preamble").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"aof-use-rdb-preamble": "yes"}, preamble)
		memory, err := client.ConfigGet(t.Context(), "maxmemory*").Result()
		require.NoError(t, err)
		require.Equal(t, "0", memory["maxmemory"], "no MaxMemory, no limit")
		require.Equal(t, "noeviction", memory["maxmemory-policy"], "queue data is never evicted")
		require.NoError(t, server.Stop())
	}
}

// TestMaxMemoryReachesRedisServer: the limit is redis-server's maxmemory,
// and past it a write is refused, nothing evicted.
func TestMaxMemoryReachesRedisServer(t *testing.T) {
	requireRedisServer(t)
	ctx := t.Context()
	server := startServer(t, localredis.Config{DataDir: t.TempDir(), MaxMemory: 4 << 20})
	client := clientFor(t, server)
	memory, err := client.ConfigGet(ctx, "maxmemory*").Result()
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(4<<20), memory["maxmemory"])
	require.Equal(t, "noeviction", memory["maxmemory-policy"])
	require.NoError(t, client.Set(ctx, "first", "kept", 0).Err())
	big := strings.Repeat("x", 1<<20)
	var err2 error
	for i := 0; i < 16 && err2 == nil; i++ {
		err2 = client.Set(ctx, "filler:"+strconv.Itoa(i), big, 0).Err()
	}
	require.ErrorContains(t, err2, "OOM", "a write past the limit is refused")
	value, err := client.Get(ctx, "first").Result()
	require.NoError(t, err)
	require.Equal(t, "kept", value, "nothing evicted")

	bad := localredis.New(localredis.Config{DataDir: t.TempDir(), MaxMemory: -1, Logger: testLogger()})
	require.ErrorContains(t, bad.Start(ctx), "maxmemory -1 is negative")
}

func TestUnknownFsyncPolicyIsRefused(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "never-created")
	server := localredis.New(localredis.Config{DataDir: dataDir, AppendOnly: true, AppendFsync: "sometimes", Logger: testLogger()})
	err := server.Start(t.Context())
	require.EqualError(t, err, `localredis: redis fsync policy "sometimes" is not one of everysec, always, no`)
	require.NoDirExists(t, dataDir, "a refused start creates nothing")
	require.Empty(t, server.URL())

	_, err = localredis.ParseFsyncPolicy("EVERYSEC")
	require.Error(t, err, "redis-server itself takes any case, but one spelling keeps logs and configs greppable")
	policy, err := localredis.ParseFsyncPolicy("always")
	require.NoError(t, err)
	require.Equal(t, localredis.FsyncAlways, policy)
}

// recordingHandler keeps every record, whatever its level.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) snapshot() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.records...)
}

// A start and a restart of the supervised redis-server put none of Redis's
// own chatter above debug in hoard's log, and Redis's overcommit warning,
// when the kernel gives it, becomes one line of hoard's for both starts.
func TestRedisChatterIsDebug(t *testing.T) {
	requireRedisServer(t)
	recorder := &recordingHandler{}
	server := startServer(t, localredis.Config{DataDir: t.TempDir(), AppendOnly: true, Logger: slog.New(recorder)})
	require.NoError(t, server.Stop())
	require.NoError(t, server.Start(t.Context()))
	require.NoError(t, server.Stop())

	var redisLines, readyLines, overcommitLines int
	for _, r := range recorder.snapshot() {
		if strings.Contains(r.Message, "overcommit") {
			overcommitLines++
			require.Equal(t, slog.LevelWarn, r.Level)
		}
		if r.Message != "redis-server output" {
			continue
		}
		redisLines++
		var line string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "redis" {
				line = a.Value.String()
			}
			return true
		})
		require.Equal(t, slog.LevelDebug, r.Level, "redis said: %s", line)
		if strings.Contains(line, "ready to accept connections") {
			readyLines++
		}
	}
	require.Equal(t, 2, readyLines, "each start's lines still reach the log, at debug")
	require.Greater(t, redisLines, 2*5)
	overcommit, err := os.ReadFile("/proc/sys/vm/overcommit_memory")
	if err == nil && strings.TrimSpace(string(overcommit)) == "0" {
		require.Equal(t, 1, overcommitLines, "Redis warns about vm.overcommit_memory=%s on each start", strings.TrimSpace(string(overcommit)))
	} else {
		require.Zero(t, overcommitLines)
	}
}
