package luascript_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
)

// slowScript counts its runs in KEYS[1], then keeps Redis busy for ARGV[1]
// microseconds by Redis's own clock, longer than the client waits for a
// reply.
const slowSource = `
redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1])
return 1`

var (
	slowScript = luascript.Load(fstest.MapFS{"slow.lua": {Data: []byte(slowSource)}}, "slow.lua")
	// goRedisSlow is the same script as go-redis's own Script: the control.
	goRedisSlow = redis.NewScript(slowSource)
)

// A script call whose reply comes after the client's read timeout has run:
// go-redis's own Script.Run sends it again (a Client's MaxRetries, a
// ClusterClient's redirect loop), so it runs twice or more. luascript's Run
// and Batcher, a Script's Run and RunPipelined (as the swarm store sends
// its announces) send it once, and the caller gets the timeout.
func TestAScriptCallIsSentOnceAfterAReadTimeout(t *testing.T) {
	const busyMicros = 400_000 // 8 times the read timeout below
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		// A client each, so that each finds idle connections to resend on.
		client := func() redis.UniversalClient { return clientWithReadTimeout(t, b, 50*time.Millisecond) }
		runs := func(key string) int64 {
			t.Helper()
			// b.Client waits out the scripts still running (3 s timeout).
			n, err := b.Client.Get(ctx, key).Int64()
			require.NoError(t, err)
			return n
		}

		err := goRedisSlow.Run(ctx, client(), []string{"resent{x}"}, busyMicros).Err()
		requireTimeout(t, err)
		require.Greater(t, runs("resent{x}"), int64(1),
			"go-redis's defaults send a timed-out script again (the control: without it this test shows nothing)")

		_, err = luascript.Run(ctx, client(), slowScript, []string{"once{x}"}, busyMicros)
		requireTimeout(t, err)
		require.Equal(t, int64(1), runs("once{x}"), "Run sent the script more than once")

		batcher := luascript.NewBatcher(client(), 1, 4)
		_, err = batcher.Run(ctx, slowScript, []string{"batched{x}"}, busyMicros)
		requireTimeout(t, err)
		require.Equal(t, int64(1), runs("batched{x}"), "Batcher sent the script more than once")

		err = slowScript.Run(ctx, client(), []string{"method{x}"}, busyMicros).Err()
		requireTimeout(t, err)
		require.Equal(t, int64(1), runs("method{x}"), "Script.Run sent the script more than once")

		// Loaded first, so the pipeline's FCALL is the call that times out.
		require.NoError(t, slowScript.Load(ctx, b.Client))
		cmds := luascript.RunPipelined(ctx, client(), []luascript.Call{{Script: slowScript, Keys: []string{"piped{x}"}, Args: []any{busyMicros}}})
		requireTimeout(t, cmds[0].Err())
		require.Equal(t, int64(1), runs("piped{x}"), "RunPipelined sent the script more than once")
	})
}

// hoard's own single-server client (redisurl.Dial) does not resend any
// command, not even a script sent around luascript (go-redis's Script.Run).
func TestRedisURLsSingleServerClientSendsACommandOnce(t *testing.T) {
	for _, b := range redistest.Require(t) {
		if strings.Contains(b.URL, ",") {
			continue // a cluster's client resends whatever it is told: luascript's calls are marked instead
		}
		ctx := t.Context()
		sep := "?"
		if strings.Contains(b.URL, "?") {
			sep = "&"
		}
		client, err := redisurl.Dial(b.URL + sep + "read_timeout=50ms")
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		require.NoError(t, warmPool(ctx, client.(*redis.Client)))

		err = goRedisSlow.Run(ctx, client, []string{"dialled{x}"}, 400_000).Err()
		requireTimeout(t, err)
		n, err := b.Client.Get(ctx, "dialled{x}").Int64()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "redisurl's client sent the script more than once")
	}
}

// clientWithReadTimeout is a client of b's Redis with go-redis's retry
// defaults, the given read timeout, and idle connections in its pools: a
// resent command goes on one of those at once, where a new connection's
// handshake would time out behind the busy script and never send it.
func clientWithReadTimeout(t *testing.T, b redistest.Backend, readTimeout time.Duration) redis.UniversalClient {
	t.Helper()
	ctx := t.Context()
	if strings.Contains(b.URL, ",") {
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(b.URL, ","), ReadTimeout: readTimeout})
		t.Cleanup(func() { _ = client.Close() })
		require.NoError(t, client.ForEachMaster(ctx, warmPool))
		return client
	}
	opts, err := redis.ParseURL(b.URL)
	require.NoError(t, err)
	opts.ReadTimeout = readTimeout
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	require.NoError(t, warmPool(ctx, client))
	return client
}

// warmPool leaves three idle connections in node's pool. A PING may miss
// the 50 ms read timeout on a loaded machine (a new connection's handshake
// and the PING are two round trips): it is harmless to send again, so a
// few tries are made before the test fails.
func warmPool(ctx context.Context, node *redis.Client) error {
	var err error
	for range 5 {
		if err = warmPoolOnce(ctx, node); err == nil {
			return nil
		}
	}
	return err
}

func warmPoolOnce(ctx context.Context, node *redis.Client) error {
	conns := []*redis.Conn{node.Conn(), node.Conn(), node.Conn()}
	defer func() {
		for _, conn := range conns {
			_ = conn.Close() // back to the pool (a broken one is dropped)
		}
	}()
	for _, conn := range conns {
		if err := conn.Ping(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

func requireTimeout(t *testing.T, err error) {
	t.Helper()
	var netErr net.Error
	require.True(t, errors.As(err, &netErr) && netErr.Timeout(), "want a read timeout, got %v", err)
}
