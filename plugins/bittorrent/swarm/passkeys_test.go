package swarm_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// getCounter counts the GET commands a client sends: passkey lookups.
type getCounter struct{ gets atomic.Int64 }

func (c *getCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *getCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "get" {
			c.gets.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *getCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countedStore is a private store over its own client, whose GETs are
// counted, with passkeyA registered and the client prefix "-TR" allowed.
func countedStore(t *testing.T, b redistest.Backend) (*swarm.Store, *getCounter, bittorrent.InfoHash) {
	t.Helper()
	rdb, err := redisurl.Dial(b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	counter := &getCounter{}
	rdb.AddHook(counter)
	store, err := swarm.New(rdb, swarm.Config{Private: true, Logger: quietLogger, Clock: swarm.NewFakeClock(epoch)})
	require.NoError(t, err)
	ctx := context.Background()
	hash := infoHash("private")
	require.NoError(t, store.RegisterTorrent(ctx, hash, "t1"))
	require.NoError(t, store.AddUser(ctx, pk("passkeyA"), "alice"))
	require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
	return store, counter, hash
}

func TestPasskeyLength(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		store, gets, hash := countedStore(t, b)
		ctx := context.Background()

		// Registration: 32 to 64 characters; a refusal writes nothing.
		for _, bad := range []string{"short", strings.Repeat("a", swarm.MinPasskeyLen-1), strings.Repeat("a", 65)} {
			err := store.AddUser(ctx, bad, "mallory")
			require.ErrorIs(t, err, swarm.ErrInvalid, bad)
			require.ErrorContains(t, err, "want 32-64 characters")
			require.Zero(t, b.Client.Exists(ctx, btstore.PasskeyKey(bad)).Val(), "a refused passkey is not written")
			require.Zero(t, b.Client.Exists(ctx, btstore.UserPasskeysKey("mallory")).Val(), "nor is the user listed")
		}
		require.NoError(t, store.AddUser(ctx, strings.Repeat("b", swarm.MinPasskeyLen), "bob"))

		// A passkey that could never be registered is refused without a
		// lookup, in announces and scrapes alike.
		before := gets.gets.Load()
		for _, bad := range []string{"short", strings.Repeat("a", swarm.MinPasskeyLen-1), pk("{bad}")} {
			_, err := store.Announce(ctx, request(hash, peerID("-TR", 1), 1, func(r *bittorrent.AnnounceRequest) { r.Passkey = bad }))
			var ce *bittorrent.ClientError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "malformed passkey: a passkey is 32-64 characters of A-Z a-z 0-9 _ -", ce.Reason)
			_, err = store.Scrape(ctx, bad, []bittorrent.InfoHash{hash})
			require.ErrorAs(t, err, &ce)
			require.Contains(t, ce.Reason, "malformed passkey")
		}
		require.Equal(t, before, gets.gets.Load(), "no lookup for a malformed passkey")

		// A well-formed unknown one is looked up once and refused with the
		// sentinel the listeners count misses by.
		_, err := store.Announce(ctx, request(hash, peerID("-TR", 1), 1, passkey("nosuchkey")))
		require.ErrorIs(t, err, bittorrent.ErrUnknownPasskey)
		require.Equal(t, before+1, gets.gets.Load())
	})
}

func TestPasskeyCacheBounded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		store, gets, hash := countedStore(t, b)
		swarm.SetPasskeyCacheLimits(store, 4, 8)
		ctx := context.Background()
		announce := func(key string) error {
			_, err := store.Announce(ctx, request(hash, peerID("-TR", 1), 1, func(r *bittorrent.AnnounceRequest) { r.Passkey = key }))
			return err
		}
		require.NoError(t, announce(pk("passkeyA")))

		// A flood of made-up passkeys: each is looked up, none stays for
		// long, and the cache never holds more than two generations.
		for i := range 1000 {
			require.ErrorIs(t, announce(pk(fmt.Sprintf("guess%d", i))), bittorrent.ErrUnknownPasskey)
			known, misses := swarm.PasskeyCacheSizes(store)
			require.Equal(t, 1, known)
			require.LessOrEqual(t, misses, 16)
		}
		// The user's passkey was never evicted by the misses: no lookup.
		before := gets.gets.Load()
		require.NoError(t, announce(pk("passkeyA")))
		require.Equal(t, before, gets.gets.Load())

		// Turning a generation over keeps the previous one: after 16 new
		// misses (two generations of 8), the newer 8 and the older 8 are
		// all answered from the cache; only the generation before those
		// was dropped, not the whole cache.
		for i := 1000; i < 1016; i++ {
			require.ErrorIs(t, announce(pk(fmt.Sprintf("guess%d", i))), bittorrent.ErrUnknownPasskey)
		}
		before = gets.gets.Load()
		for i := 1008; i < 1016; i++ {
			require.ErrorIs(t, announce(pk(fmt.Sprintf("guess%d", i))), bittorrent.ErrUnknownPasskey)
		}
		require.ErrorIs(t, announce(pk("guess1000")), bittorrent.ErrUnknownPasskey)
		require.Equal(t, before, gets.gets.Load(), "misses of both generations are still cached")
		require.ErrorIs(t, announce(pk("guess999")), bittorrent.ErrUnknownPasskey)
		require.Equal(t, before+1, gets.gets.Load(), "an older miss is looked up again")
	})
}
