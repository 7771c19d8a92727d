package swarm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
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

// crash is what a feed hook panics with to stop a round between delivery
// and settling, as a kill -9 would.
type crash struct{}

// roundCrashing runs a feed round whose hook crashes it after delivering
// the first batch, and reports whether it crashed.
func roundCrashing(t *testing.T, s *swarm.Store, l *ledger) (crashed bool) {
	t.Helper()
	swarm.SetFeedHook(s, func(swarm.FeedBatch) { panic(crash{}) })
	defer swarm.SetFeedHook(s, nil)
	defer func() {
		if r := recover(); r != nil {
			_, crashed = r.(crash)
			require.True(t, crashed, r)
		}
	}()
	_, err := s.FeedRound(context.Background(), l.deliver)
	require.NoError(t, err)
	return false
}

// The site's ledger, fed by two frontends' rounds that overlap and one
// that crashes between delivery and settling again and again, ends equal
// to every user's record on every torrent: each change reaches it exactly
// once after dropping seen keys, none is missed. A mark lost before its
// flush is found by the backstop.
func TestFeedReachesTheLedgerExactlyOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, _ := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		other, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quietLogger, Clock: f.clock})
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Stop() })
		hashes := []bittorrent.InfoHash{infoHash("feed-a"), infoHash("feed-b"), infoHash("feed-c")}
		for i, hash := range hashes {
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, fmt.Sprintf("f%d", i)))
		}
		l := newLedger()
		users := []string{"passkeyA", "passkeyB"}
		crashes := 0
		for step := 1; step <= 12; step++ {
			for i, hash := range hashes {
				for j, p := range users {
					n := 10*i + j
					ev := event(bittorrent.EventNone)
					if step == 1 {
						ev = event(bittorrent.EventStarted)
					}
					f.announce(hash, peerID("-TR", n), n, passkey(p), ev, transfer(uint64(step*100*(j+1)), uint64(step*1000)))
				}
			}
			f.flush()
			switch step % 3 {
			case 0:
				if roundCrashing(t, f.store, l) {
					crashes++
				}
			case 1:
				var wg sync.WaitGroup
				for _, s := range []*swarm.Store{f.store, other} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := s.FeedRound(ctx, l.deliver)
						require.NoError(t, err)
					}()
				}
				wg.Wait()
			}
		}
		require.Positive(t, crashes)
		// drain
		for range 3 {
			_, err := other.FeedRound(ctx, l.deliver)
			require.NoError(t, err)
		}
		rows, err := other.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Zero(t, rows, "nothing left dirty")
		for _, hash := range hashes {
			for _, user := range []string{"alice", "bob"} {
				want := f.onTorrent(hash, user)
				got := l.newest[user+":"+btstore.HexInfoHash(hash)]
				require.Equal(t, want.Uploaded, got.Uploaded, user)
				require.Equal(t, want.Downloaded, got.Downloaded, user)
				require.Equal(t, want.UpCredited, got.UpCredited, user)
				require.Equal(t, want.DownCredited, got.DownCredited, user)
				require.Equal(t, want.Seq, got.Seq, user)
			}
		}
		require.Positive(t, l.copies, "crashed rounds delivered rows again, dropped by key")

		// A mark lost (the frontend died before its flush): only the
		// backstop finds the torrent.
		f.announce(hashes[0], peerID("-TR", 0), 0, passkey("passkeyA"), transfer(99999, 99999))
		f.flush()
		for shard := range btstore.FeedShards {
			require.NoError(t, b.Client.Del(ctx, btstore.FeedIndexKey(shard)).Err())
		}
		rows, err = f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Zero(t, rows)
		indexed, err := f.store.FeedBackstop(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, indexed)
		rows, err = f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 1, rows)
		require.Equal(t, f.onTorrent(hashes[0], "alice").Uploaded, l.newest["alice:"+btstore.HexInfoHash(hashes[0])].Uploaded)
		require.Greater(t, l.newest["alice:"+btstore.HexInfoHash(hashes[0])].Uploaded, int64(90000))
	})
}

// Rows earlier builds wrote, named by their seq (s36 to s39) or under the
// user id alone (before s36), are delivered as they are and settled,
// beside this build's marks, and a mark replaces a row under the user id:
// the record's figures include it.
func TestFeedDeliversRowsAnEarlierBuildWrote(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, _ := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		hash := infoHash("feed-legacy")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "fl"))
		rowsKey := btstore.FeedRowsKey(hash)
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(500, 700))
		f.flush()
		mark, err := b.Client.HGet(ctx, rowsKey, "alice").Result()
		require.NoError(t, err)
		require.Equal(t, "1", mark, "the announce wrote a mark, not a row")
		// As earlier builds left them, for users with no record here.
		require.NoError(t, b.Client.HSet(ctx, rowsKey, "bob:3", "3,10,20,10,0,0,5000,0,1000",
			"carol", "4,30,40,60,40,7000,0,900,2000").Err())

		l := newLedger()
		rows, err := f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 3, rows)
		require.Zero(t, b.Client.Exists(ctx, rowsKey).Val(), "every row and mark settled")
		got := l.newest["alice:"+btstore.HexInfoHash(hash)]
		want := f.onTorrent(hash, "alice")
		require.Equal(t, want.Seq, got.Seq)
		require.Equal(t, int64(500), got.Uploaded)
		require.Equal(t, want.Downloaded, got.Downloaded)
		require.Equal(t, swarm.FeedRow{UserID: "bob", Seq: 3, Uploaded: 10, Downloaded: 20, UpCredited: 10, LeechMillis: 5000},
			l.newest["bob:"+btstore.HexInfoHash(hash)])
		require.Equal(t, swarm.FeedRow{UserID: "carol", Seq: 4, Uploaded: 30, Downloaded: 40, UpCredited: 60, DownCredited: 40,
			SeedMillis: 7000, Snatched: 900}, l.newest["carol:"+btstore.HexInfoHash(hash)])

		// A row under the user id that a new announce finds is replaced by
		// the mark: the record it reads holds every figure.
		require.NoError(t, b.Client.HSet(ctx, rowsKey, "alice", "1,500,700,500,700,0,0,0,1000").Err())
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(900, 1700))
		f.flush()
		fields, err := b.Client.HGetAll(ctx, rowsKey).Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"alice": "2"}, fields)
		// The mark found the user waiting, so it indexed nothing: an
		// earlier build's row is indexed by that build's mark, here by
		// the backstop.
		indexed, err := f.store.FeedBackstop(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, indexed)
		rows, err = f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 1, rows)
		require.Equal(t, int64(900), l.newest["alice:"+btstore.HexInfoHash(hash)].Uploaded)
		require.Zero(t, b.Client.Exists(ctx, rowsKey).Val())
	})
}

// A row that a newer announce replaces while its round delivers it stays
// for the next round: the round deletes the fields it delivered, and the
// newer row is another field.
func TestFeedRoundKeepsARowReplacedWhileDelivering(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, _ := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		hash := infoHash("feed-replaced")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "fr"))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(500, 700))
		f.flush()
		l := newLedger()
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
		require.Zero(t, b.Client.Exists(ctx, btstore.FeedRowsKey(hash)).Val())
	})
}

// A user purged while pending in the feed loses nothing the site has not
// received: the purge parks the record as a row before it deletes it
// (user_purge_record.lua), and the round delivers that row, the record's
// figures at its newest seq.
func TestFeedDeliversARecordPurgedWhilePending(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, _ := privateFixture(t, b, swarm.Config{})
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
		fields, err := b.Client.HKeys(ctx, btstore.FeedRowsKey(hash)).Result()
		require.NoError(t, err)
		require.Equal(t, []string{fmt.Sprintf("alice:%d", want.Seq)}, fields, "parked as a row at its seq")

		l := newLedger()
		rows, err := f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 1, rows)
		got := l.newest["alice:"+btstore.HexInfoHash(hash)]
		require.Equal(t, want.Seq, got.Seq)
		require.Equal(t, want.Uploaded, got.Uploaded)
		require.Equal(t, want.Downloaded, got.Downloaded)
		require.Equal(t, want.LeechTime.Milliseconds(), got.LeechMillis)
		require.Zero(t, b.Client.Exists(ctx, btstore.FeedRowsKey(hash)).Val())
	})
}
