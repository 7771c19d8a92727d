package btplugin_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// BenchmarkFeedToOutbox is the feed's cost per row in a tracker's steady
// state, where every crediting announce falls in a new round and most
// torrents have one row a round: one op is a crediting re-announce on each
// of 500 torrents (one user each), the flush that indexes them, and a
// round that appends their events to the outbox as the plugin does and
// settles them. redis-µs/row is redis-server's CPU for the round and
// the append; ns/op includes the announces.
func BenchmarkFeedToOutbox(b *testing.B) {
	const torrents = 500
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			require.NoError(b, redistest.Flush(ctx, backend))
			deliver := btplugin.FeedDeliverer(outbox.New(backend.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet}))
			// OnFeed makes the store a frontend with an outbox, which
			// numbers its records' changes and holds their rows (S5)
			store, err := swarm.New(backend.Client, swarm.Config{Private: true, Logger: quiet, WriteBehind: -1, OnFeed: deliver})
			require.NoError(b, err)
			defer func() { _ = store.Stop() }()
			require.NoError(b, store.AddClient(ctx, "-TR", "Transmission"))
			hashes := make([]bittorrent.InfoHash, torrents)
			passkey := func(i int) string { return fmt.Sprintf("feedbenchpasskey%016d", i) }
			for i := range hashes {
				hashes[i] = bittorrent.InfoHash(sha1.Sum([]byte(fmt.Sprint("feed-bench-", i))))
				require.NoError(b, store.RegisterTorrent(ctx, hashes[i], strconv.Itoa(i)))
				require.NoError(b, store.AddUser(ctx, passkey(i), strconv.Itoa(i)))
			}
			step := uint64(0)
			wave := func() {
				step++
				event := bittorrent.EventNone
				if step == 1 {
					event = bittorrent.EventStarted
				}
				for i, hash := range hashes {
					var peer bittorrent.PeerID
					copy(peer[:], fmt.Sprintf("-TR3000-%012d", i))
					_, err := store.Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer, Passkey: passkey(i),
						Left: 1 << 30, Event: event, Uploaded: step * 1000, Downloaded: step * 7000,
						Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i)}), 6881)})
					require.NoError(b, err)
				}
				require.NoError(b, store.Flush(ctx))
			}
			wave()
			wave()
			_, err = store.FeedRound(ctx, deliver)
			require.NoError(b, err)
			rows := 0
			var roundCPU float64
			for b.Loop() {
				wave()
				before := redisCPUSeconds(b, backend)
				n, err := store.FeedRound(ctx, deliver)
				require.NoError(b, err)
				roundCPU += redisCPUSeconds(b, backend) - before
				rows += n
			}
			require.Equal(b, b.N*torrents, rows, "every round delivered every torrent's row")
			b.ReportMetric(roundCPU*1e6/float64(rows), "redis-µs/row")
		})
	}
}

// redisCPUSeconds is redis-server's used_cpu_sys + used_cpu_user, summed
// over a cluster's masters.
func redisCPUSeconds(tb testing.TB, b redistest.Backend) float64 {
	tb.Helper()
	total := 0.0
	eachMaster(tb, b, func(c *redis.Client) {
		info, err := c.Info(context.Background(), "cpu").Result()
		require.NoError(tb, err)
		for _, line := range strings.Split(info, "\n") {
			name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				v, err := strconv.ParseFloat(value, 64)
				require.NoError(tb, err)
				total += v
			}
		}
	})
	return total
}
