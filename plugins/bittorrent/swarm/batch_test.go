package swarm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
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
