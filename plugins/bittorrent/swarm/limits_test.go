package swarm_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func from(ip string, port uint16) announceOpt {
	return func(r *bittorrent.AnnounceRequest) { r.Addr = netip.AddrPortFrom(netip.MustParseAddr(ip), port) }
}

// ownerCounts reads the open-mode per-address counts of a torrent.
func ownerCounts(t *testing.T, b redistest.Backend, hash bittorrent.InfoHash) map[string]string {
	t.Helper()
	raw, err := b.Client.HGetAll(context.Background(), btstore.OwnersKey(hash)).Result()
	require.NoError(t, err)
	out := map[string]string{}
	for k, v := range raw {
		out[netip.AddrFrom4([4]byte([]byte(k[:4]))).String()+map[bool]string{true: "/64", false: ""}[len(k) == 8]] = v
	}
	return out
}

func TestPeersPerAddressOpenMode(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{MaxPeersPerOwner: 3})
		ctx := context.Background()
		hash := infoHash("crowded")
		for i := 1; i <= 3; i++ {
			f.announce(hash, peerID("-TR", i), i, from("192.0.2.1", uint16(7000+i)))
		}
		require.Equal(t, map[string]string{"192.0.2.1": "3"}, ownerCounts(t, b, hash))

		// A fourth peer from the address is refused, and writes nothing.
		keysBefore := b.Client.Keys(ctx, "*").Val()
		if b.Name == "single" {
			require.Equal(t, "your address has 3 peers on this torrent already: stop one, or wait for old ones to time out",
				f.refuse(hash, peerID("-TR", 4), 4, from("192.0.2.1", 7004)))
			require.ElementsMatch(t, keysBefore, b.Client.Keys(ctx, "*").Val(), "a refused join writes no key")
		} else {
			require.Contains(t, f.refuse(hash, peerID("-TR", 4), 4, from("192.0.2.1", 7004)), "3 peers")
		}
		require.Equal(t, int64(3), f.torrent(hash).Leechers)
		require.Equal(t, int64(1), f.store.PeerLimitRefused())

		// Peers in the swarm go on announcing (and may become seeders);
		// another address is not affected.
		f.announce(hash, peerID("-TR", 1), 1, from("192.0.2.1", 7001), seeding)
		f.announce(hash, peerID("-TR", 9), 9, from("192.0.2.9", 7009))

		// A stopped peer makes room; a peer that moves to another address
		// moves its count.
		f.announce(hash, peerID("-TR", 2), 2, from("192.0.2.1", 7002), event(bittorrent.EventStopped))
		f.announce(hash, peerID("-TR", 3), 3, from("192.0.2.7", 7003))
		require.Equal(t, map[string]string{"192.0.2.1": "1", "192.0.2.7": "1", "192.0.2.9": "1"}, ownerCounts(t, b, hash))
		f.announce(hash, peerID("-TR", 4), 4, from("192.0.2.1", 7004))
		f.announce(hash, peerID("-TR", 5), 5, from("192.0.2.1", 7005))
		require.Contains(t, f.refuse(hash, peerID("-TR", 6), 6, from("192.0.2.1", 7006)), "3 peers")

		// Hosts of one IPv6 /64 are one address.
		for i := 10; i < 13; i++ {
			f.announce(hash, peerID("-TR", i), i, from("2001:db8:0:1::"+string(rune('a'+i-10)), 7000))
		}
		require.Contains(t, f.refuse(hash, peerID("-TR", 13), 13, from("2001:db8:0:1::ffff", 7000)), "3 peers")
		f.announce(hash, peerID("-TR", 13), 13, from("2001:db8:0:2::1", 7000))

		// Expiry takes the counts down with the peers; an empty swarm
		// leaves no counts behind.
		f.clock.Advance(2*time.Hour + time.Minute)
		_, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(0), f.torrent(hash).Leechers+f.torrent(hash).Seeders)
		require.Zero(t, b.Client.Exists(ctx, btstore.OwnersKey(hash)).Val())
		for i := 1; i <= 3; i++ {
			f.announce(hash, peerID("-TR", 20+i), 20+i, from("192.0.2.1", uint16(7000+i)))
		}
	})
}

func TestPeersPerUserPrivateMode(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{MaxPeersPerOwner: 2})
		ctx := context.Background()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"))
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyA"))
		require.Equal(t, "your account has 2 peers on this torrent already: stop one, or wait for old ones to time out",
			f.refuse(hash, peerID("-TR", 3), 3, passkey("passkeyA")))
		require.Zero(t, b.Client.Exists(ctx, btstore.PeerKey(hash, peerID("-TR", 3))).Val(), "the refused peer has no record")
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyA"), seeding)
		f.announce(hash, peerID("-TR", 4), 4, passkey("passkeyB"))
		require.Equal(t, int64(1), f.store.PeerLimitRefused())

		// A second passkey of the same user shares the user's bound.
		require.NoError(t, f.store.AddUser(ctx, pk("passkeyA2"), "alice"))
		require.Contains(t, f.refuse(hash, peerID("-TR", 3), 3, passkey("passkeyA2")), "2 peers")

		// Peers that time out make room.
		f.clock.Advance(2*time.Hour + time.Minute)
		_, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		f.announce(hash, peerID("-TR", 3), 3, passkey("passkeyA"))
	})
}

func TestPeersPerOwnerUnbounded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{MaxPeersPerOwner: -1})
		hash := infoHash("unbounded")
		for i := range 50 {
			f.announce(hash, peerID("-TR", i), i, from("192.0.2.1", uint16(7000+i)))
		}
		require.Equal(t, int64(50), f.torrent(hash).Leechers)
	})
}

// TestStrayOwnerCountsGoWithTheSwarm: a count no peer accounts for (a
// record that disagreed with the swarm, written before counts were kept)
// is dropped when the swarm empties, by a stop or by expiry, so it can
// neither stay behind nor lock an address out for good.
func TestStrayOwnerCountsGoWithTheSwarm(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{MaxPeersPerOwner: 2})
		ctx := context.Background()
		for _, expire := range []bool{false, true} {
			hash := infoHash("stray" + strconv.FormatBool(expire))
			f.announce(hash, peerID("-TR", 1), 1, from("192.0.2.1", 7001))
			require.NoError(t, b.Client.HSet(ctx, btstore.OwnersKey(hash), string([]byte{192, 0, 2, 9}), 5).Err())
			require.Contains(t, f.refuse(hash, peerID("-TR", 2), 2, from("192.0.2.9", 7002)), "2 peers")
			if expire {
				f.clock.Advance(2*time.Hour + time.Minute)
				_, err := f.store.Sweep(ctx)
				require.NoError(t, err)
			} else {
				f.announce(hash, peerID("-TR", 1), 1, from("192.0.2.1", 7001), event(bittorrent.EventStopped))
			}
			require.Zero(t, b.Client.Exists(ctx, btstore.OwnersKey(hash)).Val())
			f.announce(hash, peerID("-TR", 2), 2, from("192.0.2.9", 7002))
		}
	})
}
