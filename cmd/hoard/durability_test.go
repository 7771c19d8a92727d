package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/unittier"
)

// TestServeRefusesUnknownFsyncPolicy: a typo in --redis-fsync or
// HOARD_REDIS_FSYNC stops serve before it starts or creates anything.
func TestServeRefusesUnknownFsyncPolicy(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	cmd := rootCommand()
	cmd.SetArgs([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--redis-fsync", "every-sec"})
	err := cmd.ExecuteContext(context.Background())
	require.EqualError(t, err, `--redis-fsync / HOARD_REDIS_FSYNC: redis fsync policy "every-sec" is not one of everysec, always, no`)
	require.NoDirExists(t, dataDir)

	t.Setenv("HOARD_REDIS_FSYNC", "sometimes")
	cmd = rootCommand()
	cmd.SetArgs([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"})
	err = cmd.ExecuteContext(context.Background())
	require.ErrorContains(t, err, `"sometimes" is not one of everysec, always, no`)
	require.NoDirExists(t, dataDir)
}

// TestServeRefusesBadRedisMaxMemory: a --redis-maxmemory or
// HOARD_REDIS_MAXMEMORY hoard cannot read stops serve before it starts or
// creates anything, as does a negative replay target.
func TestServeRefusesBadRedisMaxMemory(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--redis-maxmemory", "4g"}, want: `--redis-maxmemory / HOARD_REDIS_MAXMEMORY: redis maxmemory "4g" is not 0 (no limit), a size such as 4gb or 512mb, or a share of the machine's memory such as 50%`},
		{args: []string{"--redis-maxmemory", "150%"}, want: `redis maxmemory "150%": a percentage must be above 0 and at most 100`},
		{env: "-1", want: `redis maxmemory "-1" is not 0 (no limit)`},
		{args: []string{"--redis-aof-replay-target", "-5s"}, want: "--redis-aof-replay-target / HOARD_REDIS_AOF_REPLAY_TARGET must be 0 (off) or positive, not -5s"},
	} {
		t.Setenv("HOARD_REDIS_MAXMEMORY", tc.env)
		cmd := rootCommand()
		cmd.SetArgs(append([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"}, tc.args...))
		err := cmd.ExecuteContext(context.Background())
		require.ErrorContains(t, err, tc.want, "%v %q", tc.args, tc.env)
		require.NoDirExists(t, dataDir)
	}
	maxMemory, err := redisMaxMemory(localredis.DefaultMaxMemory)
	require.NoError(t, err)
	require.Equal(t, localredis.MachineMemory()/2, maxMemory, "the default is half the machine's memory")
}

// TestExternalRedisDurabilityIsLogged: with HOARD_REDIS_URL, the log says
// what the Redis's own AOF settings are, and warns when they cannot keep
// acknowledged writes or differ from what the operator asked hoard for.
func TestExternalRedisDurabilityIsLogged(t *testing.T) {
	unittier.Skip(t, "it starts a redis-server")
	ctx := context.Background()
	logged := func(rdb redis.UniversalClient, asked localredis.FsyncPolicy) string {
		var buf bytes.Buffer
		logRedisDurability(ctx, rdb, asked, slog.New(slog.NewTextHandler(&buf, nil)))
		return buf.String()
	}

	withAOF := localredis.New(localredis.Config{DataDir: t.TempDir(), AppendOnly: true, AppendFsync: localredis.FsyncAlways,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, withAOF.Start(ctx))
	t.Cleanup(func() { _ = withAOF.Stop() })
	opts, err := redis.ParseURL(withAOF.URL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })

	out := logged(rdb, "")
	require.Contains(t, out, "level=INFO msg=\"redis durability\"")
	require.Contains(t, out, "appendonly=yes appendfsync=always")
	out = logged(rdb, localredis.FsyncEverySec)
	require.Contains(t, out, "level=WARN")
	require.Contains(t, out, "appendfsync=always asked=everysec")

	// The test backends run without an AOF: every node of them is named.
	for _, b := range redistest.Require(t) {
		out := logged(b.Client, "")
		lines := strings.Count(out, "level=WARN msg=\"the Redis has no AOF")
		want := 1
		if b.Name == "cluster" {
			want = 3
		}
		require.Equal(t, want, lines, "%s: %s", b.Name, out)
	}
}
