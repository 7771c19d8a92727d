package swarm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// Rows an earlier build wrote, under the user id alone, are delivered
// and settled as before (feed_settle.lua), beside the seq-named rows this
// build writes for the same user.
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
		// As the earlier build left it: the row at seq 1 under "alice".
		row, err := b.Client.HGet(ctx, rowsKey, "alice:1").Result()
		require.NoError(t, err)
		require.NoError(t, b.Client.HDel(ctx, rowsKey, "alice:1").Err())
		require.NoError(t, b.Client.HSet(ctx, rowsKey, "alice", row).Err())
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(900, 1700))
		f.flush()
		fields, err := b.Client.HKeys(ctx, rowsKey).Result()
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"alice", "alice:2"}, fields)

		l := newLedger()
		rows, err := f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 2, rows)
		require.Zero(t, b.Client.Exists(ctx, rowsKey).Val(), "both rows settled")
		got := l.newest["alice:"+btstore.HexInfoHash(hash)]
		want := f.onTorrent(hash, "alice")
		require.Equal(t, want.Seq, got.Seq)
		require.Equal(t, int64(900), got.Uploaded)
		require.Equal(t, want.Downloaded, got.Downloaded)
		require.True(t, l.seen[swarm.FeedKey("alice", hash, 1)], "the earlier build's row was delivered")
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

// shardHash is a torrent whose feed index shard is 0, so a test can fill
// one shard with more torrents than one step of a round takes.
func shardHash(i int) bittorrent.InfoHash {
	h := infoHash(fmt.Sprintf("feed-shard-%d", i))
	h[0] = 0
	return h
}

// A round takes every torrent its shard has indexed, step after step,
// not one step's worth (until s45 it took 100 per shard, so a tracker
// whose announces touched more torrents than 1,600 per feed interval fell
// behind for good); and it stops when FeedInterval has passed since it
// began, leaving the rest indexed for the next round.
func TestFeedRoundTakesTheWholeShard(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, _ := privateFixture(t, b, swarm.Config{FeedInterval: time.Second})
		ctx := context.Background()
		const torrents = 2*swarm.FeedRoundLimit + 30
		for i := range torrents {
			hash := shardHash(i)
			require.Equal(t, 0, btstore.FeedShard(hash))
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, fmt.Sprintf("ws%d", i)))
			f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
			f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(uint64(100+i), 7))
		}
		f.flush()
		l := newLedger()
		rows, err := f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, torrents, rows, "one round delivered every torrent's row")
		require.Len(t, l.newest, torrents)
		for i := range torrents {
			require.Equal(t, int64(100+i), l.newest["alice:"+btstore.HexInfoHash(shardHash(i))].Uploaded)
		}
		require.Equal(t, []string{btstore.FeedIndexKeeper}, b.Client.ZRange(ctx, btstore.FeedIndexKey(0), 0, -1).Val(),
			"only the keeper is left in the index")

		// Out of time after its first step: the rest waits, indexed.
		for i := range torrents {
			f.announce(shardHash(i), peerID("-TR", 1), 1, passkey("passkeyA"), transfer(uint64(1000+i), 7))
		}
		f.flush()
		swarm.SetFeedHook(f.store, func(swarm.FeedBatch) { f.clock.Advance(10 * time.Millisecond) })
		rows, err = f.store.FeedRound(ctx, l.deliver)
		swarm.SetFeedHook(f.store, nil)
		require.NoError(t, err)
		require.Equal(t, swarm.FeedRoundLimit, rows, "the first step's torrents; then the round's second was up")
		require.Equal(t, int64(torrents-swarm.FeedRoundLimit+1), b.Client.ZCard(ctx, btstore.FeedIndexKey(0)).Val())
		rows, err = f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, torrents-swarm.FeedRoundLimit, rows, "the next round took the rest")
		for i := range torrents {
			require.Equal(t, int64(1000+i), l.newest["alice:"+btstore.HexInfoHash(shardHash(i))].Uploaded)
		}
	})
}

// The feed's index shards are skiplists, never listpacks (whose every
// ZADD, ZSCORE and ZREM walks the whole set): the flush adds the shard's
// keeper with its marks, a shard an earlier build left as a listpack is
// converted by the next flush, rounds skip the keeper and never remove
// it, and the backstop adds it too.
func TestFeedIndexStaysASkiplist(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, _ := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		hash := infoHash("feed-skiplist")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "fs"))
		index := btstore.FeedIndexKey(btstore.FeedShard(hash))
		// As an earlier build left it: a listpack with one stale entry.
		stale := strings.Repeat("ab", 20)
		require.NoError(t, b.Client.ZAdd(ctx, index, redis.Z{Score: 1, Member: stale}).Err())
		require.Equal(t, "listpack", b.Client.ObjectEncoding(ctx, index).Val())

		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(500, 700))
		f.flush()
		require.Equal(t, "skiplist", b.Client.ObjectEncoding(ctx, index).Val())
		require.Equal(t, float64(btstore.FeedIndexKeeperScore), b.Client.ZScore(ctx, index, btstore.FeedIndexKeeper).Val())

		l := newLedger()
		for range 2 {
			_, err := f.store.FeedRound(ctx, l.deliver)
			require.NoError(t, err)
		}
		require.Equal(t, f.onTorrent(hash, "alice").Seq, l.newest["alice:"+btstore.HexInfoHash(hash)].Seq)
		require.Equal(t, []string{btstore.FeedIndexKeeper}, b.Client.ZRange(ctx, index, 0, -1).Val(),
			"the delivered torrent and the stale entry left; the keeper stays")
		require.Equal(t, "skiplist", b.Client.ObjectEncoding(ctx, index).Val())

		// A lost mark: the backstop indexes the torrent, with the keeper.
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(900, 900))
		f.flush()
		require.NoError(t, b.Client.Del(ctx, index).Err())
		indexed, err := f.store.FeedBackstop(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, indexed, "the keeper is not counted")
		require.Equal(t, "skiplist", b.Client.ObjectEncoding(ctx, index).Val())
		rows, err := f.store.FeedRound(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, 1, rows)
		require.Equal(t, int64(900), l.newest["alice:"+btstore.HexInfoHash(hash)].Uploaded)
	})
}

// A user purged while its row waits in the feed loses nothing the site
// has not received: the row is the record's figures at its newest seq,
// kept apart from the record, so the purge deletes the record and the
// round still delivers the row.
func TestFeedDeliversTheRowOfAPurgedRecord(t *testing.T) {
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
		require.Equal(t, []string{fmt.Sprintf("alice:%d", want.Seq)}, fields, "the row waits at its seq")

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
