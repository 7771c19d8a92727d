package reaper_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
)

// BenchmarkReaperRun is one reaper run (Tick: scan the registry, find the
// due steps, cap them, mark them pending) over a registry of
// HOARD_BENCH_REAPER_TORRENTS uploads (default 1,000,000) on the single
// redis-server: 5% never seeded past the grace, 5% unseeded past it, the
// rest seeded recently, by 10,000 uploaders. Each iteration is a run;
// later runs find the earlier ones' steps pending and take the next ones,
// as a reaper does day to day. Reported: seconds per run, and what one
// run costs Redis (CPU seconds from INFO, commands processed).
func BenchmarkReaperRun(b *testing.B) {
	torrents := 1_000_000
	if v := os.Getenv("HOARD_BENCH_REAPER_TORRENTS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		torrents = n
	}
	single, ok := redistest.Backends()[0].Client.(*redis.Client)
	require.True(b, ok, "the first backend is the single redis-server")
	// Its own client with long timeouts: flushing a million keys left by
	// the previous run outlasts the tests' 3 s.
	opts := *single.Options()
	opts.ReadTimeout, opts.WriteTimeout = 2*time.Minute, 2*time.Minute
	rdb := redis.NewClient(&opts)
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(b, rdb.FlushAll(ctx).Err())
	now := time.Now()
	populate(b, rdb, torrents, now)
	used := memoryUsed(b, rdb)
	b.Logf("%d registered uploads; Redis holds %.0f MB (%.0f B per upload)", torrents, float64(used)/1e6, float64(used)/float64(torrents))

	r := reaper.New(rdb, reaper.Config{Policy: reaper.DefaultPolicy(),
		Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler)})
	cpu0, cmds0 := redisCost(b, rdb)
	steps := 0
	b.ResetTimer()
	for range b.N {
		names, err := r.Tick(ctx)
		require.NoError(b, err)
		steps += len(names)
	}
	b.StopTimer()
	cpu1, cmds1 := redisCost(b, rdb)
	require.Positive(b, steps, "the runs found due steps")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
	b.ReportMetric((cpu1-cpu0)/float64(b.N), "redis-cpu-s/run")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "redis-cmds/run")
	b.ReportMetric(float64(steps)/float64(b.N), "steps/run")
}

// populate writes what swarm.Store.Register writes for each upload (the
// torrent hash and the registry entry), pipelined, plus last_action for
// those seeded once.
func populate(b *testing.B, rdb redis.UniversalClient, torrents int, now time.Time) {
	b.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range torrents {
		hash := hashOf(fmt.Sprintf("bench-%d", i))
		id := "t" + strconv.Itoa(i)
		created := now.Add(-60 * 24 * time.Hour).UnixMilli()
		fields := []any{"id", id, "registered", created, "uploader", "u" + strconv.Itoa(i%10_000), "created", created}
		switch i % 20 {
		case 0: // never seeded, created past the grace
			fields[3], fields[7] = now.Add(-9*time.Hour).UnixMilli(), now.Add(-9*time.Hour).UnixMilli()
		case 1: // its last seeder left 21 days ago
			fields = append(fields, "last_action", now.Add(-21*24*time.Hour).UnixMilli())
		default: // seeded an hour ago
			fields = append(fields, "last_action", now.Add(-time.Hour).UnixMilli())
		}
		pipe.HSet(ctx, btstore.TorrentKey(hash), fields...)
		pipe.HSet(ctx, btstore.RegistryKey, btstore.HexInfoHash(hash), id)
		if pipe.Len() >= 20_000 {
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(b, err)
}

func infoField(b *testing.B, rdb redis.UniversalClient, section, field string) string {
	b.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	require.NoError(b, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	b.Fatalf("INFO %s has no %s", section, field)
	return ""
}

func memoryUsed(b *testing.B, rdb redis.UniversalClient) int64 {
	n, err := strconv.ParseInt(infoField(b, rdb, "memory", "used_memory"), 10, 64)
	require.NoError(b, err)
	return n
}

// redisCost reads Redis's CPU seconds (user + sys, main thread and
// children) and the commands it has processed.
func redisCost(b *testing.B, rdb redis.UniversalClient) (float64, int64) {
	user, err := strconv.ParseFloat(infoField(b, rdb, "cpu", "used_cpu_user"), 64)
	require.NoError(b, err)
	sys, err := strconv.ParseFloat(infoField(b, rdb, "cpu", "used_cpu_sys"), 64)
	require.NoError(b, err)
	cmds, err := strconv.ParseInt(infoField(b, rdb, "stats", "total_commands_processed"), 10, 64)
	require.NoError(b, err)
	return user + sys, cmds
}
