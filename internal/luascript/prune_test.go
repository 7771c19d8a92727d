package luascript_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// otherBuild stands for a script of another hoard version (or a plugin
// process): a library this process does not keep.
var otherBuild = luascript.Load(fstest.MapFS{"other.lua": {Data: []byte(
	"-- other.lua: another build's counter\nreturn redis.call('INCR', KEYS[1])")}}, "other.lua")

// secondClient opens a client of its own on b, as another process would.
func secondClient(t *testing.T, b redistest.Backend) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch rdb := b.Client.(type) {
	case *redis.ClusterClient:
		c = redis.NewClusterClient(rdb.Options())
	case *redis.Client:
		c = redis.NewClient(rdb.Options())
	default:
		t.Fatalf("unknown client %T", b.Client)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// hasLibrary reports whether some master holds the library.
func hasLibrary(ctx context.Context, t *testing.T, rdb redis.UniversalClient, name string) bool {
	t.Helper()
	var found atomic.Bool
	check := func(ctx context.Context, node *redis.Client) error {
		libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result()
		if len(libs) > 0 {
			found.Store(true)
		}
		return err
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(ctx, check))
	} else {
		require.NoError(t, check(ctx, rdb.(*redis.Client)))
	}
	return found.Load()
}

// Prune deletes every hoard_ library but the kept ones, on every master,
// and no library of another name. A second client that keeps calling a
// pruned script meanwhile (Run, RunPipelined) loads it again at its next
// call: every call answers, and each ran exactly once.
func TestPruneKeepsOnlyThisProcesssLibraries(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		require.NoError(t, counter.Load(ctx, b.Client))
		require.NoError(t, otherBuild.Load(ctx, b.Client))
		// An operator's own library, on the master of its key.
		_, err := b.Client.Do(ctx, "function", "load", "replace",
			"#!lua name=operators\nredis.register_function('operators_ping', function() return 1 end)").Result()
		require.NoError(t, err)
		t.Cleanup(func() { _ = flushFunctions(context.WithoutCancel(ctx), b.Client) })
		loadsBefore := commandCalls(ctx, t, b.Client, "function|load")
		require.True(t, hasLibrary(ctx, t, b.Client, "operators"))

		other := secondClient(t, b)
		const calls = 200
		var made atomic.Int64
		done := make(chan struct{})
		var callErrs []error
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(done)
			for i := range calls {
				var err error
				if i%2 == 0 {
					_, err = luascript.Run(ctx, other, otherBuild, []string{"n{prune}"})
				} else {
					err = luascript.RunPipelined(ctx, other, []luascript.Call{{Script: otherBuild, Keys: []string{"n{prune}"}}})[0].Err()
				}
				if err != nil {
					callErrs = append(callErrs, err)
				}
				made.Add(1)
			}
		})
		// Prune after each call the other client completes, so each call
		// meets a prune between its load and its resend at most once.
		prunes := 0
		for seen := int64(-1); ; {
			select {
			case <-done:
			default:
				if n := made.Load(); n != seen {
					seen = n
					report, err := luascript.Prune(ctx, b.Client, []*luascript.Script{counter})
					require.NoError(t, err)
					require.NotContains(t, report.Deleted, counter.Name())
					prunes++
				}
				continue
			}
			break
		}
		wg.Wait()
		require.Empty(t, callErrs, "every call answered")
		// One more call after the last prune, so its library is there.
		_, err = luascript.Run(ctx, other, otherBuild, []string{"n{prune}"})
		require.NoError(t, err)
		n, err := b.Client.Get(ctx, "n{prune}").Int64()
		require.NoError(t, err)
		require.Equal(t, int64(calls+1), n, "each call ran exactly once")
		require.Greater(t, prunes, 1)
		require.Greater(t, commandCalls(ctx, t, b.Client, "function|load")-loadsBefore, int64(1),
			"the control: calls found their library pruned and loaded it again")

		report, err := luascript.Prune(ctx, b.Client, []*luascript.Script{counter})
		require.NoError(t, err)
		require.Equal(t, []string{otherBuild.Name()}, report.Deleted, "the other build's library, loaded again by its last call")
		require.Equal(t, []string{counter.Name()}, report.Kept)
		require.False(t, hasLibrary(ctx, t, b.Client, otherBuild.Name()))
		require.True(t, hasLibrary(ctx, t, b.Client, counter.Name()), "the kept library stays")
		require.True(t, hasLibrary(ctx, t, b.Client, "operators"), "a library not named hoard_ is never deleted")
	})
}
