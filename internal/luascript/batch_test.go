package luascript_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// record adds ARGV[1] to a set and answers it with the count's new value:
// a call that ran twice or answered another's reply shows.
var record = luascript.Load(fstest.MapFS{"record.lua": {Data: []byte(
	"redis.call('SADD', KEYS[1], ARGV[1]); return {ARGV[1], redis.call('INCR', KEYS[2])}")}}, "record.lua")

func TestBatcherRunsEveryCallOnceWithItsOwnReply(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		// Not loaded: the first batch is answered "Function not found" and
		// sent again after FUNCTION LOAD.
		require.NoError(t, flushFunctions(ctx, b.Client))
		batcher := luascript.NewBatcher(b.Client, 2, 8)
		const calls = 200
		replies := make([][]any, calls)
		errs := make([]error, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				reply, err := batcher.Run(ctx, record, []string{"seen{x}", "n{x}"}, "call"+strconv.Itoa(i))
				errs[i] = err
				replies[i], _ = reply.([]any)
			})
		}
		wg.Wait()
		counts := map[int64]bool{}
		for i := range calls {
			require.NoError(t, errs[i], "call %d", i)
			require.Len(t, replies[i], 2, "call %d", i)
			require.Equal(t, "call"+strconv.Itoa(i), replies[i][0], "each call gets its own reply")
			n := replies[i][1].(int64)
			require.False(t, counts[n], "count %d answered twice", n)
			counts[n] = true
		}
		require.Equal(t, int64(calls), b.Client.SCard(ctx, "seen{x}").Val())
		require.Equal(t, "200", b.Client.Get(ctx, "n{x}").Val(), "every call ran once")

		nothing := luascript.Load(fstest.MapFS{"nil.lua": {Data: []byte("return nil")}}, "nil.lua")
		reply, err := batcher.Run(ctx, nothing, []string{"k{x}"})
		require.NoError(t, err, "a nil reply is not an error")
		require.Nil(t, reply)
		_, err = batcher.Run(ctx, luascript.Load(fstest.MapFS{"bad.lua": {Data: []byte("return redis.call('LPOP', KEYS[1])")}}, "bad.lua"), []string{"seen{x}"})
		require.ErrorContains(t, err, "WRONGTYPE", "a script's error is its caller's")
	})
}

// holdFirstPipeline, once armed, holds the client's first pipeline until
// release is closed, and counts the commands of each pipeline. (Armed after
// the connection is up: go-redis sends its handshake as a pipeline.)
type holdFirstPipeline struct {
	entered, release chan struct{}
	armed            atomic.Bool
	mu               sync.Mutex
	sizes            []int
}

func (h *holdFirstPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdFirstPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *holdFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.armed.Load() || cmds[0].Name() != "fcall" {
			return next(ctx, cmds) // a new connection's handshake
		}
		h.mu.Lock()
		h.sizes = append(h.sizes, len(cmds))
		first := len(h.sizes) == 1
		h.mu.Unlock()
		if first {
			close(h.entered)
			<-h.release
		}
		return next(ctx, cmds)
	}
}

func TestBatcherSendsTheCallsThatWaitedInOneBatch(t *testing.T) {
	var single *redistest.Backend
	for _, b := range redistest.Require(t) {
		if b.Name == "single" {
			single = &b
		}
	}
	require.NotNil(t, single, "the single backend runs wherever the cluster does")
	opts, err := redis.ParseURL(single.URL)
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	hold := &holdFirstPipeline{entered: make(chan struct{}), release: make(chan struct{})}
	client.AddHook(hold)
	ctx := t.Context()
	require.NoError(t, record.Load(ctx, client))
	hold.armed.Store(true)
	batcher := luascript.NewBatcher(client, 1, 64)

	var wg sync.WaitGroup
	run := func(ctx context.Context, id string) <-chan error {
		done := make(chan error, 1)
		wg.Go(func() {
			_, err := batcher.Run(ctx, record, []string{"held{x}", "heldn{x}"}, id)
			done <- err
		})
		return done
	}
	first := run(ctx, "first")
	<-hold.entered // the one leader is held in its batch
	const waiting = 10
	for i := range waiting {
		run(ctx, "w"+strconv.Itoa(i))
	}
	cancelled, cancel := context.WithCancel(ctx)
	gone := run(cancelled, "gone")
	require.Eventually(t, func() bool { return batcher.Queued() == waiting+1 }, 10*time.Second, time.Millisecond,
		"the calls wait while the only leader is busy")
	cancel()
	close(hold.release)
	require.NoError(t, <-first)
	require.ErrorIs(t, <-gone, context.Canceled)
	wg.Wait()

	require.Equal(t, []int{1, waiting}, hold.sizes, "the ten that waited went as one batch, without the cancelled call")
	require.False(t, client.SIsMember(ctx, "held{x}", "gone").Val(), "a call cancelled before its batch was sent did not run")
	require.Equal(t, int64(waiting+1), client.SCard(ctx, "held{x}").Val())
}
