package swarm_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// dueEntries returns every swarm in the due index with its score.
func dueEntries(t *testing.T, b redistest.Backend) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for shard := range btstore.DueShards {
		zs, err := b.Client.ZRangeWithScores(context.Background(), btstore.DueKey(shard), 0, -1).Result()
		require.NoError(t, err)
		for _, z := range zs {
			out[z.Member.(string)] = z.Score
		}
	}
	return out
}

func TestSweepExpiresPeersWithoutEvents(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		// Nobody listens for expiry events here: only the sweep removes.
		f := newFixture(t, b, swarm.Config{Interval: 30 * time.Minute})
		ctx := context.Background()
		hash := infoHash("sweep")
		f.announce(hash, peerID("-TR", 1), 1, seeding)
		f.announce(hash, peerID("-TR", 2), 2)
		firstDeadline := float64(epoch.Add(time.Hour).UnixMilli())
		require.Equal(t, map[string]float64{fmt.Sprintf("%x", hash): firstDeadline}, dueEntries(t, b))

		f.clock.Advance(40 * time.Minute)
		f.announce(hash, peerID("-TR", 2), 2)
		f.flush() // a plain re-announce's refresh is written behind
		removed, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, removed, "nothing is due before two intervals")

		f.clock.Advance(21 * time.Minute) // the seeder missed two intervals
		removed, err = f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, removed)
		info := f.torrent(hash)
		require.Equal(t, int64(0), info.Seeders)
		require.Equal(t, int64(1), info.Leechers)
		resp := f.announce(hash, peerID("-TR", 3), 3)
		require.Equal(t, []bittorrent.PeerID{peerID("-TR", 2)}, peerIDs(resp.Peers), "the expired seeder is never handed out")
		st := f.stats()
		require.Equal(t, int64(0), st.Seeders)
		require.Equal(t, int64(2), st.Leechers)
		// The swarm stays due at its next deadline: the leecher's.
		require.Equal(t, map[string]float64{fmt.Sprintf("%x", hash): float64(epoch.Add(100 * time.Minute).UnixMilli())},
			dueEntries(t, b))

		f.clock.Advance(2 * time.Hour)
		removed, err = f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, removed)
		require.Empty(t, dueEntries(t, b), "an empty swarm leaves the due index")
		ttl, err := b.Client.PTTL(ctx, btstore.PeerKey(hash, peerID("-TR", 2))).Result()
		require.NoError(t, err)
		require.Equal(t, 24*time.Hour, ttl.Round(time.Hour), "an expired peer's record is kept for PeerRetention")
		st = f.stats()
		require.Equal(t, swarm.Stats{Announces: 4, Requests: 4}, st)

		// Its open-mode record now expires on its own.
		ttl, err = b.Client.PTTL(ctx, btstore.TorrentKey(hash)).Result()
		require.NoError(t, err)
		require.Equal(t, 24*time.Hour, ttl.Round(time.Hour))
		f.announce(hash, peerID("-TR", 4), 4)
		ttl, err = b.Client.PTTL(ctx, btstore.TorrentKey(hash)).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "a returning peer keeps the record")
		require.Len(t, dueEntries(t, b), 1, "the reborn swarm is indexed again")
	})
}

func TestSweepWorksOffManySwarmsAndLargeSwarms(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		// 300 swarms of one peer (several rounds per shard on some) and
		// one swarm of 250 peers (several batches of one swarm).
		for i := range 300 {
			f.announce(infoHash(fmt.Sprint("many-", i)), peerID("-TR", i), i)
		}
		big := infoHash("big")
		for i := range 250 {
			f.announce(big, peerID("-TR", i), i)
		}
		f.clock.Advance(61 * time.Minute)
		removed, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 550, removed)
		require.Empty(t, dueEntries(t, b))
		require.Equal(t, int64(0), f.stats().Leechers)
		require.Equal(t, int64(0), f.torrent(big).Leechers)
	})
}

func TestSweepUpdatesUserSets(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{HnR: swarm.HnRPolicy{MinSeedTime: time.Hour}})
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), seeding, event(bittorrent.EventCompleted))
		require.Equal(t, []string{"t1"}, f.user("alice").Active)
		f.clock.Advance(2 * time.Hour)
		removed, err := f.store.Sweep(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, removed)
		u := f.user("alice")
		require.Empty(t, u.Active)
		require.Equal(t, []string{"t1"}, u.HnR, "a snatcher who vanished without seeding")
	})
}

// disableNotifications clears notify-keyspace-events everywhere, so a
// test proves that Start turns expiry events on by itself.
func disableNotifications(t *testing.T, b redistest.Backend) {
	t.Helper()
	ctx := context.Background()
	off := func(ctx context.Context, c *redis.Client) error {
		return c.ConfigSet(ctx, "notify-keyspace-events", "").Err()
	}
	if cluster, ok := b.Client.(*redis.ClusterClient); ok {
		require.NoError(t, cluster.ForEachMaster(ctx, off))
		return
	}
	require.NoError(t, off(ctx, b.Client.(*redis.Client)))
}

// TestKeyspaceEventExpiresPeers: builds before issue 27's cut wrote a
// timeout key per peer, expiring at its deadline; this one writes none
// (the sweep expires peers), but during a rolling upgrade an older
// frontend still writes them, and their expiry events still remove the
// peer promptly. The keys are written here by hand, as that build did.
func TestKeyspaceEventExpiresPeers(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		disableNotifications(t, b)
		// The sweep would run only after an hour: removals here come from events.
		f, _ := privateFixture(t, b, swarm.Config{SweepInterval: time.Hour})
		ctx := context.Background()
		require.NoError(t, f.store.Start(ctx))

		// Swarms on every master of a cluster (events are node-local).
		var hashes []bittorrent.InfoHash
		for i := range 12 {
			hash := infoHash(fmt.Sprint("event-", i))
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, fmt.Sprint("e", i)))
			f.announce(hash, peerID("-TR", i), i, passkey("passkeyA"), seeding)
			hashes = append(hashes, hash)
		}
		// A peer that announced again since its timeout key was set must
		// survive the event of that key.
		survivor := hashes[0]
		f.clock.Advance(61 * time.Minute)
		f.announce(survivor, peerID("-TR", 0), 0, passkey("passkeyA"), seeding)
		// The deadline has passed by the store's clock; the older build's
		// timeout keys expire now.
		var timeoutKeys []string
		for i, hash := range hashes {
			key := btstore.TimeoutKey(hash, peerID("-TR", i), "alice")
			n, err := b.Client.Exists(ctx, key).Result()
			require.NoError(t, err)
			require.Zero(t, n, "this build writes no timeout key (peer %d)", i)
			require.NoError(t, b.Client.Set(ctx, key, "1", time.Millisecond).Err())
			timeoutKeys = append(timeoutKeys, key)
		}
		// Touch the keys until Redis has deleted them: a read of an expired
		// key deletes it, and the deletion is what publishes the event.
		// Left to Redis's active expiry, which samples 20 volatile keys of
		// the whole database per cycle, a key among the thousands other
		// tests leave could wait many seconds.
		expireAll := func() {
			require.Eventually(t, func() bool {
				for _, key := range timeoutKeys {
					if n, err := b.Client.Exists(ctx, key).Result(); err != nil || n != 0 {
						return false
					}
				}
				return true
			}, 10*time.Second, time.Millisecond)
		}
		expireAll()
		// Pub/sub is fire and forget: a message can be lost (a subscriber
		// reconnecting, a removal failing its retries on a loaded node), and
		// the sweep is what removes such a peer, surely but later. So a
		// round whose events have not all removed their peers within 2 s
		// sets the keys again to expire at once: a peer still there gets a
		// new event, a removed one a harmless repeat. A master whose events
		// never arrive still fails the test; rounds past the first are
		// logged so a pattern would show.
		want := int64(len(hashes) - 1)
		var last swarm.ExpiryStats
		removedByEvents := func() bool {
			last = f.store.ExpiryStats()
			return last.ExpiredByEvent == want && last.EventsReceived >= int64(len(hashes))
		}
		waitRemoved := func(within time.Duration) bool {
			for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				if removedByEvents() {
					return true
				}
			}
			return removedByEvents()
		}
		rounds := 1
		for deadline := time.Now().Add(30 * time.Second); !waitRemoved(2 * time.Second); rounds++ {
			require.True(t, time.Now().Before(deadline), "every expired peer is removed by its key's event within 30 s: %+v after %d rounds", last, rounds)
			for _, key := range timeoutKeys {
				require.NoError(t, b.Client.Set(ctx, key, "1", time.Millisecond).Err())
			}
			expireAll()
		}
		if rounds > 1 {
			t.Logf("events removed every expired peer after %d rounds: %+v", rounds, last)
		}
		removed, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, removed, "events removed every expired peer: nothing is left for the sweep")
		for _, hash := range hashes {
			want := int64(0)
			if hash == survivor {
				want = 1
			}
			require.Equal(t, want, f.torrent(hash).Seeders)
		}
		require.Equal(t, []string{"e0"}, f.user("alice").Active)
		require.NoError(t, f.store.Stop())
	})
}

func TestStartStop(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.Start(ctx))
		require.Error(t, f.store.Start(ctx), "a second Start is refused")
		f.announce(infoHash("stop"), peerID("-TR", 1), 1)
		require.NoError(t, f.store.Stop())
		require.NoError(t, f.store.Stop())
		// Stop flushed the batch.
		stats, err := f.store.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), stats.Announces)

		never, err := swarm.New(b.Client, swarm.Config{Logger: quietLogger})
		require.NoError(t, err)
		require.NoError(t, never.Stop(), "Stop without Start")
	})
}

func TestConfigValidation(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for name, cfg := range map[string]swarm.Config{
			"MinInterval":     {Interval: time.Minute, MinInterval: time.Hour},
			"PeerTimeout":     {Interval: time.Hour, PeerTimeout: time.Minute},
			"CacheTTL":        {CacheTTL: -time.Second},
			"MaxNumWant":      {MaxNumWant: -1},
			"HnR.MinRatio":    {HnR: swarm.HnRPolicy{MinRatio: -1}},
			"HnR.MinSeedTime": {HnR: swarm.HnRPolicy{MinSeedTime: -1}},
		} {
			_, err := swarm.New(b.Client, cfg)
			require.ErrorContains(t, err, name)
		}
		s, err := swarm.New(b.Client, swarm.Config{Interval: 10 * time.Minute})
		require.NoError(t, err)
		cfg := s.Config()
		require.Equal(t, 5*time.Minute, cfg.MinInterval)
		require.Equal(t, 20*time.Minute, cfg.PeerTimeout, "two announce intervals")
	})
}

// TestUnregisteredTorrentLeavesRankingsWhenItsPeersExpire: a torrent
// deleted while it had a seeder must not come back into the rankings with a
// negative count when that seeder's expiry is flushed.
func TestUnregisteredTorrentLeavesRankingsWhenItsPeersExpire(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("deleted-later")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "77"))
		f.announce(hash, peerID("-SD0001-", 1), 1, seeding)
		f.flush()
		top, err := f.store.Top(ctx, btstore.IndexSeeders, 10)
		require.NoError(t, err)
		require.Len(t, top, 1)

		require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		f.clock.Advance(2 * time.Hour)
		_, err = f.store.Sweep(ctx)
		require.NoError(t, err)
		f.flush()
		for _, index := range []btstore.Index{btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches} {
			top, err = f.store.Top(ctx, index, 10)
			require.NoError(t, err)
			for _, r := range top {
				require.Positive(t, r.Count, "index %v holds %x with count %d", index, r.InfoHash, r.Count)
			}
		}
	})
}

// A swarm that empties and is reborn before the sweep settles its due
// entry must not be dropped from the due index: the reborn swarm's
// announce re-scores the stale entry, so the sweep's settle (which
// removes the entry only when its score is still the one the sweep read)
// leaves it.
func TestRebornSwarmReplacesItsStaleDueEntry(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{Interval: 30 * time.Minute})
		hash := infoHash("reborn")
		member := fmt.Sprintf("%x", hash)
		f.announce(hash, peerID("-TR", 1), 1)
		stale := float64(epoch.Add(time.Hour).UnixMilli())
		require.Equal(t, map[string]float64{member: stale}, dueEntries(t, b))

		// The peer leaves; the swarm is empty but its entry stays until a sweep.
		f.announce(hash, peerID("-TR", 1), 1, event(bittorrent.EventStopped))
		require.Equal(t, map[string]float64{member: stale}, dueEntries(t, b))

		// Past the stale score, a new peer is born into the swarm.
		f.clock.Advance(2 * time.Hour)
		f.announce(hash, peerID("-TR", 2), 2)
		fresh := float64(epoch.Add(3 * time.Hour).UnixMilli())
		require.Equal(t, map[string]float64{member: fresh}, dueEntries(t, b),
			"the reborn swarm's entry carries its new deadline, not the stale one a concurrent sweep may have read")

		removed, err := f.store.Sweep(context.Background())
		require.NoError(t, err)
		require.Zero(t, removed)
		require.Equal(t, map[string]float64{member: fresh}, dueEntries(t, b))
	})
}

// TestPeersOfTheOldLayoutCountAnswerAndExpire: builds before issue 27's
// cut also wrote a timeout key per peer (STRING, PX at its deadline); the
// rest of a peer (record, role entry, deadline, due index) is written as
// before. Peers an older frontend wrote, timeout key included, are counted
// and handed out, refreshed, and expired by the sweep at their deadline as
// this build's are, and a stale timeout key of a refreshed peer removes
// nothing when it expires.
func TestPeersOfTheOldLayoutCountAnswerAndExpire(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{SweepInterval: time.Hour})
		ctx := context.Background()
		hash := infoHash("old-layout")
		var keys []string
		for i := range 4 {
			opts := []announceOpt{}
			if i == 0 {
				opts = append(opts, seeding)
			}
			f.announce(hash, peerID("-OL", i), i, opts...)
			key := btstore.TimeoutKey(hash, peerID("-OL", i), "")
			require.NoError(t, b.Client.Set(ctx, key, "1", time.Hour).Err(), "the older build's timeout key")
			keys = append(keys, key)
		}
		info := f.torrent(hash)
		require.Equal(t, int64(1), info.Seeders)
		require.Equal(t, int64(3), info.Leechers)

		// A new peer is handed every old-layout peer.
		resp := f.announce(hash, peerID("-OL", 9), 9)
		require.ElementsMatch(t, []bittorrent.PeerID{peerID("-OL", 0), peerID("-OL", 1), peerID("-OL", 2), peerID("-OL", 3)},
			peerIDs(resp.Peers))

		// Peer 1 re-announces half a timeout later: its deadline moves, its
		// old timeout key does not (nothing writes it now).
		f.clock.Advance(30 * time.Minute)
		f.announce(hash, peerID("-OL", 1), 1, transfer(500, 500))
		f.flush()
		rec := b.Client.HMGet(ctx, btstore.PeerKey(hash, peerID("-OL", 1)), "uploaded", "last_announce").Val()
		require.Equal(t, []any{"500", fmt.Sprint(epoch.Add(30 * time.Minute).UnixMilli())}, rec)

		// The older build's key of the refreshed peer expires: its event
		// path (expire.lua for that member) removes nothing.
		removed, err := swarm.ExpireMember(ctx, f.store, hash, peerID("-OL", 1), "")
		require.NoError(t, err)
		require.Zero(t, removed, "a refreshed peer survives its old timeout key")

		// Past the first deadlines the sweep removes peers 0, 2, 3 and 9,
		// old layout or not, and keeps peer 1.
		f.clock.Advance(31 * time.Minute)
		swept, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, swept)
		f.flush()
		info = f.torrent(hash)
		require.Equal(t, int64(0), info.Seeders)
		require.Equal(t, int64(1), info.Leechers)
		resp = f.announce(hash, peerID("-OL", 8), 8)
		require.Equal(t, []bittorrent.PeerID{peerID("-OL", 1)}, peerIDs(resp.Peers))
		for _, key := range keys {
			ttl, err := b.Client.PTTL(ctx, key).Result()
			require.NoError(t, err)
			require.Positive(t, ttl, "an old timeout key is left to its TTL: %s", key)
		}
	})
}
