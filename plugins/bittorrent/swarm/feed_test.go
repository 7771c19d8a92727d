package swarm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/redis/go-redis/v9"
)

// ledger is the site's side of the feed: it drops a row whose key it has
// seen and keeps the newest seq per user and torrent.
type ledger struct {
	mu     sync.Mutex
	seen   map[string]bool
	newest map[string]swarm.FeedRow
	copies int
}

func newLedger() *ledger { return &ledger{seen: map[string]bool{}, newest: map[string]swarm.FeedRow{}} }

func (l *ledger) deliver(_ context.Context, batches []swarm.FeedBatch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range batches {
		for _, row := range b.Rows {
			key := swarm.FeedKey(row.UserID, b.InfoHash, row.Seq)
			if l.seen[key] {
				l.copies++
				continue
			}
			l.seen[key] = true
			at := row.UserID + ":" + btstore.HexInfoHash(b.InfoHash)
			if old, ok := l.newest[at]; !ok || row.Seq > old.Seq {
				l.newest[at] = row
			}
		}
	}
	return nil
}

// refusing is a deliverer that refuses every call while refuse is set,
// counting the calls refused, and hands the others to the ledger.
type refusing struct {
	l       *ledger
	refuse  bool
	refused int
}

func (r *refusing) deliver(ctx context.Context, batches []swarm.FeedBatch) error {
	if r.refuse {
		r.refused++
		return errors.New("the outbox refused the batch")
	}
	return r.l.deliver(ctx, batches)
}

// noFeedRowsInRedis asserts the feed wrote no row and no index entry:
// since S5 the rows are only in the answering frontend's memory.
func noFeedRowsInRedis(t *testing.T, b redistest.Backend, hashes ...bittorrent.InfoHash) {
	t.Helper()
	ctx := context.Background()
	for _, hash := range hashes {
		require.Zero(t, b.Client.Exists(ctx, btstore.FeedRowsKey(hash)).Val(), "no feed row written")
		require.Zero(t, b.Client.Exists(ctx, btstore.FeedIndexKey(btstore.FeedShard(hash))).Val(), "no index written")
	}
}

// The site's ledger, fed by a frontend's rounds from the rows it holds,
// some of them refused by the outbox, ends equal to every user's record on
// every torrent: each change reaches it once, none is missed, a refused
// round's rows wait in memory for the next, and no row or index is
// written to Redis. Each batch carries its torrent's counters as the
// replies said them.
func TestFeedReachesTheLedgerExactlyOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		l := newLedger()
		d := &refusing{l: l}
		var counters sync.Map // hex info-hash -> the newest batch delivered
		f, _ := privateFixture(t, b, swarm.Config{OnFeed: d.deliver})
		ctx := context.Background()
		hashes := []bittorrent.InfoHash{infoHash("feed-a"), infoHash("feed-b"), infoHash("feed-c")}
		for i, hash := range hashes {
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, fmt.Sprintf("f%d", i)))
		}
		swarm.SetFeedHook(f.store, func(batch swarm.FeedBatch) { counters.Store(btstore.HexInfoHash(batch.InfoHash), batch) })
		users := []string{"passkeyA", "passkeyB"}
		for step := 1; step <= 12; step++ {
			for i, hash := range hashes {
				for j, p := range users {
					n := 10*i + j
					ev := event(bittorrent.EventNone)
					if step == 1 {
						ev = event(bittorrent.EventStarted)
					}
					opts := []announceOpt{passkey(p), ev, transfer(uint64(step*100*(j+1)), uint64(step*1000))}
					if j == 1 && step > 6 {
						opts = append(opts, seeding) // bob seeds from step 7
					}
					f.announce(hash, peerID("-TR", n), n, opts...)
				}
			}
			f.flush()
			d.refuse = step%3 == 0
			_, err := f.store.FeedRound(ctx, d.deliver)
			if d.refuse {
				require.Error(t, err)
				require.Equal(t, len(hashes)*len(users), f.store.FeedRowsHeld(), "a refused round's rows are held again")
			} else {
				require.NoError(t, err)
				require.Zero(t, f.store.FeedRowsHeld())
			}
		}
		require.Positive(t, d.refused)
		d.refuse = false
		rows, err := f.store.FeedRound(ctx, d.deliver)
		require.NoError(t, err)
		require.Equal(t, len(hashes)*len(users), rows, "the last refused round's rows")
		rows, err = f.store.FeedRound(ctx, d.deliver)
		require.NoError(t, err)
		require.Zero(t, rows, "nothing left held")
		noFeedRowsInRedis(t, b, hashes...)
		for _, hash := range hashes {
			for _, user := range []string{"alice", "bob"} {
				want := f.onTorrent(hash, user)
				got := l.newest[user+":"+btstore.HexInfoHash(hash)]
				require.Equal(t, want.Uploaded, got.Uploaded, user)
				require.Equal(t, want.Downloaded, got.Downloaded, user)
				require.Equal(t, want.UpCredited, got.UpCredited, user)
				require.Equal(t, want.DownCredited, got.DownCredited, user)
				require.Equal(t, want.Seq, got.Seq, user)
				require.Equal(t, want.SeedTime.Milliseconds(), got.SeedMillis, user)
				require.Equal(t, want.LeechTime.Milliseconds(), got.LeechMillis, user)
			}
			info, err := f.store.Torrent(ctx, hash)
			require.NoError(t, err)
			v, ok := counters.Load(btstore.HexInfoHash(hash))
			require.True(t, ok)
			batch := v.(swarm.FeedBatch)
			require.Equal(t, info.ID, batch.TorrentID)
			require.Equal(t, info.Seeders, batch.Seeders)
			require.Equal(t, info.Leechers, batch.Leechers)
			require.Equal(t, info.Snatches, batch.Snatches)
			require.Equal(t, info.LastAction.UnixMilli(), batch.LastAction, "seeded at the last announce: the reply's time")
		}
		require.Zero(t, l.copies, "a refused round delivered nothing, so nothing came twice")
	})
}

// Rows an earlier build left in Redis (btstore.FeedRowsKey, the index's
// mark lost, one row under the user id alone as builds before s36 wrote
// it) are delivered once by the drain a feed loop runs at start, and
// deleted; a second start sends nothing.
func TestFeedLoopDeliversRowsAnEarlierBuildLeftOnceAtStart(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		hash, other := infoHash("feed-legacy"), infoHash("feed-legacy-2")
		// As the earlier build left them: "seq,uploaded,downloaded,
		// up_credit,down_credit,seed_ms,leech_ms,snatched,last_announce".
		require.NoError(t, b.Client.HSet(ctx, btstore.FeedRowsKey(hash), "alice", "3,500,700,500,0,0,60000,0,1000",
			"bob:2", "2,10,20,10,20,0,1000,0,1000").Err())
		require.NoError(t, b.Client.HSet(ctx, btstore.FeedRowsKey(other), "alice:7", "7,1,2,3,4,5,6,0,1000").Err())
		l := newLedger()
		for start := range 2 {
			f := newFixture(t, b, swarm.Config{Private: true, FeedInterval: time.Hour, OnFeed: l.deliver})
			require.NoError(t, f.store.Start(ctx))
			require.Eventually(t, func() bool {
				return b.Client.Exists(ctx, btstore.FeedRowsKey(hash)).Val() == 0 &&
					b.Client.Exists(ctx, btstore.FeedRowsKey(other)).Val() == 0
			}, 10*time.Second, 10*time.Millisecond, "start %d", start)
			require.NoError(t, f.store.Stop())
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		require.Len(t, l.seen, 3)
		require.Zero(t, l.copies, "delivered once")
		require.Equal(t, swarm.FeedRow{UserID: "alice", Seq: 3, Uploaded: 500, Downloaded: 700, UpCredited: 500,
			LeechMillis: 60000}, l.newest["alice:"+btstore.HexInfoHash(hash)])
		require.Equal(t, int64(7), l.newest["alice:"+btstore.HexInfoHash(other)].Seq)
		require.Equal(t, int64(2), l.newest["bob:"+btstore.HexInfoHash(hash)].Seq)
	})
}

// The scan for rows whose index mark an earlier build lost runs until one
// succeeds, then is marked (btstore.FeedLegacyScannedKey): a later start
// drains rows the index names and scans no more, so a row with no mark
// stays; with the mark deleted, the next start scans and delivers it.
func TestFeedLoopScansForUnindexedRowsOnlyUntilMarked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		l := newLedger()
		// start runs a frontend until done holds: its drain at start did
		// that, and the drain runs before the feed loop does anything else.
		start := func(done func() bool) {
			t.Helper()
			f := newFixture(t, b, swarm.Config{Private: true, FeedInterval: time.Hour, OnFeed: l.deliver})
			require.NoError(t, f.store.Start(ctx))
			require.Eventually(t, done, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, f.store.Stop())
		}
		start(func() bool { return b.Client.Get(ctx, btstore.FeedLegacyScannedKey).Val() == btstore.FeedLegacyScanned })
		require.Empty(t, l.seen, "nothing was left")

		indexed, unindexed := infoHash("legacy-indexed"), infoHash("legacy-unindexed")
		require.NoError(t, b.Client.HSet(ctx, btstore.FeedRowsKey(indexed), "alice:4", "4,10,20,10,20,0,1000,0,1000").Err())
		require.NoError(t, b.Client.ZAdd(ctx, btstore.FeedIndexKey(btstore.FeedShard(indexed)),
			redis.Z{Score: 1000, Member: btstore.HexInfoHash(indexed)}).Err())
		require.NoError(t, b.Client.HSet(ctx, btstore.FeedRowsKey(unindexed), "bob:5", "5,1,2,1,2,0,1000,0,1000").Err())
		start(func() bool { return b.Client.Exists(ctx, btstore.FeedRowsKey(indexed)).Val() == 0 })
		require.Equal(t, int64(1), b.Client.Exists(ctx, btstore.FeedRowsKey(unindexed)).Val(), "no scan: the unindexed row stays")
		require.Len(t, l.seen, 1)

		require.NoError(t, b.Client.Del(ctx, btstore.FeedLegacyScannedKey).Err())
		start(func() bool { return b.Client.Exists(ctx, btstore.FeedRowsKey(unindexed)).Val() == 0 }) // scanned again
		require.Len(t, l.seen, 2)
		require.Equal(t, int64(5), l.newest["bob:"+btstore.HexInfoHash(unindexed)].Seq)
		require.Zero(t, l.copies)
	})
}

// A row that a newer announce replaces while its round delivers it is
// held for the next round: the round took the rows it delivers, and the
// newer one came in after.
func TestFeedRoundKeepsARowReplacedWhileDelivering(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		l := newLedger()
		f, _ := privateFixture(t, b, swarm.Config{OnFeed: l.deliver})
		ctx := context.Background()
		hash := infoHash("feed-replaced")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "fr"))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(500, 700))
		f.flush()
		swarm.SetFeedHook(f.store, func(swarm.FeedBatch) {
			f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(800, 900))
		})
		rows, err := f.store.FeedRound(ctx, l.deliver)
		swarm.SetFeedHook(f.store, nil)
		require.NoError(t, err)
		require.Equal(t, 1, rows)
		require.Equal(t, int64(500), l.newest["alice:"+btstore.HexInfoHash(hash)].Uploaded)
		f.flush()
		rows, err = f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 1, rows, "the newer row waited for this round")
		got := l.newest["alice:"+btstore.HexInfoHash(hash)]
		require.Equal(t, int64(800), got.Uploaded)
		require.Equal(t, f.onTorrent(hash, "alice").Seq, got.Seq)
		noFeedRowsInRedis(t, b, hash)
	})
}

// The buffer is bounded: past its cap the oldest rows are dropped and
// counted, "fed up to" stays before the oldest dropped, and the
// frontend's own scan of the records it stamped delivers them; at half
// the cap the feed loop runs a round at once, not at its interval.
func TestFeedBufferDropsTheOldestPastItsCapAndScansForThem(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		l := newLedger()
		f, _ := privateFixture(t, b, swarm.Config{OnFeed: l.deliver, FeedBufferRows: 4})
		ctx := context.Background()
		hashes := []bittorrent.InfoHash{infoHash("cap-a"), infoHash("cap-b"), infoHash("cap-c")}
		for i, hash := range hashes {
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, fmt.Sprintf("c%d", i)))
		}
		for i, hash := range hashes {
			for j, p := range []string{"passkeyA", "passkeyB"} {
				f.announce(hash, peerID("-TR", 10*i+j), 10*i+j, passkey(p), event(bittorrent.EventStarted))
			}
		}
		require.Zero(t, f.store.FeedRowsHeld(), "a start moves no fed figure")
		start := f.clock.Now().UnixMilli()
		for i, hash := range hashes {
			for j, p := range []string{"passkeyA", "passkeyB"} {
				f.clock.Advance(time.Second)
				f.announce(hash, peerID("-TR", 10*i+j), 10*i+j, passkey(p), transfer(uint64(100*(i+1)), 0))
			}
		}
		f.flush()
		require.Equal(t, 4, f.store.FeedRowsHeld())
		require.Equal(t, int64(2), f.store.FeedRowsDropped(), "the two oldest")
		require.NoError(t, swarm.FeedRoundStamped(ctx, f.store))
		require.Len(t, l.seen, 4, "the rows held")
		require.Equal(t, start+1000, swarm.FedUpTo(f.store), "before the oldest dropped: hashes[0]'s first announce")
		require.NoError(t, swarm.FeedDropped(ctx, f.store))
		require.Len(t, l.seen, 6, "the dropped rows' records, from the frontend's scan")
		for i, hash := range hashes {
			for _, user := range []string{"alice", "bob"} {
				require.Equal(t, f.onTorrent(hash, user).Seq, l.newest[user+":"+btstore.HexInfoHash(hash)].Seq, i)
				require.Equal(t, f.onTorrent(hash, user).Uploaded, l.newest[user+":"+btstore.HexInfoHash(hash)].Uploaded, i)
			}
		}
		f.clock.Advance(time.Second)
		f.announce(hashes[0], peerID("-TR", 0), 0, passkey("passkeyA"), transfer(5000, 0))
		f.flush()
		require.NoError(t, swarm.FeedRoundStamped(ctx, f.store))
		require.Equal(t, f.clock.Now().UnixMilli(), swarm.FedUpTo(f.store), "recovered: the next round moves it")

		// Half the cap wakes the loop at once (its interval is an hour).
		woken := newLedger()
		g, _ := privateFixture(t, b, swarm.Config{OnFeed: woken.deliver, FeedBufferRows: 4, FeedInterval: time.Hour})
		require.NoError(t, g.store.Start(ctx))
		for j, p := range []string{"passkeyA", "passkeyB"} {
			g.announce(hashes[2], peerID("-TR", 100+j), 100+j, passkey(p), event(bittorrent.EventStarted))
			g.clock.Advance(time.Second)
			g.announce(hashes[2], peerID("-TR", 100+j), 100+j, passkey(p), transfer(1, 1))
		}
		require.Eventually(t, func() bool {
			woken.mu.Lock()
			defer woken.mu.Unlock()
			return len(woken.seen) == 2
		}, 10*time.Second, 10*time.Millisecond)
	})
}

// A user purged while its row is held loses nothing the site has not
// received: the row is the record's figures at its newest seq, held apart
// from the record, so the purge deletes the record and the round still
// delivers the row.
func TestFeedDeliversTheRowOfAPurgedRecord(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		l := newLedger()
		f, _ := privateFixture(t, b, swarm.Config{OnFeed: l.deliver})
		ctx := context.Background()
		hash := infoHash("feed-purged")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "fp"))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(500, 700))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStopped), transfer(600, 900))
		f.flush()
		want := f.onTorrent(hash, "alice")
		require.Equal(t, int64(600), want.Uploaded)

		require.NoError(t, f.store.RemoveUser(ctx, pk("passkeyA")))
		const window = time.Hour
		f.clock.Advance(window + time.Second)
		now := f.clock.Now().UnixMilli()
		state, err := f.store.StartUserPurge(ctx, "alice", now, window.Milliseconds(), now-1)
		require.NoError(t, err)
		require.Equal(t, "purging", state.State)
		progress, err := f.store.PurgeUserStep(ctx, "alice", state.PurgeBefore)
		require.NoError(t, err)
		require.Equal(t, 1, progress.Records)
		require.Zero(t, b.Client.Exists(ctx, btstore.UserTorrentKey(hash, "alice")).Val(), "the record went")
		require.Equal(t, 2, f.store.FeedRowsHeld(), "both changes' rows are held; the round delivers the newest")

		rows, err := f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 1, rows)
		got := l.newest["alice:"+btstore.HexInfoHash(hash)]
		require.Equal(t, want.Seq, got.Seq)
		require.Equal(t, want.Uploaded, got.Uploaded)
		require.Equal(t, want.Downloaded, got.Downloaded)
		require.Equal(t, want.LeechTime.Milliseconds(), got.LeechMillis)
		noFeedRowsInRedis(t, b, hash)
	})
}
