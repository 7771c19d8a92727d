package orphans_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
)

// dueAt is a torrent's entry in the due set (ms), or -1 when it has none.
func (f *fixture) dueAt(hash bittorrent.InfoHash) int64 {
	f.t.Helper()
	score, err := f.b.Client.ZScore(context.Background(), btstore.OrphanDueKey(btstore.OrphanDueShard(hash)), btstore.HexInfoHash(hash)).Result()
	if err != nil {
		return -1
	}
	return int64(score)
}

// dueEntries counts the entries of both due sets.
func (f *fixture) dueEntries() int64 {
	f.t.Helper()
	var n int64
	for shard := range btstore.OrphanDueShards {
		for _, set := range []btstore.DueSet{btstore.DueTorrents, btstore.DueUsers} {
			n += f.b.Client.ZCard(context.Background(), set.Key(shard)).Val()
		}
	}
	return n
}

func (f *fixture) duePass() orphans.Report {
	f.t.Helper()
	r, err := f.cleaner.DuePass(context.Background())
	require.NoError(f.t, err)
	return r
}

// TestDueEntriesFindARemovedTorrentWithoutWalking: unregistering records
// the torrent in the due set; a window later the due pass, which walks
// no keyspace, removes it with its user records and then its users' set
// entries, reading only the due entries and those users' versions, and
// leaves the set empty. Only the peer records stay, each with its TTL.
func TestDueEntriesFindARemovedTorrentWithoutWalking(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		gone := privateTorrent(t, f, "gone", "t1")
		live := privateTorrent(t, f, "live", "t2")
		for i := range 50 { // more live torrents, which the due pass never reads
			require.NoError(t, f.store.RegisterTorrent(ctx, infoHash("more"+strconv.Itoa(i)), "m"+strconv.Itoa(i)))
		}
		liveKeys := f.torrentKeys(live)
		require.Equal(t, int64(-1), f.dueAt(gone))
		require.NoError(t, f.store.UnregisterTorrent(ctx, gone))
		require.Equal(t, f.clock.Now().UnixMilli(), f.dueAt(gone))

		f.clock.Advance(window)
		require.Zero(t, f.duePass().Removed(), "exactly the window: still protected")
		f.clock.Advance(time.Millisecond)
		r := f.duePass()
		require.Equal(t, 1, r.Torrents)
		require.Equal(t, 2, r.UserRecords)
		require.Equal(t, 2, r.UserEntries, "alice's and bob's entries for t1")
		require.Equal(t, 3, r.Due, "the torrent, then its two users")
		require.Less(t, r.Scanned, 10, "%+v", r)
		require.Zero(t, f.dueEntries())
		for _, key := range f.torrentKeys(gone) {
			kind := ""
			if _, k, ok := btstore.ParseTorrentKey(key); ok {
				kind = string(k)
			}
			require.Equal(t, string(btstore.KindPeer), kind, key)
			require.Positive(t, b.Client.PTTL(ctx, key).Val(), "a peer record expires by its retention")
		}
		for _, u := range []string{"alice", "bob"} {
			require.NotContains(t, b.Client.HKeys(ctx, btstore.UserVersionsKey(u)).Val(), "t1")
			require.Contains(t, b.Client.HKeys(ctx, btstore.UserVersionsKey(u)).Val(), "t2")
		}
		require.Equal(t, liveKeys, f.torrentKeys(live))
		require.Zero(t, f.duePass().Removed(), "a second due pass finds nothing")
	})
}

// TestStaleDueEntryDeletesNothingLive: an entry for a registered
// torrent, for an unregistered one whose swarm still has a peer, and for
// one touched since its entry was written, deletes nothing; the live
// ones leave the set, the touched one moves to its newest stamp and goes
// a window after that.
func TestStaleDueEntryDeletesNothingLive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		idle := privateTorrent(t, f, "idle", "t1")
		busy := privateTorrent(t, f, "busy", "t2")
		require.NoError(t, f.announce(busy, 3, pkPrefix+"alice", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.store.UnregisterTorrent(ctx, busy))
		touched := privateTorrent(t, f, "touched", "t3")
		require.NoError(t, f.store.UnregisterTorrent(ctx, touched))
		old := f.clock.Now().Add(-10 * window).UnixMilli()
		for _, h := range []bittorrent.InfoHash{idle, busy, touched} {
			require.NoError(t, btstore.MarkTorrentDue(ctx, b.Client, h, old))
			require.Equal(t, old, f.dueAt(h))
		}
		later := f.clock.Now().Add(time.Hour).UnixMilli()
		require.NoError(t, b.Client.HSet(ctx, btstore.TorrentKey(touched), "last_action", later).Err())
		f.clock.Advance(time.Hour)
		before := map[bittorrent.InfoHash][]string{}
		for _, h := range []bittorrent.InfoHash{idle, busy, touched} {
			before[h] = f.torrentKeys(h)
		}

		r := f.duePass()
		require.Zero(t, r.Removed(), "%+v", r)
		require.Equal(t, 3, r.Due)
		for h, keys := range before {
			require.Equal(t, keys, f.torrentKeys(h))
		}
		require.Equal(t, int64(-1), f.dueAt(idle), "registered: live, dropped")
		require.Equal(t, int64(-1), f.dueAt(busy), "a peer: live, dropped (its swarm emptying records it again)")
		require.Equal(t, later, f.dueAt(touched), "moved to its newest stamp")

		f.clock.Advance(window + time.Millisecond)
		r = f.duePass()
		require.Equal(t, 1, r.Torrents)
		require.Equal(t, int64(-1), f.dueAt(touched))
		require.Equal(t, before[idle], f.torrentKeys(idle))
	})
}

// TestSwarmEmptyingRecordsADueEntry: in open mode the last peer's stop,
// or its expiry, records the torrent; its retention TTL running, the due
// pass moves the entry to the record's expiry and keeps the record.
func TestSwarmEmptyingRecordsADueEntry(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false)
		ctx := context.Background()
		stopped, expired := infoHash("stopped"), infoHash("expired")
		require.NoError(t, f.announce(stopped, 1, "", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.announce(expired, 2, "", 0, 0, bittorrent.EventStarted))
		require.Equal(t, int64(-1), f.dueAt(stopped), "a swarm with a peer is not recorded")
		require.NoError(t, f.announce(stopped, 1, "", 0, 0, bittorrent.EventStopped))
		require.Equal(t, f.clock.Now().UnixMilli(), f.dueAt(stopped))

		f.clock.Advance(f.store.Config().PeerTimeout + time.Second)
		_, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, f.clock.Now().UnixMilli(), f.dueAt(expired))

		f.clock.Advance(window + time.Second)
		r := f.duePass()
		require.Zero(t, r.Removed())
		require.NotEmpty(t, f.torrentKeys(stopped))
		ttl := b.Client.PTTL(ctx, btstore.TorrentKey(stopped)).Val()
		require.Positive(t, ttl)
		at := f.dueAt(stopped)
		require.Greater(t, at, f.clock.Now().Add(ttl-window-time.Minute).UnixMilli(), "looked at again once the record expired")
	})
}

// TestBackstopBeginsOncePerPeriod: the SCAN walks run a pass on the first
// tick (records older than the due sets), then begin the next only a
// backstop period after the last ended; an orphan no due entry names
// waits for it.
func TestBackstopBeginsOncePerPeriod(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		c := f.newCleaner(orphans.Policy{Window: window, ScanCount: 100, MaxKeysPerTick: 1000, BackstopPeriod: 3 * time.Hour})
		tick := func() orphans.Report {
			r, err := c.Tick(ctx)
			require.NoError(t, err)
			return r
		}
		tick()
		passes, err := c.Passes(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), passes["torrents"])

		unhinted := infoHash("written before the due sets")
		old := f.clock.Now().Add(-10 * window).UnixMilli()
		require.NoError(t, b.Client.HSet(ctx, btstore.TorrentKey(unhinted), "created", old, "unregistered", old).Err())
		require.Zero(t, tick().Torrents)
		f.clock.Advance(2 * time.Hour)
		require.Zero(t, tick().Torrents, "2h after the last backstop pass: not yet")
		f.clock.Advance(time.Hour)
		require.Equal(t, 1, tick().Torrents, "3h: the backstop's next pass finds it")
		passes, err = c.Passes(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), passes["torrents"])
	})
}

// TestDuePassReadsEveryPage: with more due entries in a shard than one
// page, the due pass reads on until none is left.
func TestDuePassReadsEveryPage(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		f.cleaner = f.newCleaner(orphans.Policy{Window: window, ScanCount: 2, MaxKeysPerTick: 10})
		const n = 60
		for i := range n {
			hash := infoHash("paged" + strconv.Itoa(i))
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, "p"+strconv.Itoa(i)))
			require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		}
		f.clock.Advance(window + time.Second)
		require.Equal(t, n, f.duePass().Torrents)
		require.Zero(t, f.dueEntries())
	})
}
