package localredis_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/localredis"
)

// fillAOF grows the AOF past size bytes with small writes wrapped in
// MULTI/EXEC, as Redis logs a script's effects (four SETs per script, 40
// bytes each, to 2,000 keys that are overwritten again and again: the AOF
// grows, the dataset does not).
//
// A redis-server that dies during the fill (CI once saw LOADING mid-fill:
// it had died and been restarted) fails the test with what killed it: the
// supervisor's log and Redis's last lines, and the data dir's free space
// (appendfsync always makes Redis exit on a failed AOF write, such as a
// full disk).
func fillAOF(ctx context.Context, t *testing.T, client *redis.Client, recorder *recordingHandler, dataDir string, size int64) {
	t.Helper()
	// The AOF, the replays' copies and what else the suite writes beside
	// it: a disk without room for them fails the fill as above (as CI's
	// once did) and says nothing about hoard.
	if free, ok := freeBytes(dataDir); ok && free < 4*size {
		t.Skipf("skipped: a %d MB AOF needs %d MB free beside it; %s", size>>20, 4*size>>20, freeSpace(dataDir))
	}
	value := strings.Repeat("f", 40)
	for round := 0; ; round++ {
		pipe := client.Pipeline()
		for i := range 1000 {
			pipe.Eval(ctx, "for i = 1, 4 do redis.call('SET', 'throwaway:' .. ARGV[2] .. ':' .. i, ARGV[1]) end return 1", nil, value, i%500)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("filling the AOF (round %d): %v\n%s, %s", round, err, freeSpace(dataDir), logTail(recorder, 30))
		}
		if round%20 == 0 && aofSize(ctx, t, client) >= size {
			return
		}
	}
}

func aofSize(ctx context.Context, t *testing.T, client *redis.Client) int64 {
	t.Helper()
	info, err := client.Info(ctx, "persistence").Result()
	require.NoError(t, err)
	n, ok := aofSizeIn(info)
	require.True(t, ok, info)
	return n
}

var aofCurrentSize = regexp.MustCompile(`aof_current_size:(\d+)`)

// aofSizeIn reads aof_current_size from INFO persistence's text.
func aofSizeIn(info string) (int64, bool) {
	match := aofCurrentSize.FindStringSubmatch(info)
	if match == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(match[1], 10, 64)
	return n, err == nil
}

// TestKilledRedisServesAgainWithinItsReplayTime: a SIGKILL of the
// supervised redis-server with a large AOF (50 MB; 500 MB with
// HOARD_TEST_LONG=1). The supervisor restarts it at once, waits for the
// whole replay (logging its progress) and the first request is answered
// within the replay time Redis itself reports plus 1 s; every write
// acknowledged before the kill is there (appendfsync always: an
// acknowledged write is on disk).
func TestKilledRedisServesAgainWithinItsReplayTime(t *testing.T) {
	requireRedisServer(t)
	size := int64(50 << 20)
	if os.Getenv("HOARD_TEST_LONG") == "1" {
		size = 500 << 20
	}
	ctx := t.Context()
	recorder := &recordingHandler{}
	dataDir := t.TempDir()
	server := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true, AppendFsync: localredis.FsyncAlways,
		// Neither hoard nor Redis may rewrite the AOF while it is filled:
		// the point is a large one.
		AOFReplayTarget: -1, Logger: slog.New(recorder)})
	client := clientFor(t, server)
	require.NoError(t, client.ConfigSet(ctx, "auto-aof-rewrite-percentage", "0").Err())
	began := time.Now()
	fillAOF(ctx, t, client, recorder, dataDir, size)
	filled := aofSize(ctx, t, client)
	t.Logf("AOF filled to %d MB in %s", filled>>20, time.Since(began).Round(time.Millisecond))

	// A writer whose every acknowledged write must survive.
	var acked atomic.Int64
	acked.Store(-1)
	stopWriter := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		writer := redis.NewClient(&redis.Options{Network: server.Network(), Addr: server.Address(), MaxRetries: -1})
		defer writer.Close()
		for n := int64(0); ; {
			select {
			case <-stopWriter:
				return
			default:
			}
			if writer.Set(ctx, "acked:"+strconv.FormatInt(n, 10), n, 0).Err() == nil {
				acked.Store(n)
				n++
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	require.Eventually(t, func() bool { return acked.Load() > 100 }, 5*time.Second, time.Millisecond)

	pid := server.PID()
	killedAt := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	ackedAtKill := acked.Load()
	probe := redis.NewClient(&redis.Options{Network: server.Network(), Addr: server.Address(), MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: time.Second})
	defer probe.Close()
	time.Sleep(10 * time.Millisecond) // the kill lands before the first probe
	for probe.Ping(ctx).Err() != nil {
		require.Less(t, time.Since(killedAt), 2*time.Minute, "not serving 2 minutes after the kill")
		time.Sleep(5 * time.Millisecond)
	}
	recovery := time.Since(killedAt)
	close(stopWriter)
	<-writerDone
	require.NotEqual(t, pid, server.PID(), "a new redis-server")

	replay := reportedReplay(t, recorder)
	t.Logf("redis-server killed with a %d MB AOF: served again %s after the kill; Redis reports the replay took %s (%.0f MB/s)",
		filled>>20, recovery.Round(time.Millisecond), replay.Round(time.Millisecond), float64(filled)/1e6/replay.Seconds())
	require.LessOrEqual(t, recovery, replay+time.Second, "served within the replay time plus 1 s")
	if replay > 250*time.Millisecond {
		require.True(t, logged(recorder, "redis-server is loading its data; waiting for it"), "the replay's progress is logged")
	}

	// Every write acknowledged before the kill survived it.
	pipe := client.Pipeline()
	exists := make([]*redis.IntCmd, ackedAtKill+1)
	for n := range exists {
		exists[n] = pipe.Exists(ctx, "acked:"+strconv.Itoa(n))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	lost := 0
	for _, cmd := range exists {
		if cmd.Val() != 1 {
			lost++
		}
	}
	require.Zero(t, lost, "of %d writes acknowledged before the kill", ackedAtKill+1)
}

// reportedReplay is the AOF load time of the last start, from Redis's own
// "DB loaded from append only file: N seconds". Redis writes the line
// before it serves, but the supervisor relays its log from a pipe on its
// own goroutine, so a client can be answered before the line is relayed:
// wait for it (a quiet make test once read the log first).
func reportedReplay(t *testing.T, recorder *recordingHandler) time.Duration {
	t.Helper()
	pattern := regexp.MustCompile(`DB loaded from append only file: ([0-9.]+) seconds`)
	var replay time.Duration
	found := func() bool {
		ok := false
		for _, r := range recorder.snapshot() {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "redis" {
					if m := pattern.FindStringSubmatch(a.Value.String()); m != nil {
						seconds, err := strconv.ParseFloat(m[1], 64)
						require.NoError(t, err)
						replay, ok = time.Duration(seconds*float64(time.Second)), true
					}
				}
				return true
			})
		}
		return ok
	}
	require.Eventually(t, found, 10*time.Second, 5*time.Millisecond, "Redis logged its AOF load time")
	return replay
}

// logTail renders the last n records, Redis's own lines included, for a
// failure message.
func logTail(recorder *recordingHandler, n int) string {
	records := recorder.snapshot()
	records = records[max(0, len(records)-n):]
	var b strings.Builder
	fmt.Fprintf(&b, "the last %d log records:", len(records))
	for _, r := range records {
		fmt.Fprintf(&b, "\n  %s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%q", a.Key, a.Value.String())
			return true
		})
	}
	return b.String()
}

// freeBytes is the space an unprivileged writer has left on dir's filesystem.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}

// freeSpace names the free space on dir's filesystem.
func freeSpace(dir string) string {
	free, ok := freeBytes(dir)
	if !ok {
		return "free space unknown"
	}
	return fmt.Sprintf("%d MB free on the data dir's filesystem", free>>20)
}

func logged(recorder *recordingHandler, message string) bool {
	for _, r := range recorder.snapshot() {
		if r.Message == message {
			return true
		}
	}
	return false
}

// TestAOFIsRewrittenByReplayTime: once the AOF's incremental part would
// take longer than the replay target to replay, the supervisor rewrites
// it (here a 0.1 s target: the 16 MB floor), though Redis's own trigger
// (twice the base) never would.
func TestAOFIsRewrittenByReplayTime(t *testing.T) {
	requireRedisServer(t)
	ctx := t.Context()
	recorder := &recordingHandler{}
	dataDir := t.TempDir()
	server := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true,
		AOFReplayTarget: 100 * time.Millisecond, Logger: slog.New(recorder)})
	client := clientFor(t, server)
	require.NoError(t, client.ConfigSet(ctx, "auto-aof-rewrite-percentage", "0").Err(), "Redis's own trigger off")
	fillAOF(ctx, t, client, recorder, dataDir, 20<<20)
	// On a loaded machine the fill is slow enough that a check can land
	// mid-fill: that rewrite comes first and the fill grows the AOF past
	// the floor again, so the next check rewrites it once more. What must
	// hold is that a rewrite ends with the AOF the small dataset, not that
	// exactly one happened.
	require.Eventually(t, func() bool {
		// Not aofSize: a condition runs on its own goroutine, where a
		// failed require cannot stop the test.
		info, err := client.Info(ctx, "persistence").Result()
		size, ok := aofSizeIn(info)
		return err == nil && ok && size < 1<<20 && !strings.Contains(info, "aof_rewrites:0") &&
			strings.Contains(info, "aof_rewrite_in_progress:0")
	}, 15*time.Second, 50*time.Millisecond, "a rewrite within a few checks leaves the AOF the small dataset")
	require.True(t, logged(recorder, "rewriting the AOF: its incremental part would take longer than the replay target to replay"))
}

// countLogged counts the records with message.
func countLogged(recorder *recordingHandler, message string) int {
	n := 0
	for _, r := range recorder.snapshot() {
		if r.Message == message {
			n++
		}
	}
	return n
}

// TestRepeatedRedisKillsRestartAtOnce: a redis-server that had served is
// restarted with no delay after each of several kills in a row; before,
// the delay doubled from 200 ms per restart within a minute (to 10 s), so
// the fifth kill left Redis down 3.2 s longer than its replay. The delay
// is read from the supervisor's log, not timed, so a loaded machine
// cannot fail it; the times are logged.
func TestRepeatedRedisKillsRestartAtOnce(t *testing.T) {
	requireRedisServer(t)
	ctx := t.Context()
	recorder := &recordingHandler{}
	server := startServer(t, localredis.Config{DataDir: t.TempDir(), AppendOnly: true, Logger: slog.New(recorder)})
	client := clientFor(t, server)
	require.NoError(t, client.Set(ctx, "survivor", "1", 0).Err())
	const kills = 5
	for kill := range kills {
		pid := server.PID()
		killedAt := time.Now()
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		// Served again, and the supervisor has seen it ready: a client can
		// be answered before the supervisor's readiness poll is, and a kill
		// in between is a restart that never became ready (backed off),
		// not the restart of one that served.
		require.Eventually(t, func() bool {
			return server.PID() != pid && client.Get(ctx, "survivor").Val() == "1" &&
				countLogged(recorder, "redis-server restarted") == kill+1
		}, 30*time.Second, 5*time.Millisecond)
		t.Logf("kill %d: served again after %s", kill+1, time.Since(killedAt).Round(time.Millisecond))
	}
	var delays []time.Duration
	for _, r := range recorder.snapshot() {
		if r.Message != "redis-server exited unexpectedly; restarting" {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "restart_in" {
				delays = append(delays, a.Value.Duration())
			}
			return true
		})
	}
	require.Equal(t, make([]time.Duration, kills), delays, "every restart at once")
}

// TestSlowLoadIsWaitedFor: a redis-server that stops making progress while
// loading (SIGSTOPped for 11 s, longer than the 10 s a start was given
// before) is waited for, not killed and restarted: the same process serves
// once it goes on.
func TestSlowLoadIsWaitedFor(t *testing.T) {
	requireRedisServer(t)
	ctx := t.Context()
	recorder := &recordingHandler{}
	dataDir := t.TempDir()
	server := startServer(t, localredis.Config{DataDir: dataDir, AppendOnly: true, AOFReplayTarget: -1, Logger: slog.New(recorder)})
	client := clientFor(t, server)
	require.NoError(t, client.ConfigSet(ctx, "auto-aof-rewrite-percentage", "0").Err())
	fillAOF(ctx, t, client, recorder, dataDir, 50<<20)

	killed := server.PID()
	require.NoError(t, syscall.Kill(killed, syscall.SIGKILL))
	// Catch the restarted redis-server while it loads, and freeze it.
	probe := redis.NewClient(&redis.Options{Network: server.Network(), Addr: server.Address(), MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer probe.Close()
	var loading int
	require.Eventually(t, func() bool {
		pid := server.PID()
		if pid == killed || pid == 0 {
			return false
		}
		info, err := probe.Info(ctx, "persistence").Result()
		if err != nil || !strings.Contains(info, "loading:1") {
			return false
		}
		loading = pid
		return syscall.Kill(pid, syscall.SIGSTOP) == nil
	}, 10*time.Second, time.Millisecond, "the restarted redis-server seen loading")
	time.Sleep(11 * time.Second)
	require.Equal(t, loading, server.PID(), "still the same, frozen redis-server")
	require.NoError(t, syscall.Kill(loading, syscall.SIGCONT))
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, loading, server.PID(), "the slow one served; nobody killed it")
	require.True(t, logged(recorder, "redis-server is loading its data; waiting for it"))
}
