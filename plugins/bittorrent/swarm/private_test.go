package swarm_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func TestPrivateModeRefusals(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		me := peerID("-TR", 1)

		require.Equal(t, "a passkey is required", f.refuse(hash, me, 1))
		require.Equal(t, "unknown passkey", f.refuse(hash, me, 1, passkey("nosuchkey")))
		require.Contains(t, f.refuse(hash, me, 1, passkey("{bad}")), "malformed passkey")
		require.Equal(t, "unregistered torrent", f.refuse(infoHash("other"), me, 1, passkey("passkeyA")))
		require.Equal(t, "your client is not whitelisted", f.refuse(hash, peerID("-XX", 1), 1, passkey("passkeyA")))
		_, err := f.store.Torrent(ctx, infoHash("other"))
		require.ErrorIs(t, err, swarm.ErrNotFound, "a refused announce writes nothing")

		resp := f.announce(hash, me, 1, passkey("passkeyA"))
		require.Equal(t, int64(1), resp.Incomplete)
		info := f.torrent(hash)
		require.Equal(t, "t1", info.ID)

		// Another user cannot take over an active peer id.
		require.Equal(t, "peer_id is in use by another user in this swarm",
			f.refuse(hash, me, 1, passkey("passkeyB"), event(bittorrent.EventStopped)))
		require.Equal(t, int64(1), f.torrent(hash).Leechers)

		// Removing the user refuses them at once on this frontend.
		require.NoError(t, f.store.RemoveUser(ctx, pk("passkeyA")))
		require.Equal(t, "unknown passkey", f.refuse(hash, me, 1, passkey("passkeyA")))

		// Unregistering refuses the torrent.
		require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		require.Equal(t, "unregistered torrent", f.refuse(hash, peerID("-TR", 2), 2, passkey("passkeyB")))
		require.Empty(t, f.torrent(hash).ID)

		// Bad admin input.
		require.ErrorIs(t, f.store.RegisterTorrent(ctx, hash, "a{b}"), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.AddUser(ctx, pk("pk:1"), "u"), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.AddUser(ctx, pk("pk"), ""), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.AddClient(ctx, "", "x"), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.AddClient(ctx, "-TR0000000000000000000", "x"), swarm.ErrInvalid)
	})
}

func TestWhitelist(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.AddClient(ctx, "-qB4", "qBittorrent 4"))
		require.NoError(t, f.store.AddClient(ctx, "A2-", "aria2"))
		clients, err := f.store.Clients(ctx)
		require.NoError(t, err)
		require.Equal(t, []swarm.Client{{"-TR", "Transmission"}, {"-qB4", "qBittorrent 4"}, {"A2-", "aria2"}}, clients)

		f.announce(hash, peerID("-qB4", 1), 1, passkey("passkeyA"))
		f.announce(hash, peerID("A2-", 2), 2, passkey("passkeyA"))
		require.Equal(t, "your client is not whitelisted", f.refuse(hash, peerID("-qB3", 3), 3, passkey("passkeyA")))

		require.NoError(t, f.store.RemoveClient(ctx, "A2-"))
		require.Equal(t, "your client is not whitelisted", f.refuse(hash, peerID("A2-", 2), 2, passkey("passkeyA")))

		// An empty whitelist refuses every client.
		require.NoError(t, f.store.RemoveClient(ctx, "-TR"))
		require.NoError(t, f.store.RemoveClient(ctx, "-qB4"))
		clients, err = f.store.Clients(ctx)
		require.NoError(t, err)
		require.Empty(t, clients)
		require.Equal(t, "your client is not whitelisted", f.refuse(hash, peerID("-TR", 1), 1, passkey("passkeyA")))
	})
}

func TestRegistryChangesReachOtherFrontendsWithinCacheTTL(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{CacheTTL: 10 * time.Second})
		ctx := context.Background()
		other, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: f.clock, Logger: quietLogger})
		require.NoError(t, err)

		f.announce(hash, peerID("-TR", 5), 5, passkey("passkeyA")) // loads the whitelist
		require.Equal(t, "unknown passkey", f.refuse(hash, peerID("-TR", 1), 1, passkey("passkeyC")))
		require.NoError(t, other.AddUser(ctx, pk("passkeyC"), "carol"))
		require.NoError(t, other.AddClient(ctx, "-DE", "Deluge"))
		// Still cached here: the miss and the whitelist.
		require.Equal(t, "unknown passkey", f.refuse(hash, peerID("-TR", 1), 1, passkey("passkeyC")))
		require.Equal(t, "your client is not whitelisted", f.refuse(hash, peerID("-DE", 1), 1, passkey("passkeyA")))

		f.clock.Advance(11 * time.Second)
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyC"))
		// The first caller after expiry reloads the whitelist; it is not
		// served a stale copy because it is the one that reloads.
		f.announce(hash, peerID("-DE", 1), 1, passkey("passkeyA"))
	})
}

func TestPrivateScrape(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), seeding)
		_, err := f.store.Scrape(ctx, "", []bittorrent.InfoHash{hash})
		var clientErr *bittorrent.ClientError
		require.ErrorAs(t, err, &clientErr)
		_, err = f.store.Scrape(ctx, pk("wrong"), []bittorrent.InfoHash{hash})
		require.ErrorAs(t, err, &clientErr)

		// An open-mode record of an unregistered hash is not revealed.
		open := infoHash("open-record")
		openStore, err := swarm.New(b.Client, swarm.Config{Logger: quietLogger})
		require.NoError(t, err)
		_, err = openStore.Announce(ctx, request(open, peerID("-TR", 1), 1, seeding))
		require.NoError(t, err)

		entries, err := f.store.Scrape(ctx, pk("passkeyB"), []bittorrent.InfoHash{hash, open})
		require.NoError(t, err)
		require.Equal(t, []bittorrent.ScrapeEntry{{Complete: 1}, {}}, entries)
	})
}

func TestUserSetsAndHitAndRuns(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{HnR: swarm.HnRPolicy{MinSeedTime: time.Hour}})
		ctx := context.Background()
		second := infoHash("second")
		require.NoError(t, f.store.RegisterTorrent(ctx, second, "t2"))
		alice, bob := peerID("-TR", 1), peerID("-TR", 2)

		f.announce(hash, alice, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(second, alice, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, bob, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		u := f.user("alice")
		require.Equal(t, []string{"t1", "t2"}, u.Active)
		require.Equal(t, []string{"t1", "t2"}, u.Incomplete)
		require.Empty(t, u.Complete)
		require.Empty(t, u.HnR)
		u = f.user("bob")
		require.Equal(t, []string{"t1"}, u.Active)
		require.Equal(t, []string{"t1"}, u.Complete, "a seeder from the start has it complete")
		require.Empty(t, u.Incomplete)

		// Alice downloads t1, seeds it ten minutes and leaves: a hit-and-run.
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, alice, 1, passkey("passkeyA"), seeding, transfer(0, 1000), event(bittorrent.EventCompleted))
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, alice, 1, passkey("passkeyA"), seeding, transfer(200, 1000), event(bittorrent.EventStopped))
		u = f.user("alice")
		require.Equal(t, []string{"t2"}, u.Active)
		require.Equal(t, []string{"t1"}, u.Complete)
		require.Equal(t, []string{"t2"}, u.Incomplete)
		require.Equal(t, []string{"t1"}, u.HnR)
		require.Equal(t, int64(200), u.Uploaded)
		require.Equal(t, int64(1000), u.Downloaded)

		// She comes back (a new client session, a new peer id) and seeds
		// long enough: not a hit-and-run any more, while seeding or after.
		again := peerID("-TR", 11)
		f.announce(hash, again, 11, passkey("passkeyA"), seeding, event(bittorrent.EventStarted))
		require.Empty(t, f.user("alice").HnR, "a user seeding it is not a hit-and-run")
		for range 2 {
			f.clock.Advance(30 * time.Minute)
			f.announce(hash, again, 11, passkey("passkeyA"), seeding)
		}
		f.announce(hash, again, 11, passkey("passkeyA"), seeding, event(bittorrent.EventStopped))
		u = f.user("alice")
		require.Empty(t, u.HnR, "70 minutes of seeding in all passes a 1h minimum")
		require.Equal(t, []string{"t2"}, u.Active)

		// Bob never snatched: leaving is never a hit-and-run.
		f.announce(hash, bob, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStopped))
		u = f.user("bob")
		require.Empty(t, u.Active)
		require.Empty(t, u.HnR)
		require.Equal(t, []string{"t1"}, u.Complete)
	})
}

func TestHitAndRunByRatio(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{HnR: swarm.HnRPolicy{MinRatio: 1}})
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), seeding, transfer(0, 1000), event(bittorrent.EventCompleted))
		f.announce(hash, me, 1, passkey("passkeyA"), seeding, transfer(999, 1000), event(bittorrent.EventStopped))
		require.Equal(t, []string{"t1"}, f.user("alice").HnR)

		other := infoHash("ratio-ok")
		require.NoError(t, f.store.RegisterTorrent(context.Background(), other, "t9"))
		f.announce(other, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(other, me, 1, passkey("passkeyA"), seeding, transfer(0, 1000), event(bittorrent.EventCompleted))
		f.announce(other, me, 1, passkey("passkeyA"), seeding, transfer(1000, 1000), event(bittorrent.EventStopped))
		require.Equal(t, []string{"t1"}, f.user("alice").HnR, "ratio 1.0 is enough")
	})
}

func TestUserSetsRepairAfterLostFlush(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"))
		f.flush()
		// The sets lose their state (a crash before a flush, say).
		require.NoError(t, b.Client.Del(ctx, btstore.UserSetKey("alice", btstore.UserActive)).Err())
		require.Empty(t, f.user("alice").Active)
		report, err := f.store.Repair(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, report.UserStates)
		require.Equal(t, []string{"t1"}, f.user("alice").Active)
	})
}

func TestScriptsReloadAfterScriptFlush(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		flushScripts := func() {
			if cluster, ok := b.Client.(*redis.ClusterClient); ok {
				require.NoError(t, cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
					return errors.Join(c.ScriptFlush(ctx).Err(), c.FunctionFlush(ctx).Err())
				}))
				return
			}
			require.NoError(t, b.Client.ScriptFlush(ctx).Err())
			require.NoError(t, b.Client.FunctionFlush(ctx).Err())
		}
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"))
		f.flush()
		// A restarted Redis (without persistence) has no scripts and no
		// functions: announces, flushes (user sets)
		// and sweeps (expire, due_settle) load theirs again.
		flushScripts()
		for i := range 5 {
			other := infoHash(fmt.Sprint("reload-", i))
			require.NoError(t, f.store.RegisterTorrent(ctx, other, fmt.Sprint("r", i)))
			f.announce(other, peerID("-TR", 1), 1, passkey("passkeyA"))
		}
		flushScripts()
		require.Len(t, f.user("alice").Active, 6)
		flushScripts()
		f.clock.Advance(2 * time.Hour)
		removed, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 6, removed)
		require.Empty(t, f.user("alice").Active)
	})
}

// A leecher that finishes and stops in one announce ("stopped, left=0",
// what aria2c sends) has snatched the torrent; the snatch counts once per
// user and torrent, whatever the user's peers do afterwards.
func TestSnatchOnLeftReachingZeroCountsOncePerUser(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		alice := peerID("-TR", 1)
		f.announce(hash, alice, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		require.Equal(t, int64(0), f.torrent(hash).Snatches)

		resp := f.announce(hash, alice, 1, passkey("passkeyA"), seeding, event(bittorrent.EventStopped))
		require.Equal(t, int64(1), resp.Downloaded, "left went from 1000 to 0: a snatch")
		require.Equal(t, int64(1), f.torrent(hash).Snatches)
		require.Equal(t, []string{"t1"}, f.user("alice").Complete)

		// The same user again: the same peer restarting as a leecher and
		// finishing, then a new peer id sending completed. Still one.
		f.announce(hash, alice, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, alice, 1, passkey("passkeyA"), seeding, event(bittorrent.EventStopped))
		again := peerID("-TR", 11)
		f.announce(hash, again, 11, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, again, 11, passkey("passkeyA"), seeding, event(bittorrent.EventCompleted))
		f.announce(hash, again, 11, passkey("passkeyA"), seeding, event(bittorrent.EventStopped))
		require.Equal(t, int64(1), f.torrent(hash).Snatches, "one snatch per user and torrent")

		// A seeder from the start never went from left>0 to 0: no snatch.
		bob := peerID("-TR", 2)
		f.announce(hash, bob, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, bob, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStopped))
		require.Equal(t, int64(1), f.torrent(hash).Snatches)

		// Another user finishing without completed is a second snatch.
		f.announce(hash, peerID("-TR", 3), 3, passkey("passkeyB"))
		f.announce(hash, peerID("-TR", 3), 3, passkey("passkeyB"), seeding)
		require.Equal(t, int64(2), f.torrent(hash).Snatches)
	})
}

// A seeder's announce deletes the torrent's reaper state (a reseed ends
// the unseeded spell at once); a leecher's or a stopped seeder's does not.
func TestSeederAnnounceClearsTheReaperState(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, b.Client.HSet(ctx, btstore.ReaperKey(hash), "state", "unseeded", "notify", "initial").Err())
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyB"), seeding, event(bittorrent.EventStopped))
		n, err := b.Client.Exists(ctx, btstore.ReaperKey(hash)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "a leecher, or a stopped peer never seen, is no reseed")

		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		state, err := b.Client.HGet(ctx, btstore.ReaperKey(hash), "state").Result()
		require.ErrorIs(t, err, redis.Nil, "a seeder ends the spell (got %q)", state)
		claims, err := b.Client.HGetAll(ctx, btstore.ReaperClaimsKey(hash)).Result()
		require.NoError(t, err)
		require.Len(t, claims, 1, "and, not the uploader, claims it: %v", claims)
	})
}

// The announce hot path touches the claim keys only when a reaper row
// exists: a seeder's announce on a torrent out of the process writes no
// reaper key, and a snatch adds the user to the torrent's snatchers.
func TestAnnounceTouchesClaimKeysOnlyInTheProcess(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), seeding, event(bittorrent.EventCompleted))
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		n, err := b.Client.Exists(ctx, btstore.ReaperKey(hash), btstore.ReaperClaimsKey(hash)).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		snatchers, err := b.Client.SMembers(ctx, btstore.SnatchersKey(hash)).Result()
		require.NoError(t, err)
		require.Len(t, snatchers, 1, "the one who completed")
	})
}
