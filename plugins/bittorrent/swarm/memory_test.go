package swarm_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var usedMemoryRE = regexp.MustCompile(`used_memory:(\d+)`)

func usedMemory(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	n, err := strconv.ParseInt(usedMemoryRE.FindStringSubmatch(info)[1], 10, 64)
	require.NoError(t, err)
	return n
}

// TestMemoryPerPeerAndTorrent measures what an operator must plan Redis
// memory for (docs/limits-and-memory.md): INFO memory's used_memory before and
// after n announces of each shape, on a single redis-server. It prints
// the figures (go test -v -run TestMemoryPerPeerAndTorrent) and fails if
// they grow past generous bounds, so a change that makes peers much
// dearer is seen.
func TestMemoryPerPeerAndTorrent(t *testing.T) {
	const n = 10_000
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		if b.Name != "single" {
			t.Skip("by design: the figure is one server's used_memory, and the cluster spreads the keys over three")
		}
		ctx := context.Background()
		measure := func(name string, cfg swarm.Config, announce func(f *fixture, i int)) (perAnnounce, perAfterExpiry float64) {
			require.NoError(t, redistest.Flush(ctx, b))
			cfg.MaxPeersPerOwner = -1
			f := newFixture(t, b, cfg)
			if cfg.Private {
				require.NoError(t, f.store.AddClient(ctx, "-TR", "Transmission"))
				for u := range 100 {
					require.NoError(t, f.store.AddUser(ctx, pk(fmt.Sprintf("user%d", u)), fmt.Sprintf("u%d", u)))
				}
			}
			before := usedMemory(t, b.Client)
			for i := range n {
				announce(f, i)
			}
			f.flush()
			after := usedMemory(t, b.Client)
			perAnnounce = float64(after-before) / n
			// Every peer times out: what stays is the retained records
			// (peer records for PeerRetention, open torrents for
			// OpenTorrentRetention), until their TTLs.
			f.clock.Advance(2*cfg.Interval + time.Minute)
			for {
				removed, err := f.store.Sweep(ctx)
				require.NoError(t, err)
				if removed == 0 {
					break
				}
			}
			f.flush()
			perAfterExpiry = float64(usedMemory(t, b.Client)-before) / n
			t.Logf("%s: %.0f B per announce while the peers are in the swarm, %.0f B each once they timed out (retained records)",
				name, perAnnounce, perAfterExpiry)
			return perAnnounce, perAfterExpiry
		}
		open := swarm.Config{Interval: 30 * time.Minute}
		hash := infoHash("memory")
		peer, _ := measure("open, one torrent, n peers", open, func(f *fixture, i int) {
			f.announce(hash, peerIDN(i), i, numWant(0))
		})
		torrent, retained := measure("open, n torrents of one peer", open, func(f *fixture, i int) {
			f.announce(infoHash(strconv.Itoa(i)), peerIDN(i), i, numWant(0))
		})
		private := swarm.Config{Interval: 30 * time.Minute, Private: true}
		hashes := make([]bittorrent.InfoHash, 100)
		privatePeer, _ := measure("private, 100 torrents, n peers of 100 users", private, func(f *fixture, i int) {
			if i < len(hashes) {
				hashes[i] = infoHash("private" + strconv.Itoa(i))
				require.NoError(t, f.store.RegisterTorrent(ctx, hashes[i], "t"+strconv.Itoa(i)))
			}
			f.announce(hashes[i%len(hashes)], peerIDN(i), i, numWant(0), passkey(fmt.Sprintf("user%d", i/len(hashes)%100)))
		})
		t.Logf("plan for: a peer %.0f B (open) / %.0f B (private, with its user record); a torrent %.0f B more; a flood announce leaves %.0f B for the retention",
			peer, privatePeer, torrent-peer, retained)
		require.Less(t, peer, 1500.0)
		require.Less(t, privatePeer, 3000.0)
		require.Less(t, torrent, 3000.0)
	})
}

// peerIDN is a distinct peer id per i, of a whitelisted client.
func peerIDN(i int) bittorrent.PeerID {
	var id bittorrent.PeerID
	copy(id[:], fmt.Sprintf("-TR3000-%012d", i))
	return id
}
