package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func TestWindowOfZeroOrShorterThanARevivalIsRefused(t *testing.T) {
	store := swarm.Config{FlushInterval: time.Second, CacheTTL: 10 * time.Second, PeerTimeout: time.Hour, RepairInterval: time.Hour}
	require.Equal(t, time.Hour, orphans.MinWindow(store))
	for _, w := range []time.Duration{0, -time.Minute} {
		err := orphans.CheckWindow(w, store)
		require.ErrorContains(t, err, "racing every operation that revives one")
	}
	err := orphans.CheckWindow(30*time.Minute, store)
	require.ErrorContains(t, err, "peers of an unregistered torrent leave only at their deadline")
	require.ErrorContains(t, err, "want more than 1h0m0s")
	err = orphans.CheckWindow(time.Hour, store)
	require.Error(t, err, "equal is not longer")
	require.NoError(t, orphans.CheckWindow(time.Hour+time.Millisecond, store))
	store.RepairInterval = 3 * time.Hour
	require.ErrorContains(t, orphans.CheckWindow(2*time.Hour, store), "a repair pass")
	store.RepairInterval = time.Hour
	store.ReaperClaimWindow = 5 * time.Hour
	require.Equal(t, 5*time.Hour, orphans.MinWindow(store))
	for _, w := range []time.Duration{2 * time.Hour, 5 * time.Hour} {
		err := orphans.CheckWindow(w, store)
		require.ErrorContains(t, err, "the reaper's reseed claim window (claim_window)")
		require.ErrorContains(t, err, "want more than 5h0m0s")
	}
	require.NoError(t, orphans.CheckWindow(5*time.Hour+time.Millisecond, store))
	_, _, err = orphans.ParseSettings(json.RawMessage(`{"window":"4h"}`), store)
	require.ErrorContains(t, err, "claim_window", "the settings name it too")
	store.ReaperClaimWindow = 0

	_, _, err = orphans.ParseSettings(json.RawMessage(`{"window":"0s"}`), store)
	require.ErrorContains(t, err, "racing")
	_, _, err = orphans.ParseSettings(json.RawMessage(`{"window":"soon"}`), store)
	require.ErrorContains(t, err, "not a duration")
	_, _, err = orphans.ParseSettings(json.RawMessage(`{"windw":"1h"}`), store)
	require.ErrorContains(t, err, "unknown field")
	_, _, err = orphans.ParseSettings(json.RawMessage(`{"scan_count":100,"max_keys_per_tick":10}`), store)
	require.ErrorContains(t, err, "at least scan_count")
	s, p, err := orphans.ParseSettings(json.RawMessage(`{"enabled":true}`), store)
	require.NoError(t, err)
	require.True(t, s.Enabled)
	require.Equal(t, orphans.Policy{Window: 24 * time.Hour, Period: 10 * time.Second, ScanCount: 500, MaxKeysPerTick: 20000,
		BackstopPeriod: 24 * time.Hour}, p)

	_, err = orphans.New(nil, orphans.Config{Store: store, Policy: p})
	require.Error(t, err)
}

// privateTorrent registers a torrent, lets alice seed and bob snatch it,
// then both leave; the swarm is empty and the user records stay.
func privateTorrent(t *testing.T, f *fixture, name, id string) bittorrent.InfoHash {
	t.Helper()
	ctx := context.Background()
	hash := infoHash(name)
	require.NoError(t, f.store.Register(ctx, hash, swarm.Registration{ID: id, Uploader: "alice"}))
	require.NoError(t, f.announce(hash, 1, pkPrefix+"alice", 0, 0, bittorrent.EventStarted))
	require.NoError(t, f.announce(hash, 2, pkPrefix+"bob", 100, 0, bittorrent.EventStarted))
	f.clock.Advance(time.Minute)
	require.NoError(t, f.announce(hash, 2, pkPrefix+"bob", 0, 0, bittorrent.EventCompleted))
	require.NoError(t, f.announce(hash, 1, pkPrefix+"alice", 0, 100, bittorrent.EventStopped))
	require.NoError(t, f.announce(hash, 2, pkPrefix+"bob", 0, 0, bittorrent.EventStopped))
	require.NoError(t, f.store.Flush(ctx))
	return hash
}

func TestRemovedTorrentLeavesNothingAfterOneWindowAndTwoPasses(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		gone := privateTorrent(t, f, "gone", "t1")
		live := privateTorrent(t, f, "live", "t2")
		// Records the other parts keep under the torrent's tag.
		require.NoError(t, b.Client.HSet(ctx, btstore.ReaperKey(gone), "state", "unseeded", "initial_at", f.clock.Now().UnixMilli()).Err())
		require.NoError(t, b.Client.ZAdd(ctx, btstore.ScoreSeenKey(gone), redisZ(f.clock.Now().UnixMilli(), "ip")).Err())
		require.NoError(t, b.Client.HSet(ctx, btstore.ReaperClaimsKey(gone), "bob", "invited").Err())
		require.Equal(t, int64(1), b.Client.Exists(ctx, btstore.SnatchersKey(gone)).Val(), "bob's snatch is listed")
		require.Contains(t, f.user("bob").Complete, "t1")
		require.Contains(t, f.torrentKeys(gone), btstore.UserTorrentKey(gone, "bob"))
		require.Contains(t, f.torrentKeys(gone), btstore.PeerKey(gone, peerID(2)), "peer records outlive their peer")
		// Unique-IP metrics of both, counters and markers.
		ipm := ipmetrics.NewStore(b.Client, f.clock, 0)
		var regs []ipmetrics.Registration
		for _, hash := range []bittorrent.InfoHash{gone, live} {
			regs = append(regs, ipmetrics.Registration{IP: netip.MustParseAddr("10.0.0.9"), Hash: hash, Torrent: true,
				Loc: ipmetrics.Location{Country: "DE", City: "Berlin"}})
		}
		counted, err := ipm.Register(ctx, regs)
		require.NoError(t, err)
		require.Positive(t, counted)
		require.Contains(t, f.torrentKeys(gone), btstore.IPMTorrentTotalKey(gone))

		require.NoError(t, f.store.UnregisterTorrent(ctx, gone))
		f.clock.Advance(window) // exactly the window: still protected
		require.Zero(t, f.pass().Removed())
		require.Contains(t, f.torrentKeys(gone), btstore.TorrentKey(gone))

		f.clock.Advance(time.Millisecond)
		first := f.pass()
		f.pass()
		require.Empty(t, f.torrentKeys(gone), "nothing under the removed torrent's tag")
		require.Equal(t, 1, first.Torrents)
		require.Equal(t, 2, first.UserRecords)
		require.Equal(t, 2, first.PeerRecords)
		require.Equal(t, 3, first.ReaperStates, "state, snatchers and claims")
		require.Equal(t, 1, first.SeenSets)
		require.Equal(t, 3, first.IPMetrics, "all-time and month counters, one IP's markers")
		for _, u := range []string{"alice", "bob"} {
			summary := f.user(u)
			for _, set := range [][]string{summary.Active, summary.Complete, summary.Incomplete, summary.HnR} {
				require.NotContains(t, set, "t1")
			}
			require.NotContains(t, b.Client.HKeys(ctx, btstore.UserVersionsKey(u)).Val(), "t1")
			require.NotContains(t, b.Client.HKeys(ctx, btstore.UserTorrentsKey(u)).Val(), "t1")
		}
		// The live torrent, just as old, keeps everything.
		require.Contains(t, f.torrentKeys(live), btstore.UserTorrentKey(live, "bob"))
		require.Contains(t, f.user("bob").Complete, "t2")
		require.Equal(t, "t2", b.Client.HGet(ctx, btstore.TorrentKey(live), "id").Val())
		require.Contains(t, f.torrentKeys(live), btstore.IPMTorrentTotalKey(live))

		// Registered again, it is a fresh torrent: no snatch or user
		// record survives.
		require.NoError(t, f.store.Register(ctx, gone, swarm.Registration{ID: "t1"}))
		require.NoError(t, f.announce(gone, 2, pkPrefix+"bob", 100, 0, bittorrent.EventStarted))
		info, err := f.store.Torrent(ctx, gone)
		require.NoError(t, err)
		require.Equal(t, int64(1), info.Announces)
		require.Zero(t, info.Snatches)
		snatched := b.Client.HGet(ctx, btstore.UserTorrentKey(gone, "bob"), "snatched").Val()
		require.Contains(t, []string{"", "0"}, snatched, "bob's old snatch went with the torrent")
	})
}

func TestLiveTorrentsAreKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		idle := privateTorrent(t, f, "idle", "t1") // registered, nobody here for ages
		busy := privateTorrent(t, f, "busy", "t2")
		require.NoError(t, f.announce(busy, 3, pkPrefix+"alice", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.store.UnregisterTorrent(ctx, busy)) // unregistered, but a peer is still in the swarm
		recent := privateTorrent(t, f, "recent", "t3")
		f.clock.Advance(10 * window)
		require.NoError(t, f.store.UnregisterTorrent(ctx, recent)) // unregistered just now
		before := map[bittorrent.InfoHash][]string{}
		for _, h := range []bittorrent.InfoHash{idle, busy, recent} {
			before[h] = f.torrentKeys(h)
		}
		r := f.pass()
		require.Zero(t, r.Torrents+r.UserRecords+r.PeerRecords+r.ReaperStates, "%+v", r)
		for h, keys := range before {
			require.Equal(t, keys, f.torrentKeys(h))
		}
	})
}

func TestOpenSwarmWhoseLastPeerLeftLeavesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false)
		ctx := context.Background()
		hash := infoHash("open")
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStopped))
		require.Greater(t, b.Client.PTTL(ctx, btstore.TorrentKey(hash)).Val(), time.Duration(0), "retention runs")
		f.clock.Advance(window + time.Second)
		require.Zero(t, f.pass().Removed(), "a record whose retention runs expires by itself")
		require.NotEmpty(t, f.torrentKeys(hash))

		// The record expired (retention): its peer record goes too.
		require.NoError(t, b.Client.Del(ctx, btstore.TorrentKey(hash)).Err())
		r := f.pass()
		require.Equal(t, 1, r.PeerRecords)
		require.Empty(t, f.torrentKeys(hash))

		// A record that lost its TTL (written before retention existed)
		// is removed once stale.
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStopped))
		require.NoError(t, b.Client.Persist(ctx, btstore.TorrentKey(hash)).Err())
		require.Zero(t, f.pass().Removed(), "too recent")
		f.clock.Advance(window + time.Second)
		r = f.pass()
		require.Equal(t, 1, r.Torrents)
		require.Empty(t, f.torrentKeys(hash))
	})
}

func TestStrayTimeoutKeyWithoutTTLIsRemoved(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		hash := infoHash("stray")
		stray := btstore.TimeoutKey(hash, peerID(9), "alice")
		require.NoError(t, b.Client.Set(ctx, stray, "1", 0).Err())
		withTTL := btstore.TimeoutKey(hash, peerID(8), "alice")
		require.NoError(t, b.Client.Set(ctx, withTTL, "1", time.Hour).Err())
		r := f.pass()
		require.Equal(t, 1, r.Timeouts)
		require.Equal(t, []string{withTTL}, f.torrentKeys(hash), "a running timeout expires by itself")
	})
}

func TestUserEntriesWhoseRecordIsGone(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		hash := privateTorrent(t, f, "entries", "t1")
		require.Equal(t, btstore.HexInfoHash(hash), b.Client.HGet(ctx, btstore.UserTorrentsKey("bob"), "t1").Val(),
			"an entry names its torrent")
		// An entry left behind by a record deleted by hand, and an old
		// entry written before entries named their torrent.
		require.NoError(t, b.Client.Del(ctx, btstore.UserTorrentKey(hash, "bob")).Err())
		require.NoError(t, b.Client.SAdd(ctx, btstore.UserSetKey("bob", btstore.UserComplete), "legacy").Err())
		require.NoError(t, b.Client.HSet(ctx, btstore.UserVersionsKey("bob"), "legacy", 5).Err())
		require.Zero(t, f.pass().UserEntries, "versions are recent")
		f.clock.Advance(window + time.Second)
		r := f.pass()
		require.Equal(t, 1, r.UserEntries)
		require.Equal(t, []string{"legacy"}, f.user("bob").Complete, "an entry of unknown torrent is kept")
		require.Contains(t, f.user("alice").Complete, "t1", "alice's record is there")
	})
}

func TestRegistryEntryOfUnregisteredTorrent(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		registered := infoHash("registered")
		require.NoError(t, f.store.RegisterTorrent(ctx, registered, "t1"))
		half := infoHash("half") // unregistration cut off before its registry step
		require.NoError(t, f.store.RegisterTorrent(ctx, half, "t2"))
		require.NoError(t, b.Client.HDel(ctx, btstore.TorrentKey(half), "id").Err())
		require.NoError(t, b.Client.HSet(ctx, btstore.TorrentKey(half), "unregistered", f.clock.Now().UnixMilli()).Err())
		ghost := infoHash("ghost") // no record at all
		require.NoError(t, b.Client.HSet(ctx, btstore.RegistryKey, btstore.HexInfoHash(ghost), "t3").Err())

		r := f.pass()
		require.Equal(t, 1, r.RegistryEntries, "the ghost goes; the half-unregistered one is recent")
		f.clock.Advance(window + time.Second)
		r = f.pass()
		require.Equal(t, 1, r.RegistryEntries)
		require.Equal(t, map[string]string{btstore.HexInfoHash(registered): "t1"}, b.Client.HGetAll(ctx, btstore.RegistryKey).Val())
	})
}

func TestScoreRevisionsOfGoneScoreRecords(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false)
		ctx := context.Background()
		scorer := scoring.New(b.Client, scoring.Policy{MinScore: 0.005, NewWindow: time.Hour, Untrack: true,
			TombstoneTTL: time.Hour, MaxPeers: 50, NoPeers: 0.5, FewPeers: 0.8, Growing: 1.2, Stale: 0.8, NewFraction: 0.05},
			f.clock, quietLogger)
		hash := infoHash("scored")
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStarted))
		ok, err := scorer.Track(ctx, hash)
		require.NoError(t, err)
		require.True(t, ok)
		// Removed from scoring, and its tombstone expired.
		for {
			item, err := scorer.NextItem(ctx, hash)
			require.NoError(t, err)
			out, err := scorer.Apply(ctx, item, scoring.Result{Max: 50})
			require.NoError(t, err)
			if out == scoring.Removed {
				break
			}
		}
		require.NoError(t, b.Client.Del(ctx, btstore.ScoreKey(hash)).Err())
		shard := int(hash[0]) % btstore.ScoreIndexShards
		require.True(t, b.Client.HExists(ctx, btstore.ScoreIndexRevsKey(shard), btstore.HexInfoHash(hash)).Val())

		require.Zero(t, f.pass().ScoreRevisions, "revision is recent")
		f.clock.Advance(window + time.Second)
		require.Equal(t, 1, f.pass().ScoreRevisions)
		require.False(t, b.Client.HExists(ctx, btstore.ScoreIndexRevsKey(shard), btstore.HexInfoHash(hash)).Val())

		// Tracked again, it is indexed (with counter revisions a record
		// created again started below the shard's and never was).
		ok, err = scorer.Track(ctx, hash)
		require.NoError(t, err)
		require.True(t, ok)
		rec, err := scorer.Record(ctx, hash)
		require.NoError(t, err)
		require.True(t, rec.Indexed)
	})
}

func TestTickIsBoundedAndResumesWhereItStopped(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		const n = 200 // more than two cleaners' due and backstop walks take in one tick each
		for i := range n {
			hash := infoHash("bulk" + strconv.Itoa(i))
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, "b"+strconv.Itoa(i)))
			require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		}
		f.clock.Advance(window + time.Second)
		small := f.newCleaner(orphans.Policy{Window: window, ScanCount: 10, MaxKeysPerTick: 20})
		other := f.newCleaner(orphans.Policy{Window: window, ScanCount: 10, MaxKeysPerTick: 20})
		removed, ticks := 0, 0
		for ticks < 100 && len(f.scan(btstore.TorrentRecordPattern)) > 0 {
			for _, c := range []*orphans.Cleaner{small, other} { // two frontends at once share the cursors
				r, err := c.Tick(ctx)
				require.NoError(t, err)
				require.LessOrEqual(t, r.Scanned, 8*(20+10), "each of the 8 walks stops within a page of its bound")
				removed += r.Torrents
			}
			ticks++
		}
		require.Equal(t, n, removed)
		require.Greater(t, ticks, 1, "the work was spread over ticks")
		passes, err := small.Passes(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, passes["torrents"], int64(1))
	})
}

func redisZ(score int64, member string) redis.Z {
	return redis.Z{Score: float64(score), Member: member}
}

// TestTorrentWithManyUsersGoesInChunks: a removed torrent with more user
// records than one script call takes (500) is finished in chunks, its
// record last.
func TestTorrentWithManyUsersGoesInChunks(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		hash := infoHash("crowded")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "t1"))
		now := f.clock.Now().UnixMilli()
		pipe := b.Client.Pipeline()
		const users = 1234
		for i := range users {
			user := "u" + strconv.Itoa(i)
			pipe.HSet(ctx, btstore.UserTorrentKey(hash, user), "peers", 0, "last_announce", now, "first_announce", now)
			pipe.SAdd(ctx, btstore.TorrentUsersKey(hash), user)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		f.clock.Advance(window + time.Second)
		r := f.pass()
		require.Equal(t, users, r.UserRecords)
		require.Equal(t, 1, r.Torrents)
		require.Empty(t, f.torrentKeys(hash))
	})
}

// A frontend killed with a change's feed row only in its memory (S5: rows
// are held by the frontend that answered, never written to Redis) loses
// nothing when cleanup deletes the record before any backstop ran: the
// script returns the record's figures as it deletes it and the cleaner
// hands them to Config.FeedDeleted (the lead's decision 5), here a live
// frontend's swarm.Store.FeedDeletedRecords, which delivers the row whose
// writer is not fed up to it.
func TestCleanupDeliversTheRowsOfRecordsAKilledWriterHeld(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clock := swarm.NewFakeClock(epoch)
		// What a started frontend's Start would have done: the records
		// are in this build's form.
		require.NoError(t, b.Client.Set(ctx, btstore.CreditFormKey, btstore.CreditFormDone, 0).Err())
		killed, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: quietLogger,
			OnFeed: func(context.Context, []swarm.FeedBatch) error { return errors.New("never delivers") }})
		require.NoError(t, err)
		t.Cleanup(func() { _ = killed.Stop() })
		require.NoError(t, killed.AddClient(ctx, "-TR", "Transmission"))
		require.NoError(t, killed.AddUser(ctx, pkPrefix+"alice", "alice"))
		hash := infoHash("orphan-fed")
		require.NoError(t, killed.Register(ctx, hash, swarm.Registration{ID: "t1"}))
		f := &fixture{t: t, b: b, store: killed, clock: clock}
		require.NoError(t, f.announce(hash, 1, pkPrefix+"alice", 100, 0, bittorrent.EventStarted))
		clock.Advance(time.Minute)
		require.NoError(t, f.announce(hash, 1, pkPrefix+"alice", 100, 1000, bittorrent.EventNone))
		clock.Advance(time.Minute)
		require.NoError(t, f.announce(hash, 1, pkPrefix+"alice", 100, 1500, bittorrent.EventStopped))
		require.NoError(t, killed.Flush(ctx))
		require.Positive(t, killed.FeedRowsHeld(), "the rows are only in the killed frontend's memory")
		record := btstore.UserTorrentKey(hash, "alice")
		seq, err := b.Client.HGet(ctx, record, "seq").Int64()
		require.NoError(t, err)
		require.Positive(t, seq)

		var mu sync.Mutex
		var rows []swarm.FeedRow
		live, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: quietLogger,
			OnFeed: func(_ context.Context, batches []swarm.FeedBatch) error {
				mu.Lock()
				defer mu.Unlock()
				for _, batch := range batches {
					require.Equal(t, hash, batch.InfoHash)
					rows = append(rows, batch.Rows...)
				}
				return nil
			}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = live.Stop() })
		cleaner, err := orphans.New(b.Client, orphans.Config{Store: live.Config(), Policy: fixturePolicy, Now: clock.Now,
			Logger: quietLogger, FeedDeleted: live.FeedDeletedRecords})
		require.NoError(t, err)

		require.NoError(t, live.UnregisterTorrent(ctx, hash))
		clock.Advance(window + time.Millisecond)
		for range 2 {
			_, err := cleaner.Pass(ctx)
			require.NoError(t, err)
		}
		require.Zero(t, b.Client.Exists(ctx, record).Val(), "cleanup deleted the record")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, rows, 1, "the deleted record's row, once")
		require.Equal(t, "alice", rows[0].UserID)
		require.Equal(t, seq, rows[0].Seq)
		require.Equal(t, int64(1500), rows[0].Uploaded)
		require.Equal(t, int64(1500), rows[0].UpCredited)
	})
}
