package luascript_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// flushFunctions drops every function library, on every master: what a
// restart without persistence or an operator's FUNCTION FLUSH leaves.
func flushFunctions(ctx context.Context, rdb redis.UniversalClient) error {
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.FunctionFlush(ctx).Err()
		})
	}
	return rdb.FunctionFlush(ctx).Err()
}

// commandCalls sums INFO commandstats' calls of name over every master.
func commandCalls(ctx context.Context, t *testing.T, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	var total int64
	var mu sync.Mutex
	read := func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			if err != nil {
				return err
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}
		return nil
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(ctx, read))
	} else {
		require.NoError(t, read(ctx, rdb.(*redis.Client)))
	}
	return total
}

var counter = luascript.Load(fstest.MapFS{
	"count.lua": {Data: []byte("return {redis.call('INCR', KEYS[1]), R.STEP}")},
}, "count.lua", "local R = {STEP = 7}")

// A server that lost its functions (restart without AOF, FUNCTION FLUSH)
// answers FCALL "Function not found", which did not run: Run, RunPipelined
// and Batcher load the library and call it again, and each call runs once.
// Every call is an FCALL, none an EVAL or EVALSHA.
func TestCallsRecoverWhenTheServerLosesItsFunctions(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		evalsBefore := commandCalls(ctx, t, b.Client, "evalsha") + commandCalls(ctx, t, b.Client, "eval")
		want := int64(0)
		check := func(reply any, err error, how string) {
			t.Helper()
			want++
			require.NoError(t, err, how)
			require.Equal(t, []any{want, int64(7)}, reply, how)
		}
		for round := range 2 {
			require.NoError(t, flushFunctions(ctx, b.Client))
			reply, err := luascript.Run(ctx, b.Client, counter, []string{"n{f}"})
			check(reply, err, "Run after FUNCTION FLUSH, round "+strconv.Itoa(round))
			reply, err = luascript.Run(ctx, b.Client, counter, []string{"n{f}"})
			check(reply, err, "Run with the library loaded")

			require.NoError(t, flushFunctions(ctx, b.Client))
			cmds := luascript.RunPipelined(ctx, b.Client, []luascript.Call{
				{Script: counter, Keys: []string{"n{f}"}}, {Script: counter, Keys: []string{"n{f}"}}})
			for _, cmd := range cmds {
				reply, err := cmd.Result()
				check(reply, err, "RunPipelined after FUNCTION FLUSH")
			}

			require.NoError(t, flushFunctions(ctx, b.Client))
			reply, err = luascript.NewBatcher(b.Client, 1, 4).Run(ctx, counter, []string{"n{f}"})
			check(reply, err, "Batcher after FUNCTION FLUSH")
		}
		n, err := b.Client.Get(ctx, "n{f}").Int64()
		require.NoError(t, err)
		require.Equal(t, want, n, "every call ran once")
		libs, err := b.Client.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: counter.Name()}).Result()
		require.NoError(t, err)
		require.Len(t, libs, 1, "the library is loaded where KEYS[1] lives")
		require.Equal(t, counter.Name(), libs[0].Functions[0].Name)
		require.Equal(t, evalsBefore, commandCalls(ctx, t, b.Client, "evalsha")+commandCalls(ctx, t, b.Client, "eval"),
			"no call fell back to EVAL or EVALSHA on a server with functions")
	})
}

// A library's top level runs once, at FUNCTION LOAD; a call's locals are
// the body's. A script whose body sets a local per call sees a fresh one
// each time, while a part's table is shared: hoard's parts keep only
// constants there.
func TestABodysLocalsArePerCall(t *testing.T) {
	script := luascript.Load(fstest.MapFS{"fresh.lua": {Data: []byte(
		"local seen = {} seen[#seen + 1] = ARGV[1] return #seen")}}, "fresh.lua")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for i := range 3 {
			n, err := luascript.Run(t.Context(), b.Client, script, []string{"k{f}"}, i)
			require.NoError(t, err)
			require.Equal(t, int64(1), n, "call %d saw an earlier call's local", i)
		}
	})
}

// A script's error() reads "user_function:" where EVAL said "user_script:";
// hoard's Go code parses neither, and its caller still gets the message.
func TestAScriptsErrorReachesItsCaller(t *testing.T) {
	script := luascript.Load(fstest.MapFS{"boom.lua": {Data: []byte("error('boom: ' .. ARGV[1])")}}, "boom.lua")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		_, err := luascript.Run(t.Context(), b.Client, script, []string{"k{f}"}, "why")
		require.ErrorContains(t, err, "boom: why")
		require.ErrorContains(t, err, "user_function")
	})
}

// serverWithoutFunctions starts a redis-server of its own with FCALL and
// FUNCTION renamed away, as a Redis before 7.0 lacks them, stopped when the
// test ends, and returns a client of it.
func serverWithoutFunctions(t *testing.T) *redis.Client {
	t.Helper()
	redistest.Require(t)
	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	server := localredis.New(localredis.Config{DataDir: t.TempDir(), Port: port,
		ExtraArgs: []string{"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}})
	require.NoError(t, server.Start(t.Context()))
	t.Cleanup(func() { _ = server.Stop() })
	opts, err := redis.ParseURL(server.URL())
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// On a redis-server without functions (FCALL and FUNCTION renamed away,
// as a Redis before 7.0 lacks them) the scripts run with EVALSHA and EVAL,
// as they did before functions: the client learns it from its first call,
// which did not run, and sends no FCALL after it.
func TestServersWithoutFunctionsRunScriptsWithEval(t *testing.T) {
	ctx := t.Context()
	client := serverWithoutFunctions(t)
	require.Error(t, client.Do(ctx, "fcall", "x", 0).Err(), "the control: this server has no FCALL")

	reply, err := luascript.Run(ctx, client, counter, []string{"n{f}"})
	require.NoError(t, err)
	require.Equal(t, []any{int64(1), int64(7)}, reply)
	require.NoError(t, client.ScriptFlush(ctx).Err())
	reply, err = luascript.Run(ctx, client, counter, []string{"n{f}"})
	require.NoError(t, err, "NOSCRIPT falls back to EVAL")
	require.Equal(t, []any{int64(2), int64(7)}, reply)
	require.NoError(t, client.ScriptFlush(ctx).Err())
	cmds := luascript.RunPipelined(ctx, client, []luascript.Call{{Script: counter, Keys: []string{"n{f}"}}, {Script: counter, Keys: []string{"n{f}"}}})
	for i, cmd := range cmds {
		reply, err := cmd.Result()
		require.NoError(t, err)
		require.Equal(t, []any{int64(3 + i), int64(7)}, reply)
	}
	reply, err = luascript.NewBatcher(client, 1, 4).Run(ctx, counter, []string{"n{f}"})
	require.NoError(t, err)
	require.Equal(t, []any{int64(5), int64(7)}, reply)
	require.NoError(t, counter.Load(ctx, client), "Load puts the script in the script cache instead")

	unknown := func() int64 {
		n, err := client.Info(ctx, "errorstats").Result()
		require.NoError(t, err)
		for line := range strings.SplitSeq(n, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_ERR:count="); ok {
				v, err := strconv.ParseInt(rest, 10, 64)
				require.NoError(t, err)
				return v
			}
		}
		return 0
	}
	before := unknown()
	_, err = luascript.Run(ctx, client, counter, []string{"n{f}"})
	require.NoError(t, err)
	require.Equal(t, before, unknown(), "the client sent no FCALL once it learnt the server has none")
}
