package btstore_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func peerID(n int) bittorrent.PeerID {
	var id bittorrent.PeerID
	copy(id[:], fmt.Sprintf("-TR%017d", n))
	return id
}

// rawTorrentKeys lists, by a scan of every master, every key under the
// torrent's hash tag: what the table must account for.
func rawTorrentKeys(t *testing.T, rdb redis.UniversalClient, hash bittorrent.InfoHash) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	collect := func(node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, btstore.TorrentPattern(hash), 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return iter.Err()
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error { return collect(m) }))
	} else {
		require.NoError(t, collect(rdb))
	}
	sort.Strings(out)
	return out
}

// TestTheTableListsEveryRecordAndRemoveTorrentTakesThemAll writes a
// private torrent's records through the real swarm store (announces of
// two users, a snatch, a registration), then checks that every key under
// its tag is of a kind the table knows, and that RemoveTorrent refuses a
// registered torrent and one with peers and otherwise deletes every one
// of them in one script, leaving another torrent alone.
func TestTheTableListsEveryRecordAndRemoveTorrentTakesThemAll(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clock := swarm.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		store, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Stop() })
		require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
		for _, u := range []string{"alice", "bob"} {
			require.NoError(t, store.AddUser(ctx, "pk000000000000000000000000000000"+u, u))
		}
		hash, other := bittorrent.InfoHash(sha1.Sum([]byte("one"))), bittorrent.InfoHash(sha1.Sum([]byte("two")))
		announce := func(h bittorrent.InfoHash, n int, user string, left uint64, ev bittorrent.Event) {
			_, err := store.Announce(ctx, &bittorrent.AnnounceRequest{
				InfoHash: h, PeerID: peerID(n), Passkey: "pk000000000000000000000000000000" + user, Event: ev, NumWant: 5,
				Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(n)}), 6881), Left: left,
			})
			require.NoError(t, err)
		}
		for _, h := range []bittorrent.InfoHash{hash, other} {
			require.NoError(t, store.RegisterTorrent(ctx, h, "t-"+btstore.HexInfoHash(h)[:6]))
			announce(h, 1, "alice", 0, bittorrent.EventStarted)
			announce(h, 2, "bob", 100, bittorrent.EventStarted)
			announce(h, 2, "bob", 0, bittorrent.EventCompleted)
		}
		require.NoError(t, store.Flush(ctx))
		// A timeout key as builds before issue 27's cut wrote one per peer
		// (this build writes none): data they left is still listed and
		// removed.
		require.NoError(t, b.Client.Set(ctx, btstore.TimeoutKey(hash, peerID(1), "alice"), "1", time.Hour).Err())

		records, err := btstore.ListTorrentRecords(ctx, b.Client, hash)
		require.NoError(t, err)
		var listed []string
		kinds := map[btstore.Kind]int{}
		for _, r := range records {
			listed = append(listed, r.Key)
			kinds[r.Kind]++
		}
		sort.Strings(listed)
		require.Equal(t, rawTorrentKeys(t, b.Client, hash), listed, "every key under the tag is of a kind in the table")
		for _, k := range []btstore.Kind{btstore.KindTorrent, btstore.KindSeeders, btstore.KindUsers, btstore.KindPeer, btstore.KindTimeout, btstore.KindUser} {
			require.Positive(t, kinds[k], "a record of kind %s", k)
		}
		require.Equal(t, 2, kinds[btstore.KindUser], "alice's and bob's")

		users, err := btstore.ListUserRecords(ctx, b.Client, "bob")
		require.NoError(t, err)
		require.Contains(t, users, btstore.UserTorrentKey(hash, "bob"))
		require.Contains(t, users, btstore.UserTorrentKey(other, "bob"))
		require.Contains(t, users, btstore.UserPasskeysKey("bob"))

		_, err = btstore.RemoveTorrent(ctx, b.Client, hash)
		require.ErrorIs(t, err, btstore.ErrRegistered)
		announce(hash, 1, "alice", 0, bittorrent.EventStopped)
		announce(hash, 2, "bob", 0, bittorrent.EventStopped)
		require.NoError(t, store.UnregisterTorrent(ctx, hash))

		require.NoError(t, store.UnregisterTorrent(ctx, other))
		otherBefore := rawTorrentKeys(t, b.Client, other)
		_, err = btstore.RemoveTorrent(ctx, b.Client, other)
		require.ErrorIs(t, err, btstore.ErrHasPeers)
		require.Equal(t, otherBefore, rawTorrentKeys(t, b.Client, other), "a refusal deletes nothing")

		before := rawTorrentKeys(t, b.Client, hash)
		n, err := btstore.RemoveTorrent(ctx, b.Client, hash)
		require.NoError(t, err)
		require.Equal(t, len(before), n, "every record went")
		require.Empty(t, rawTorrentKeys(t, b.Client, hash))
		require.Equal(t, otherBefore, rawTorrentKeys(t, b.Client, other), "the other torrent keeps its records")
	})
}
