package swarm_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// announce.lua takes a role's count from its peer sample when the sample
// was the whole role hash, and asks HLEN otherwise. Swarms that grow past
// numwant and shrink below it, with every numwant (0 included), family
// filter, role change and stop, must get exact counts either way: in each
// reply, in the torrent's record and against the role hashes themselves.
func TestAnnounceCountsAreExactWhateverTheSampleSaw(t *testing.T) {
	for _, private := range []bool{false, true} {
		name := "open"
		if private {
			name = "private"
		}
		t.Run(name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
				// Every announce through announce.lua; no per-owner bound,
				// since one user holds all the private peers.
				cfg := swarm.Config{WriteBehind: -1, MaxPeersPerOwner: -1}
				var f *fixture
				hash := infoHash("sample-counts")
				var opts []announceOpt
				if private {
					f, hash = privateFixture(t, b, cfg)
					opts = append(opts, passkey("passkeyA"))
				} else {
					f = newFixture(t, b, cfg)
				}
				rng := rand.New(rand.NewPCG(27, 1))
				seeding := map[int]bool{} // the model: peer -> seeds
				wants := []int{0, 1, 2, 3, 7, 50}
				for step := range 400 {
					// The swarm grows to about 40 peers, then stops shrink it.
					p := rng.IntN(40)
					stop := rng.IntN(10) == 0 || (step > 250 && rng.IntN(2) == 0)
					seeds := rng.IntN(3) == 0
					req := request(hash, peerID("-TR", p), p, append(opts, numWant(wants[rng.IntN(len(wants))]))...)
					if seeds {
						req.Left = 0
					}
					if rng.IntN(2) == 0 {
						req.PeerFamily = bittorrent.IPv4Only
					}
					if stop {
						req.Event = bittorrent.EventStopped
						delete(seeding, p)
					} else {
						seeding[p] = seeds
					}
					resp, err := f.store.Announce(context.Background(), req)
					require.NoError(t, err, "step %d", step)
					wantSeeders, wantLeechers := 0, 0
					for _, s := range seeding {
						if s {
							wantSeeders++
						} else {
							wantLeechers++
						}
					}
					require.Equal(t, int64(wantSeeders), resp.Complete, "step %d: seeders", step)
					require.Equal(t, int64(wantLeechers), resp.Incomplete, "step %d: leechers", step)
					require.LessOrEqual(t, len(resp.Peers), req.NumWant, "step %d", step)
				}
				info := f.torrent(hash)
				keys := btstore.KeysOf(hash)
				ctx := context.Background()
				require.Equal(t, b.Client.HLen(ctx, keys.Seeders).Val(), info.Seeders)
				require.Equal(t, b.Client.HLen(ctx, keys.Leechers).Val(), info.Leechers)
				require.NotZero(t, info.Seeders+info.Leechers, "the walk ends with a swarm")
			})
		})
	}
}
