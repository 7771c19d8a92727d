package localredis_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/childproc"
	"github.com/hoardproject/hoard/internal/localredis"
)

// ownerEnv makes the test binary an "owner": a stand-in for hoard serve
// that starts the data dir's redis-server with OutliveCrash, prints
// "ready <redis pid>" and waits to be killed.
const (
	ownerEnv      = "LOCALREDIS_TEST_OWNER"
	ownerGraceEnv = "LOCALREDIS_TEST_ORPHAN_GRACE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(ownerEnv); dir != "" {
		runOwner(dir)
		return
	}
	os.Exit(m.Run())
}

func runOwner(dataDir string) {
	grace, _ := time.ParseDuration(os.Getenv(ownerGraceEnv))
	server := localredis.New(localredis.Config{DataDir: dataDir, AppendOnly: true, OutliveCrash: true, OrphanGrace: grace,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err := server.Start(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready", server.PID())
	select {}
}

// startOwner runs an owner process on dataDir and returns it with the pid
// of the redis-server it started. The owner dies with the test binary.
func startOwner(t *testing.T, dataDir string, grace time.Duration) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+dataDir, ownerGraceEnv+"="+grace.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, childproc.Start(cmd, syscall.SIGKILL))
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	fields := strings.Fields(line)
	require.Len(t, fields, 2, "owner said %q", line)
	require.Equal(t, "ready", fields[0], "owner said %q", line)
	pid, err := strconv.Atoi(fields[1])
	require.NoError(t, err)
	require.Positive(t, pid)
	return cmd, pid
}

// killOwner SIGKILLs the owner and waits until it is gone.
func killOwner(t *testing.T, owner *exec.Cmd) {
	t.Helper()
	require.NoError(t, owner.Process.Signal(syscall.SIGKILL))
	_ = owner.Wait()
}

// redisAlive: pid is a live (not zombie) process.
func redisAlive(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && !strings.Contains(string(status), "State:\tZ")
}

func unixClient(t *testing.T, dataDir string) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(dataDir, "redis.sock")})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func requireLinux(t *testing.T) {
	t.Helper()
	requireRedisServer(t)
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("by design: adoption relies on Linux's parent-death signal and /proc")
	}
}

// TestNextStartAdoptsTheRedisServerOfAKilledOwner: after a SIGKILL of the
// hoard that supervises it, the redis-server keeps running, and the next
// Start adopts it (the same pid, its data, no replay) within a second,
// applies its own settings, and a clean Stop then stops it.
func TestNextStartAdoptsTheRedisServerOfAKilledOwner(t *testing.T) {
	requireLinux(t)
	dataDir := t.TempDir()
	owner, redisPID := startOwner(t, dataDir, time.Minute)
	ctx := t.Context()
	require.NoError(t, unixClient(t, dataDir).Set(ctx, "survivor", "kept in memory", 0).Err())

	killOwner(t, owner)
	require.True(t, redisAlive(redisPID), "redis-server %d outlived its owner", redisPID)

	began := time.Now()
	server := localredis.New(localredis.Config{DataDir: dataDir, AppendOnly: true, OutliveCrash: true,
		MaxMemory: 64 << 20, Logger: testLogger()})
	require.NoError(t, server.Start(ctx))
	t.Cleanup(func() { _ = server.Stop() })
	adoptedIn := time.Since(began)
	t.Logf("adopted redis-server %d in %s", redisPID, adoptedIn)
	require.Less(t, adoptedIn, time.Second)
	require.Equal(t, redisPID, server.PID(), "the same redis-server, not a new one")
	client := clientFor(t, server)
	value, err := client.Get(ctx, "survivor").Result()
	require.NoError(t, err)
	require.Equal(t, "kept in memory", value)
	memory, err := client.ConfigGet(ctx, "maxmemory*").Result()
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(64<<20), memory["maxmemory"], "the adopter's settings apply")
	require.Equal(t, "noeviction", memory["maxmemory-policy"])

	// Adopted, it is supervised like a child: killed, it is restarted.
	require.NoError(t, syscall.Kill(redisPID, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		pid := server.PID()
		return pid != redisPID && pid > 0 && client.Get(ctx, "survivor").Val() == "kept in memory"
	}, 10*time.Second, 20*time.Millisecond, "restarted from its AOF")
	restarted := server.PID()

	require.NoError(t, server.Stop())
	require.Eventually(t, func() bool { return !redisAlive(restarted) }, 5*time.Second, 10*time.Millisecond, "a clean stop stops it")
}

// TestOrphanStopsItselfWhenNotAdopted: a redis-server whose owner was
// killed and that no hoard adopts stops by itself after the orphan grace,
// the clean way (its data is in the AOF for the next start).
func TestOrphanStopsItselfWhenNotAdopted(t *testing.T) {
	requireLinux(t)
	dataDir := t.TempDir()
	const grace = 1500 * time.Millisecond
	owner, redisPID := startOwner(t, dataDir, grace)
	ctx := t.Context()
	require.NoError(t, unixClient(t, dataDir).Set(ctx, "survivor", "in the AOF", 0).Err())

	killOwner(t, owner)
	killedAt := time.Now()
	time.Sleep(grace / 2)
	require.True(t, redisAlive(redisPID), "within the grace it waits for adoption")
	require.Eventually(t, func() bool { return !redisAlive(redisPID) }, grace+5*time.Second, 20*time.Millisecond,
		"no hoard adopted it: it stopped itself")
	t.Logf("the orphan stopped %s after its owner's kill (grace %s)", time.Since(killedAt).Round(time.Millisecond), grace)

	server := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true, OutliveCrash: true})
	require.NotEqual(t, redisPID, server.PID())
	value, err := clientFor(t, server).Get(ctx, "survivor").Result()
	require.NoError(t, err)
	require.Equal(t, "in the AOF", value)
}

// TestStartWaitsForTheOwnerStillExiting: a Start while the data dir's
// previous owner still holds it (a hoard shutting down) waits, and starts
// once the owner lets go; with an owner that never does, it fails after
// LockWait, saying so.
func TestStartWaitsForTheOwnerStillExiting(t *testing.T) {
	requireLinux(t)
	dataDir := t.TempDir()
	// The previous owner, on its way out: the owner lock held (by another
	// open file, as another process would) for 1 s.
	holder, err := os.OpenFile(filepath.Join(dataDir, "hoard.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(holder.Fd()), syscall.LOCK_EX))
	released := time.AfterFunc(time.Second, func() { holder.Close() })
	t.Cleanup(func() { released.Stop(); holder.Close() })

	short := localredis.New(localredis.Config{DataDir: dataDir, LockWait: 200 * time.Millisecond, Logger: testLogger()})
	err = short.Start(t.Context())
	require.ErrorContains(t, err, "did not exit within 200ms")

	began := time.Now()
	server := startServer(t, localredis.Config{DataDir: dataDir})
	waited := time.Since(began)
	t.Logf("Start waited %s for the previous owner", waited)
	require.Greater(t, waited, 300*time.Millisecond, "it waited for the owner to let go")
	require.NoError(t, clientFor(t, server).Ping(t.Context()).Err())
}

// TestStartWaitsForTheRedisServerStillExiting: the redis-server a killed
// owner left is on its way out (SIGTERMed while busy, so it neither
// answers nor exits for a while) when the next Start comes: the Start
// waits for it and succeeds, on the same data.
func TestStartWaitsForTheRedisServerStillExiting(t *testing.T) {
	requireLinux(t)
	dataDir := t.TempDir()
	owner, redisPID := startOwner(t, dataDir, time.Minute)
	ctx := t.Context()
	client := unixClient(t, dataDir)
	require.NoError(t, client.Set(ctx, "survivor", "flushed on exit", 0).Err())
	killOwner(t, owner)

	// Busy for 1.5 s, then it handles the SIGTERM: fsync and exit.
	busy := make(chan error, 1)
	go func() {
		busyClient := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(dataDir, "redis.sock"), ReadTimeout: 10 * time.Second})
		defer busyClient.Close()
		busy <- busyClient.Eval(ctx, `local t = redis.call('TIME'); local stop = t[1] * 1000000 + t[2] + ARGV[1]
while true do t = redis.call('TIME'); if t[1] * 1000000 + t[2] >= stop then return 1 end end`, nil, 1500000).Err()
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, syscall.Kill(redisPID, syscall.SIGTERM))

	began := time.Now()
	server := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true, OutliveCrash: true})
	t.Logf("Start returned after %s", time.Since(began).Round(time.Millisecond))
	require.NoError(t, <-busy)
	require.Eventually(t, func() bool { return !redisAlive(redisPID) }, 10*time.Second, 10*time.Millisecond, "the old redis-server exited")
	require.Eventually(t, func() bool {
		value, err := clientFor(t, server).Get(ctx, "survivor").Result()
		return err == nil && value == "flushed on exit" && server.PID() != redisPID && server.PID() > 0
	}, 15*time.Second, 20*time.Millisecond, "served by a new redis-server with the old one's data")
}
