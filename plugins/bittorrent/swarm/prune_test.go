package swarm_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestIndexPruneKeepsAnEntryThatChanged: Repair's prune reads a torrent as
// not registered, then (in the hook, between the read and the remove) the
// torrent is registered again and announced, and the flush adds to its
// entry: the entry's score is no longer the one read, so it stays, with
// the torrent's true count. An entry whose score did not change goes.
func TestIndexPruneKeepsAnEntryThatChanged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), seeding)
		f.flush()
		require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		// Unregistering removed its entries; another frontend's batch,
		// flushed late, wrote alice's seeding back into one.
		require.NoError(t, b.Client.ZAdd(ctx, btstore.IndexKey(btstore.IndexSeeders), redis.Z{Score: 1, Member: btstore.HexInfoHash(hash)}).Err())
		ghost := "ffffffffffffffffffffffffffffffffffffffff"
		require.NoError(t, b.Client.ZAdd(ctx, btstore.IndexKey(btstore.IndexSeeders), redis.Z{Score: 3, Member: ghost}).Err())

		raced := false
		swarm.SetPruneHook(f.store, func() {
			if raced {
				return
			}
			raced = true
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, "t1"))
			f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyB"), seeding)
			f.flush()
		})
		report, err := f.store.Repair(ctx)
		require.NoError(t, err)
		require.True(t, raced)
		require.Equal(t, 1, report.IndexRemoved, "the ghost's entry; the raced one changed")
		top, err := f.store.Top(ctx, btstore.IndexSeeders, 10)
		require.NoError(t, err)
		require.Equal(t, []swarm.Ranked{{InfoHash: hash, Count: 2}}, top)
		require.Equal(t, 2, int(f.torrent(hash).Seeders), "the entry is the true count")

		// Unregistered, a late entry again, and nothing racing: it goes.
		swarm.SetPruneHook(f.store, nil)
		require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		require.NoError(t, b.Client.ZAdd(ctx, btstore.IndexKey(btstore.IndexSeeders), redis.Z{Score: 2, Member: btstore.HexInfoHash(hash)}).Err())
		report, err = f.store.Repair(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, report.IndexRemoved)
		top, err = f.store.Top(ctx, btstore.IndexSeeders, 10)
		require.NoError(t, err)
		require.Empty(t, top)
	})
}
