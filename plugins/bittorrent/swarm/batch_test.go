package swarm_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestAnnounceBatchAnswersEachAsAnnounceWould: a batch mixing new peers of
// two torrents, a refusal and a plain re-announce answers each in its
// slot as Announce would, and the swarms end as if announced one by one.
func TestAnnounceBatchAnswersEachAsAnnounceWould(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		h1, h2 := infoHash("batch-1"), infoHash("batch-2")
		f.announce(h1, peerID("-AA", 1), 1, seeding, event(bittorrent.EventStarted))
		f.clock.Advance(time.Second)

		bad := request(h1, peerID("-AA", 9), 9)
		bad.Event = bittorrent.Event(7)
		reqs := []*bittorrent.AnnounceRequest{
			request(h1, peerID("-AA", 2), 2, event(bittorrent.EventStarted)),
			bad,
			request(h2, peerID("-AA", 3), 3, seeding, event(bittorrent.EventStarted)),
			request(h1, peerID("-AA", 1), 1, seeding), // a re-announce of the seeder
			request(h2, peerID("-AA", 4), 4, event(bittorrent.EventStarted)),
		}
		results := make([]bittorrent.AnnounceResult, len(reqs))
		f.store.AnnounceBatch(ctx, reqs, results)

		var clientErr *bittorrent.ClientError
		require.ErrorAs(t, results[1].Err, &clientErr)
		require.Equal(t, "invalid event", clientErr.Reason)
		require.Nil(t, results[1].Resp)
		for _, i := range []int{0, 2, 3, 4} {
			require.NoError(t, results[i].Err, "request %d", i)
		}
		// each answer is its own swarm's as of its own announce
		require.Equal(t, []int64{1, 1}, []int64{results[0].Resp.Complete, results[0].Resp.Incomplete})
		require.Equal(t, peerID("-AA", 1), results[0].Resp.Peers[0].ID)
		require.Equal(t, []int64{1, 0}, []int64{results[2].Resp.Complete, results[2].Resp.Incomplete})
		require.Equal(t, []int64{1, 1}, []int64{results[3].Resp.Complete, results[3].Resp.Incomplete})
		require.Equal(t, []int64{1, 1}, []int64{results[4].Resp.Complete, results[4].Resp.Incomplete})
		require.Equal(t, peerID("-AA", 3), results[4].Resp.Peers[0].ID)

		f.flush()
		for hash, want := range map[bittorrent.InfoHash][2]int64{h1: {1, 1}, h2: {1, 1}} {
			info := f.torrent(hash)
			require.Equal(t, want, [2]int64{info.Seeders, info.Leechers})
		}
	})
}

// TestAnnounceBatchReadsViewsInItsPipeline: a batch's plain re-announce of
// a torrent whose view is stale reads the view in the batch's own
// pipeline and is answered from it, writing its refresh there; the next
// one is answered from the view without Redis; a peer changed elsewhere
// meanwhile goes through announce.lua and ends exact.
func TestAnnounceBatchReadsViewsInItsPipeline(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		h := infoHash("batch-view")
		batch := func(reqs ...*bittorrent.AnnounceRequest) []bittorrent.AnnounceResult {
			results := make([]bittorrent.AnnounceResult, len(reqs))
			f.store.AnnounceBatch(ctx, reqs, results)
			for i, r := range results {
				require.NoError(t, r.Err, "request %d", i)
			}
			return results
		}
		batch(request(h, peerID("-AA", 1), 1, seeding, event(bittorrent.EventStarted)),
			request(h, peerID("-AA", 2), 2, event(bittorrent.EventStarted)))
		f.clock.Advance(100 * time.Millisecond)
		res := batch(request(h, peerID("-AA", 2), 2, transfer(0, 20))) // the view read in the batch
		require.Equal(t, int64(1), f.store.WriteBehindStats().Answered)
		require.Zero(t, f.store.WriteBehindStats().Queued, "its refresh was written with the read")
		require.Equal(t, []int64{1, 1}, []int64{res[0].Resp.Complete, res[0].Resp.Incomplete})
		require.Equal(t, peerID("-AA", 1), res[0].Resp.Peers[0].ID)
		peer2 := b.Client.HMGet(ctx, btstore.PeerKey(h, peerID("-AA", 2)), "downloaded", "last_announce").Val()
		require.Equal(t, []any{"20", strconv.FormatInt(f.clock.Now().UnixMilli(), 10)}, peer2)

		f.clock.Advance(100 * time.Millisecond)
		batch(request(h, peerID("-AA", 1), 1, seeding, transfer(30, 0))) // a fresh view: queued
		require.Equal(t, int64(2), f.store.WriteBehindStats().Answered)
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)

		// peer 2 stops through another frontend; its view read is dropped
		// and announce.lua runs it, exact
		other, err := swarm.New(b.Client, swarm.Config{Clock: f.clock, Logger: quietLogger})
		require.NoError(t, err)
		_, err = other.Announce(ctx, request(h, peerID("-AA", 2), 2, transfer(0, 40), event(bittorrent.EventStopped)))
		require.NoError(t, err)
		f.clock.Advance(time.Second) // the view is stale: peer 2's announce reads it
		res = batch(request(h, peerID("-AA", 2), 2, transfer(0, 50)))
		require.Equal(t, []int64{1, 1}, []int64{res[0].Resp.Complete, res[0].Resp.Incomplete}, "rejoined by announce.lua")

		// two plain re-announces of a torrent whose view is stale in one
		// batch: one view read, the other answered from what it installed
		// (queued)
		require.NoError(t, f.store.Flush(ctx))
		f.clock.Advance(time.Second)
		answered := f.store.WriteBehindStats().Answered
		res = batch(request(h, peerID("-AA", 1), 1, seeding, transfer(70, 0)), request(h, peerID("-AA", 2), 2, transfer(0, 60)))
		require.Equal(t, answered+2, f.store.WriteBehindStats().Answered)
		require.Equal(t, 1, f.store.WriteBehindStats().Queued, "the follower's refresh is queued, the reader's written")
		require.Equal(t, res[0].Resp.Complete, res[1].Resp.Complete)
		require.Equal(t, res[0].Resp.Incomplete, res[1].Resp.Incomplete)

		f.flush()
		info := f.torrent(h)
		require.Equal(t, [2]int64{1, 1}, [2]int64{info.Seeders, info.Leechers})
		require.Equal(t, []any{"70", "60"}, []any{
			b.Client.HGet(ctx, btstore.PeerKey(h, peerID("-AA", 1)), "uploaded").Val(),
			b.Client.HGet(ctx, btstore.PeerKey(h, peerID("-AA", 2)), "downloaded").Val()})
	})
}
