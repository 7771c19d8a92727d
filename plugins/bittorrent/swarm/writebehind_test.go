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

// A plain re-announce is answered from the view, its refresh waits in
// the queue (Redis unchanged) until the store writes it.
func TestPlainReannounceIsWrittenBehind(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		me, other := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, other, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))

		// A plain re-announce whose view is stale reads the view in the
		// refresh.lua call that writes it (refresh.lua reading the view
		// costs Redis less than announce.lua, so even a torrent announced
		// to rarely reads it); the next, within the view's age, is
		// answered from that view and queued.
		f.clock.Advance(time.Minute)
		f.announce(hash, other, 2, passkey("passkeyB"), seeding)
		stats := f.store.WriteBehindStats()
		require.Equal(t, int64(1), stats.Answered)
		require.Equal(t, int64(1), stats.ViewReads)
		require.Zero(t, stats.Queued)
		f.clock.Advance(100 * time.Millisecond)
		resp := f.announce(hash, me, 1, passkey("passkeyA"), transfer(300, 500))
		require.Equal(t, int64(1), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)
		require.Equal(t, []bittorrent.PeerID{other}, peerIDs(resp.Peers))
		stats = f.store.WriteBehindStats()
		require.Equal(t, int64(2), stats.Answered)
		require.Equal(t, int64(1), stats.ViewReads, "answered from the view the first read")
		require.Equal(t, 1, stats.Queued)
		f.flush()

		// one within the view's age waits in the queue
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(400, 900))
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)
		record := b.Client.HMGet(ctx, btstore.PeerKey(hash, me), "uploaded", "downloaded").Val()
		require.Equal(t, []any{"300", "500"}, record)

		f.flush()
		require.Zero(t, f.store.WriteBehindStats().Queued)
		record = b.Client.HMGet(ctx, btstore.PeerKey(hash, me), "uploaded", "downloaded", "last_announce").Val()
		require.Equal(t, []any{"400", "900", strconv.FormatInt(epoch.Add(time.Minute+200*time.Millisecond).UnixMilli(), 10)}, record)
		user := b.Client.HMGet(ctx, btstore.UserTorrentKey(hash, "alice"), "uploaded", "downloaded").Val()
		require.Equal(t, []any{"400", "900"}, user, "the user's record has the transfer, once")
		require.Equal(t, "5", b.Client.HGet(ctx, btstore.TorrentKey(hash), "announces").Val())
	})
}

// A peer that left through another frontend is dropped from the refresh
// and its announce goes through announce.lua, which rejoins it exactly.
func TestPlainReannounceOfAPeerChangedElsewhereRunsInFull(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		other, err := swarm.New(b.Client, swarm.Config{Clock: f.clock, Logger: quietLogger})
		require.NoError(t, err)
		hash := infoHash("changed")
		me, neighbour := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, me, 1, event(bittorrent.EventStarted))
		f.announce(hash, neighbour, 2, event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		_, err = other.Announce(context.Background(), request(hash, me, 1, event(bittorrent.EventStopped)))
		require.NoError(t, err)
		require.Equal(t, int64(1), f.torrent(hash).Leechers)

		f.clock.Advance(time.Minute)
		resp := f.announce(hash, me, 1) // reads the view: refresh.lua drops the peer
		require.Equal(t, int64(2), resp.Incomplete, "announce.lua put the peer back")
		require.Equal(t, int64(2), f.torrent(hash).Leechers)
		stats := f.store.WriteBehindStats()
		require.Equal(t, int64(1), stats.Dropped)
		require.Zero(t, stats.Answered)
	})
}

// Unregistering a torrent refuses its plain re-announces at once, not
// when the view ages out.
func TestUnregisterRefusesPlainReannouncesAtOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"))
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, passkey("passkeyA"))
		require.Equal(t, int64(2), f.store.WriteBehindStats().Answered, "one view read, one answered from it")

		require.NoError(t, f.store.UnregisterTorrent(context.Background(), hash))
		f.clock.Advance(time.Millisecond)
		require.Equal(t, "unregistered torrent", f.refuse(hash, me, 1, passkey("passkeyA")))
	})
}

// Flood control counts from this frontend's last accepted announce even
// while the record's last_announce lags behind it.
func TestFloodControlCountsPlainReannouncesNotYetWritten(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{FloodInterval: 5 * time.Minute})
		me, other, third := peerID("-TR", 1), peerID("-TR", 2), peerID("-TR", 3)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, other, 2, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.announce(hash, third, 3, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.clock.Advance(6 * time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA")) // reads the view, written with it
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, other, 2, passkey("passkeyB")) // answered from it: queued, the record lags
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)

		// 7 minutes after the record's last_announce, 1 after the
		// announce this frontend accepted
		f.clock.Advance(time.Minute)
		require.Contains(t, f.refuse(hash, other, 2, passkey("passkeyB")), "announcing too often")
		require.Equal(t, int64(1), f.store.FloodRefused())
	})
}

// A view read takes its torrent's queued refreshes along in its
// refresh.lua call, so they need no drain call of their own; the reading
// peer's own queued refresh is replaced by the newer one it carries.
func TestViewReadWritesItsTorrentsQueuedRefreshes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		hash, elsewhere := infoHash("along"), infoHash("along-elsewhere")
		a, c, d := peerID("-TR", 1), peerID("-TR", 2), peerID("-TR", 3)
		f.announce(hash, a, 1, event(bittorrent.EventStarted))
		f.announce(hash, c, 2, event(bittorrent.EventStarted))
		f.announce(hash, d, 3, event(bittorrent.EventStarted))
		f.announce(elsewhere, a, 1, event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, c, 2)      // reads the view
		f.announce(elsewhere, a, 1) // another torrent's view
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, a, 1, transfer(100, 200)) // queued
		f.announce(elsewhere, a, 1)                // queued, another torrent
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, d, 3, transfer(300, 400)) // queued
		require.Equal(t, 3, f.store.WriteBehindStats().Queued)
		before := f.store.WriteBehindStats()

		f.clock.Advance(time.Second) // the view is stale: the next announce reads it
		f.announce(hash, a, 1, transfer(500, 600))
		after := f.store.WriteBehindStats()
		require.Equal(t, int64(1), after.ViewReads-before.ViewReads)
		require.Equal(t, int64(1), after.AlongPeers-before.AlongPeers, "d's refresh rode along; a's was replaced")
		require.Equal(t, 1, after.Queued, "only the other torrent's refresh waits")
		at := func(d time.Duration) string { return strconv.FormatInt(epoch.Add(d).UnixMilli(), 10) }
		require.Equal(t, []any{"500", "600", at(time.Minute + 1200*time.Millisecond)},
			b.Client.HMGet(ctx, btstore.PeerKey(hash, a), "uploaded", "downloaded", "last_announce").Val())
		require.Equal(t, []any{"300", "400", at(time.Minute + 200*time.Millisecond)},
			b.Client.HMGet(ctx, btstore.PeerKey(hash, d), "uploaded", "downloaded", "last_announce").Val())

		f.flush()
		require.Zero(t, f.store.WriteBehindStats().Queued)
		require.Equal(t, int64(1), f.store.WriteBehindStats().DrainCalls-before.DrainCalls, "the other torrent's call alone")
		require.Equal(t, at(time.Minute+100*time.Millisecond),
			b.Client.HGet(ctx, btstore.PeerKey(elsewhere, a), "last_announce").Val())
	})
}

// The loop writes a torrent's queued refreshes only when the oldest is
// due (drainAfterTicks of its DrainTicks ticks per WriteBehind after it
// was queued), not at the first tick, and that call reads the torrent's
// view too: the next plain re-announce is answered from it, with what
// another frontend changed before it, where the older view is stale.
func TestADueTorrentsWriteReadsItsView(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		other, err := swarm.New(b.Client, swarm.Config{Clock: f.clock, Logger: quietLogger})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Stop() })
		hash := infoHash("due")
		me, neighbour, newcomer := peerID("-TR", 1), peerID("-TR", 2), peerID("-TR", 3)
		f.announce(hash, me, 1, event(bittorrent.EventStarted))
		f.announce(hash, neighbour, 2, event(bittorrent.EventStarted))

		f.clock.Advance(time.Minute)
		f.announce(hash, neighbour, 2) // reads the view, written with it
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, transfer(10, 20)) // from the view, queued
		require.Equal(t, int64(1), f.store.WriteBehindStats().ViewReads)
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)
		for tick := 1; tick < swarm.DrainTicks-1; tick++ {
			require.NoError(t, swarm.DrainDue(ctx, f.store))
			require.Equal(t, 1, f.store.WriteBehindStats().Queued, "not due at tick %d", tick)
		}
		_, err = other.Announce(ctx, request(hash, newcomer, 3, event(bittorrent.EventStarted)))
		require.NoError(t, err)
		f.clock.Advance(600 * time.Millisecond)
		require.NoError(t, swarm.DrainDue(ctx, f.store))
		stats := f.store.WriteBehindStats()
		require.Zero(t, stats.Queued, "due at tick %d", swarm.DrainTicks-1)
		require.Equal(t, int64(1), stats.DrainReads)
		require.Equal(t, []any{"10", "20"}, b.Client.HMGet(ctx, btstore.PeerKey(hash, me), "uploaded", "downloaded").Val())

		// 800 ms after the first read its view would be stale; the one the
		// write read 100 ms ago answers, with the newcomer in it.
		f.clock.Advance(100 * time.Millisecond)
		resp := f.announce(hash, neighbour, 2)
		require.Equal(t, int64(1), f.store.WriteBehindStats().ViewReads, "answered from the write's view")
		require.Equal(t, int64(3), resp.Incomplete)
		require.ElementsMatch(t, []bittorrent.PeerID{me, newcomer}, peerIDs(resp.Peers))
	})
}

// The flush loop writes the batch alone: a queued refresh waits for the
// write-behind loop, which writes it when it is due, within WriteBehind.
// (The flush loop's Flush wrote the whole queue too, in calls of its own,
// just before a view read could take it along.)
func TestTheFlushLoopLeavesTheQueueToTheWriteBehindLoop(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{FlushInterval: 10 * time.Millisecond, WriteBehind: time.Second})
		ctx := context.Background()
		hash := infoHash("flush-loop")
		me, neighbour := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, me, 1, event(bittorrent.EventStarted))
		f.announce(hash, neighbour, 2, event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, neighbour, 2) // reads the view
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, transfer(10, 20)) // queued
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)

		queuedAt := time.Now()
		require.NoError(t, f.store.Start(ctx))
		require.Eventually(t, func() bool {
			return b.Client.HGet(ctx, btstore.StatsKey, "announces").Val() == "4"
		}, 30*time.Second, 5*time.Millisecond, "the flush loop writes the batch")
		if time.Since(queuedAt) < 700*time.Millisecond { // not yet due; a loaded machine may be slower than that
			require.Equal(t, 1, f.store.WriteBehindStats().Queued, "the batch's flush left the queue")
		}
		// Bounds in wall time, the loops' own: generous, since a machine
		// loaded 10x over (CI beside two -race suites) took more than 5 s.
		require.Eventually(t, func() bool { return f.store.WriteBehindStats().Queued == 0 }, 30*time.Second,
			5*time.Millisecond, "the write-behind loop writes it when due")
		require.Equal(t, []any{"10", "20"}, b.Client.HMGet(ctx, btstore.PeerKey(hash, me), "uploaded", "downloaded").Val())
	})
}
