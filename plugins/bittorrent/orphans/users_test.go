package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// userKeys lists every key in a user's own slot.
func (f *fixture) userKeys(user string) []string {
	f.t.Helper()
	return f.scan(btstore.UserOwnPattern(user))
}

// requireUserGone: nothing of the user is left, in its slot or in any
// torrent's.
func (f *fixture) requireUserGone(user string, hashes ...bittorrent.InfoHash) {
	f.t.Helper()
	ctx := context.Background()
	require.Empty(f.t, f.userKeys(user), "every key of the removed user")
	for _, hash := range hashes {
		require.NotContains(f.t, f.torrentKeys(hash), btstore.UserTorrentKey(hash, user))
		require.False(f.t, f.b.Client.SIsMember(ctx, btstore.TorrentUsersKey(hash), user).Val())
	}
	require.Zero(f.t, f.b.Client.ZScore(ctx, btstore.RemovedUsersKey, user).Val(), "its index entry")
}

// removeAndBeginPurge removes the user's passkey pkPrefix+user, lets a window
// pass, and begins its purge as a cleaner would (a passkeys pass just
// finished); it returns the time the purge began (ms).
func (f *fixture) removeAndBeginPurge(user string) int64 {
	f.t.Helper()
	ctx := context.Background()
	require.NoError(f.t, f.store.RemoveUser(ctx, pkPrefix+user))
	f.clock.Advance(window + time.Second)
	now := f.clock.Now().UnixMilli()
	state, err := f.store.StartUserPurge(ctx, user, now, window.Milliseconds(), now-1)
	require.NoError(f.t, err)
	require.Equal(f.t, "purging", state.State)
	return now
}

// requireUserKept: the user's records on the torrents and its sets are all
// there.
func (f *fixture) requireUserKept(user string, hashes map[string]bittorrent.InfoHash) {
	f.t.Helper()
	ctx := context.Background()
	summary := f.user(user)
	for id, hash := range hashes {
		require.Contains(f.t, f.torrentKeys(hash), btstore.UserTorrentKey(hash, user))
		require.True(f.t, f.b.Client.SIsMember(ctx, btstore.TorrentUsersKey(hash), user).Val())
		require.Contains(f.t, append(summary.Complete, summary.Incomplete...), id)
	}
	require.Contains(f.t, f.userKeys(user), btstore.UserVersionsKey(user), "its versions")
}

func TestRemovedUserIsPurgedAfterOneWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1, t2 := privateTorrent(t, f, "one", "t1"), privateTorrent(t, f, "two", "t2")
		require.Len(t, f.user("alice").Complete, 2)
		require.Contains(t, f.userKeys("alice"), btstore.UserStatsKey("alice"), "she uploaded: totals")
		require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"alice"))
		require.Error(t, f.announce(t1, 1, pkPrefix+"alice", 0, 0, bittorrent.EventStarted), "the passkey is gone")

		f.clock.Advance(window) // exactly the window: still protected
		require.Zero(t, f.pass().UsersPurged)
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1, "t2": t2})

		f.clock.Advance(time.Millisecond)
		r := f.pass()
		require.Equal(t, 1, r.UsersPurged)
		require.Equal(t, 2, r.UserRecords, "alice's record on each torrent")
		require.Zero(t, r.PurgeKept)
		f.requireUserGone("alice", t1, t2)
		// bob and the torrents are untouched.
		f.requireUserKept("bob", map[string]bittorrent.InfoHash{"t1": t1, "t2": t2})
		require.Equal(t, "t1", b.Client.HGet(ctx, btstore.TorrentKey(t1), "id").Val())
		require.Zero(t, f.pass().Removed(), "a second pass finds nothing")
	})
}

func TestPasskeyRotationWithinTheWindowKeepsEverything(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")
		require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"alice"))
		f.clock.Advance(window / 2)
		require.NoError(t, f.store.AddUser(ctx, pkPrefix+"alice2", "alice"))
		f.clock.Advance(window)
		r := f.pass()
		require.Zero(t, r.UsersPurged)
		f.pass()
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1})
		require.Zero(t, b.Client.Exists(ctx, btstore.UserGoneKey("alice")).Val(), "the removal is undone")
		require.Zero(t, b.Client.ZScore(ctx, btstore.RemovedUsersKey, "alice").Val(), "the index forgot her")
		require.NoError(t, f.announce(t1, 1, pkPrefix+"alice2", 0, 0, bittorrent.EventStarted))
	})
}

// TestUserWithAnUnlistedPasskeyIsNeverPurged: a passkey mapped before
// users listed their passkeys (or by a RemoveUser cut off between its
// steps) is found by the passkeys walk and keeps its user.
func TestUserWithAnUnlistedPasskeyIsNeverPurged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")
		require.NoError(t, b.Client.Set(ctx, btstore.PasskeyKey(pkPrefix+"old"), "alice", 0).Err(), "mapped the old way")
		require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"alice"))
		require.Contains(t, f.userKeys("alice"), btstore.UserGoneKey("alice"), "her last listed passkey went")
		f.clock.Advance(window + time.Second)
		r := f.pass()
		require.Equal(t, 1, r.PasskeysListed)
		require.Zero(t, r.UsersPurged)
		f.clock.Advance(window + time.Second)
		require.Zero(t, f.pass().UsersPurged)
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1})
		require.NoError(t, f.announce(t1, 1, pkPrefix+"old", 0, 0, bittorrent.EventStarted))
	})
}

// TestPurgeWaitsForAPasskeysPassBegunAfterTheRemoval: without a whole
// pass of the passkeys walk since the removal, an unlisted passkey could
// still exist, so the purge waits.
func TestPurgeWaitsForAPasskeysPassBegunAfterTheRemoval(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")
		require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"alice"))
		f.clock.Advance(window + time.Second)
		removal := f.clock.Now().Add(-window - time.Second).UnixMilli()
		state, err := f.store.StartUserPurge(ctx, "alice", f.clock.Now().UnixMilli(), window.Milliseconds(), removal-1)
		require.NoError(t, err)
		require.Equal(t, "waiting", state.State, "the last pass began before the removal")
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1})
		require.Equal(t, 1, f.pass().UsersPurged, "a pass of the walk, then the purge")
	})
}

// TestUserAddedAgainDuringItsPurgeStartsAfresh: AddUser finishes a purge
// under way before it lists the passkey, so the user never comes back
// with half of its records.
func TestUserAddedAgainDuringItsPurgeStartsAfresh(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1, t2 := privateTorrent(t, f, "one", "t1"), privateTorrent(t, f, "two", "t2")
		f.removeAndBeginPurge("alice")
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1, "t2": t2}) // begun, nothing deleted yet

		require.NoError(t, f.store.AddUser(ctx, pkPrefix+"alice", "alice"))
		require.NotContains(t, f.torrentKeys(t1), btstore.UserTorrentKey(t1, "alice"))
		require.NotContains(t, f.torrentKeys(t2), btstore.UserTorrentKey(t2, "alice"))
		summary := f.user("alice")
		require.Empty(t, summary.Complete)
		require.Empty(t, summary.Incomplete)
		require.Equal(t, []string{btstore.UserPasskeysKey("alice")}, f.userKeys("alice"), "only her new listing")

		// She announces again: a new record, which cleanup keeps.
		require.NoError(t, f.announce(t1, 1, pkPrefix+"alice", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.store.Flush(ctx))
		f.clock.Advance(window + time.Second)
		f.pass()
		require.Contains(t, f.torrentKeys(t1), btstore.UserTorrentKey(t1, "alice"))
		require.Contains(t, f.user("alice").Active, "t1")
	})
}

// TestPasskeyMovedToAnotherUserRemovesThePrevious: AddUser giving a
// passkey to another user leaves the previous one without a passkey.
func TestPasskeyMovedToAnotherUserRemovesThePrevious(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")
		require.NoError(t, f.store.AddUser(ctx, pkPrefix+"alice", "carol"))
		require.NoError(t, f.announce(t1, 1, pkPrefix+"alice", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.store.Flush(ctx))
		f.clock.Advance(window + time.Second)
		require.Equal(t, 1, f.pass().UsersPurged)
		f.requireUserGone("alice", t1)
		require.Contains(t, f.user("carol").Active, "t1")
		require.Equal(t, "carol", b.Client.Get(ctx, btstore.PasskeyKey(pkPrefix+"alice")).Val())
	})
}

// TestStaleListingDoesNotKeepARemovedUser: the passkeys walk can list a
// passkey just as RemoveUser unmaps it; a window later that listing is
// dropped and the user purged as removed since its first mark.
func TestStaleListingDoesNotKeepARemovedUser(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")
		require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"alice"))
		// what a walk that read the passkey before the unmapping writes
		require.NoError(t, b.Client.HSet(ctx, btstore.UserPasskeysKey("alice"), pkPrefix+"alice", f.clock.Now().UnixMilli()).Err())
		require.Zero(t, f.pass().UsersPurged)
		f.clock.Advance(window) // the listing is not stale yet
		r := f.pass()
		require.Zero(t, r.StaleListings)
		require.Zero(t, r.UsersPurged)
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1})

		f.clock.Advance(time.Millisecond)
		r = f.pass()
		require.Equal(t, 1, r.StaleListings)
		require.Equal(t, 1, r.UsersPurged, "removed since its first mark, a window ago")
		f.requireUserGone("alice", t1)
	})
}

// TestListingOfAPasskeyMappedAgainIsKept: a listing whose passkey maps to
// the user is never dropped, however old.
func TestListingOfAPasskeyMappedAgainIsKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		t1 := privateTorrent(t, f, "one", "t1")
		f.clock.Advance(3 * window)
		r := f.pass()
		require.Zero(t, r.StaleListings)
		require.Zero(t, r.UsersPurged)
		f.requireUserKept("alice", map[string]bittorrent.InfoHash{"t1": t1})
		require.NoError(t, f.announce(t1, 1, pkPrefix+"alice", 0, 0, bittorrent.EventStarted))
	})
}

// TestPasskeyListedDuringThePurgeDoesNotStrandTheUser: a passkey mapped
// and listed outside AddUser after the purge began (by hand) does not
// leave the user half-purged: the purge finishes, and the user goes on
// as a new one with that passkey; AddUser still works.
func TestPasskeyListedDuringThePurgeDoesNotStrandTheUser(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")
		now := f.removeAndBeginPurge("alice")
		require.NoError(t, b.Client.Set(ctx, btstore.PasskeyKey(pkPrefix+"hand"), "alice", 0).Err())
		listed, err := f.store.ListPasskey(ctx, "alice", pkPrefix+"hand", now)
		require.NoError(t, err)
		require.True(t, listed)

		require.Equal(t, 1, f.pass().UsersPurged)
		require.NotContains(t, f.torrentKeys(t1), btstore.UserTorrentKey(t1, "alice"))
		require.Equal(t, []string{btstore.UserPasskeysKey("alice")}, f.userKeys("alice"), "only the listing of the passkey she has")
		require.NoError(t, f.announce(t1, 1, pkPrefix+"hand", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.store.AddUser(ctx, pkPrefix+"alice", "alice"))
	})
}

// TestPasskeysWalkRacingARemovalKeepsTheRemovalBound: the passkeys walk
// reads a passkey mapped, RemoveUser then unlists and unmaps it, a window
// passes, and the walk, finding it unlisted, lists it. That listing is
// dated when the walk read the mapping, so it is stale at once and the
// user is purged within the removal's own window (two more passes: one
// drops the listing, the next is a passkeys pass begun after the
// removal). Dated when written, it would hold the user a window longer.
func TestPasskeysWalkRacingARemovalKeepsTheRemovalBound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")

		// The walk's client runs the removal, and a window, right after
		// its read of pkalice's mapping.
		readsMapping := func(cmd redis.Cmder) bool {
			return cmd.Name() == "get" && len(cmd.Args()) == 2 && cmd.Args()[1] == btstore.PasskeyKey(pkPrefix+"alice")
		}
		hook, raced := onceAfter(readsMapping, func() {
			require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"alice"))
			f.clock.Advance(window + time.Second)
		})
		walker := f.newCleanerOn(f.hookedClient(hook), fixturePolicy)
		r, err := walker.Pass(ctx)
		require.NoError(t, err)
		require.True(t, raced.Load(), "the walk read pkalice's mapping")
		require.Equal(t, 1, r.PasskeysListed, "the walk listed the passkey it read mapped")

		r = f.pass()
		require.Equal(t, 1, r.StaleListings, "the listing is dated when the mapping was read, a window ago")
		require.Equal(t, 1, f.pass().UsersPurged+r.UsersPurged)
		f.requireUserGone("alice", t1)
	})
}

// TestRemovalStalledAcrossACleanupPassIsStillPurged: RemoveUser writes
// alice's index entry, then stalls for a window, and a whole cleanup pass
// runs in between: the walk finds her live (her passkey still listed) and
// drops the entry. The removal writes the entry again after its mark, so
// she is purged all the same.
func TestRemovalStalledAcrossACleanupPassIsStillPurged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")

		hook, stalled := onceAfter(writesRemovedEntry("alice"), func() {
			f.clock.Advance(window + time.Second)
			require.Zero(t, f.pass().UsersPurged, "alice is still listed")
			require.Zero(t, b.Client.ZScore(ctx, btstore.RemovedUsersKey, "alice").Val(), "the walk dropped her entry")
		})
		remover := f.hookedStore(hook)
		require.NoError(t, remover.RemoveUser(ctx, pkPrefix+"alice"))
		require.True(t, stalled.Load())
		require.NotZero(t, b.Client.ZScore(ctx, btstore.RemovedUsersKey, "alice").Val(), "alice is indexed as removed")

		require.Equal(t, 1, f.pass().UsersPurged, "removed a window ago, and a passkeys pass began since")
		f.requireUserGone("alice", t1)
	})
}

// TestRemovalBetweenTheWalksLookAndItsDropIsStillPurged: RemoveUser writes
// alice's index entry and stalls for a window; the removed walk reads the
// entry and finds her live; the removal then goes on (mark, entry again,
// with the score the walk read); then the walk drops the entry, its score
// unchanged. The walk looks again at the users it dropped and puts back
// the one now marked, so she is purged all the same.
func TestRemovalBetweenTheWalksLookAndItsDropIsStillPurged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		t1 := privateTorrent(t, f, "one", "t1")

		atEntry, resume, removed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		stall, _ := onceAfter(writesRemovedEntry("alice"), func() {
			close(atEntry)
			<-resume
		})
		remover := f.hookedStore(stall)
		go func() { removed <- remover.RemoveUser(ctx, pkPrefix+"alice") }()
		<-atEntry
		f.clock.Advance(window + time.Second)
		foundLive := func(cmd redis.Cmder) bool { return purgeStartReply(cmd, "alice") == "live" }
		hook, looked := onceAfter(foundLive, func() {
			close(resume)
			require.NoError(t, <-removed)
		})
		walker := f.newCleanerOn(f.hookedClient(hook), fixturePolicy)
		r, err := walker.Pass(ctx)
		require.NoError(t, err)
		require.True(t, looked.Load(), "the walk found alice live")
		require.Zero(t, r.UsersPurged)
		require.NotZero(t, b.Client.ZScore(ctx, btstore.RemovedUsersKey, "alice").Val(), "alice is indexed as removed")

		require.Equal(t, 1, f.pass().UsersPurged, "removed a window ago, and a passkeys pass began since")
		f.requireUserGone("alice", t1)
	})
}

// hookedClient dials the fixture's backend anew, with hook on the client.
func (f *fixture) hookedClient(hook redis.Hook) redis.UniversalClient {
	f.t.Helper()
	client, err := redisurl.Dial(f.b.URL)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = client.Close() })
	client.AddHook(hook)
	return client
}

// hookedStore is a second frontend's swarm store (never started) whose
// client runs hook.
func (f *fixture) hookedStore(hook redis.Hook) *swarm.Store {
	f.t.Helper()
	store, err := swarm.New(f.hookedClient(hook), f.store.Config())
	require.NoError(f.t, err)
	return store
}

// writesRemovedEntry matches a command that put user in the index of
// removed users.
func writesRemovedEntry(user string) func(redis.Cmder) bool {
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return cmd.Err() == nil && cmd.Name() == "zadd" && len(args) >= 4 &&
			args[1] == btstore.RemovedUsersKey && args[len(args)-1] == user
	}
}

// purgeStartReply is the state user_purge_start.lua replied for user
// ("live", "waiting", "purging"), or "" when cmd is another command. A
// script call reaches the hook wrapped as luascript sends it (sent once),
// so its reply is read through Val, not by its type.
func purgeStartReply(cmd redis.Cmder, user string) string {
	c, ok := cmd.(interface{ Val() any })
	if !ok || cmd.Err() != nil || !luascript.IsScriptCall(cmd.Name()) {
		return ""
	}
	reply, ok := c.Val().([]any)
	if !ok || len(reply) != 3 || !slices.Contains(cmd.Args(), any(btstore.UserGoneKey(user))) {
		return ""
	}
	state, _ := reply[0].(string)
	return state
}

// onceAfter is a go-redis hook that runs fn right after the first
// command that matches has run (alone or in a pipeline), in the caller's
// goroutine: the command's caller waits for fn. ran reports whether it did.
func onceAfter(match func(redis.Cmder) bool, fn func()) (hook redis.Hook, ran *atomic.Bool) {
	ran = new(atomic.Bool)
	return afterCommand(func(cmd redis.Cmder) {
		if match(cmd) && ran.CompareAndSwap(false, true) {
			fn()
		}
	}), ran
}

// afterCommand is a go-redis hook that calls fn with each command once it
// has run, alone or in a pipeline.
type afterCommand func(cmd redis.Cmder)

func (afterCommand) DialHook(next redis.DialHook) redis.DialHook { return next }
func (fn afterCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		fn(cmd)
		return err
	}
}
func (fn afterCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			fn(cmd)
		}
		return err
	}
}
