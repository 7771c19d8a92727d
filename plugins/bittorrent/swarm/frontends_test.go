package swarm_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// A frontend that delivers the feed writes nothing to the registry while
// it is idle; it beats before a script that may stamp a record with its id (the
// record's w), keeps its heartbeat while it holds changes not yet
// delivered, and lets it expire once a complete round delivered them,
// with a "fed up to" after the change. Another frontend then sees it dead,
// fed up to that time, and forgets it; the next stamp registers it again
// before the record carries its id, and a forget while it beats changes
// nothing. A clean stop leaves no entry and no heartbeat.
func TestFrontendBeatsOnlyWhileHoldingChanges(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		l := newLedger()
		cfg := swarm.Config{FlushInterval: 50 * time.Millisecond, FeedInterval: 100 * time.Millisecond, OnFeed: l.deliver}
		f, hash := privateFixture(t, b, cfg)
		rdb := b.Client
		require.NoError(t, f.store.Start(ctx))
		id := f.store.Owner()
		record := btstore.UserTorrentKey(hash, "alice")

		// Idle: nothing written. The first announce creates the record
		// with all its fed figures 0: no change to feed, no stamp (the
		// frontend beat before it all the same: a script with
		// accounting may stamp).
		require.Zero(t, rdb.Exists(ctx, btstore.FrontendsKey, btstore.FrontendHeartbeatKey(id)).Val())
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"))
		require.Empty(t, rdb.HGet(ctx, record, "w").Val())

		f.clock.Advance(time.Minute)
		at := f.clock.Now().UnixMilli()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(1000, 0))
		// Beat before the script: registered and alive as soon as the
		// record carries the id.
		require.Equal(t, id, rdb.HGet(ctx, record, "w").Val())
		require.Equal(t, int64(2), rdb.Exists(ctx, btstore.FrontendsKey, btstore.FrontendHeartbeatKey(id)).Val())
		// Delivered by a round, then the heartbeat lapses; the entry says
		// fed up to at least the change.
		require.Eventually(t, func() bool {
			l.mu.Lock()
			row := l.newest["alice:"+btstore.HexInfoHash(hash)]
			l.mu.Unlock()
			return row.Uploaded == 1000 && rdb.Exists(ctx, btstore.FrontendHeartbeatKey(id)).Val() == 0
		}, 15*time.Second, 20*time.Millisecond)
		fed, err := strconv.ParseInt(rdb.HGet(ctx, btstore.FrontendsKey, id).Val(), 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, fed, at)

		other := newFixture(t, b, swarm.Config{Private: true, OnFeed: l.deliver})
		dead, err := other.store.DeadFrontends(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{id: fed}, dead)
		mine, err := f.store.DeadFrontends(ctx)
		require.NoError(t, err)
		require.Empty(t, mine, "a frontend never lists itself")

		gone, err := other.store.ForgetFrontend(ctx, id, fed-1)
		require.NoError(t, err)
		require.False(t, gone, "a \"fed up to\" other than the one read: it stays")
		gone, err = other.store.ForgetFrontend(ctx, id, fed)
		require.NoError(t, err)
		require.True(t, gone)
		require.Zero(t, rdb.HExists(ctx, btstore.FrontendsKey, id).Val())

		// The next change registers it again.
		f.clock.Advance(time.Minute)
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), transfer(2000, 0))
		require.True(t, rdb.HExists(ctx, btstore.FrontendsKey, id).Val())
		gone, err = other.store.ForgetFrontend(ctx, id, fed)
		require.NoError(t, err)
		require.False(t, gone, "alive: it stays")
		require.True(t, rdb.HExists(ctx, btstore.FrontendsKey, id).Val())

		require.NoError(t, f.store.Stop())
		require.Zero(t, rdb.Exists(ctx, btstore.FrontendsKey, btstore.FrontendHeartbeatKey(id)).Val())
	})
}

// A complete round that moved "fed up to" writes it to the registry
// itself: the flush loop does not run here (the store is not started),
// and another frontend reads the new time at once. A round with nothing
// new stamped writes nothing.
func TestARoundWritesItsFedUpToAtOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		l := newLedger()
		f, hash := privateFixture(t, b, swarm.Config{OnFeed: l.deliver})
		rdb := b.Client
		id := f.store.Owner()
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 0)) // stamped: the beat before it registers
		registered := rdb.HGet(ctx, btstore.FrontendsKey, id).Val()
		f.clock.Advance(time.Minute)
		startedAt := f.clock.Now().UnixMilli()
		require.NoError(t, swarm.FeedRoundStamped(ctx, f.store))
		require.Equal(t, startedAt, swarm.FedUpTo(f.store))
		entry := rdb.HGet(ctx, btstore.FrontendsKey, id).Val()
		require.NotEqual(t, registered, entry)
		require.Equal(t, strconv.FormatInt(startedAt, 10), entry, "the registry says what the round delivered")

		// Nothing new stamped: the round moves nothing and writes nothing.
		require.NoError(t, rdb.HSet(ctx, btstore.FrontendsKey, id, "marker").Err())
		f.clock.Advance(time.Minute)
		require.NoError(t, swarm.FeedRoundStamped(ctx, f.store))
		require.Equal(t, startedAt, swarm.FedUpTo(f.store))
		require.Equal(t, "marker", rdb.HGet(ctx, btstore.FrontendsKey, id).Val())
	})
}

// A frontend with accounting on but no outbox (no OnFeed) never stamps a
// record with its id: it is never registered, so no backstop would find a
// record it stamped. Its announces (announce.lua) and written-behind
// refreshes (refresh.lua) still credit the record and leave its w as it
// was, and it writes nothing to the registry.
func TestAFrontendWithoutAnOutboxNeverStamps(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f, hash := privateFixture(t, b, swarm.Config{})
		rdb := b.Client
		id := f.store.Owner()
		record := btstore.UserTorrentKey(hash, "alice")
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))

		// A view read's refresh.lua, then a queued refresh written by
		// the flush: each moves the record's upload.
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 0))
		require.Equal(t, int64(1), f.store.WriteBehindStats().ViewReads)
		require.Equal(t, "1000", rdb.HGet(ctx, record, "uploaded").Val())
		require.Zero(t, rdb.HExists(ctx, record, "w").Val(), "no stamp")
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(3000, 0))
		require.Equal(t, 1, f.store.WriteBehindStats().Queued, "answered from the view, queued")
		f.flush()
		require.Equal(t, int64(1), f.store.WriteBehindStats().DrainCalls, "the queued refresh was written")
		require.Equal(t, "3000", rdb.HGet(ctx, record, "uploaded").Val())
		require.Zero(t, rdb.HExists(ctx, record, "w").Val(), "no stamp")

		// announce.lua itself (an event goes through it).
		f.clock.Advance(time.Second)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(4000, 0), event(bittorrent.EventStopped))
		require.Equal(t, "4000", rdb.HGet(ctx, record, "uploaded").Val())
		require.Zero(t, rdb.HExists(ctx, record, "w").Val(), "no stamp")
		require.Zero(t, rdb.Exists(ctx, btstore.FrontendsKey, btstore.FrontendHeartbeatKey(id)).Val())
	})
}

// If the heartbeat written before a script that may stamp a record fails,
// the script does not run, so no record carries the id of a frontend the
// registry does not list alive: a queued refresh stays queued (the flush
// reports the failure), and an announce gets the tracker's retryable
// error with the record unchanged. Once the registry can be written again,
// the queued refresh is written.
func TestAFailedBeatHoldsTheStampingScriptsBack(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		l := newLedger()
		f, hash := privateFixture(t, b, swarm.Config{OnFeed: l.deliver})
		rdb := b.Client
		record := btstore.UserTorrentKey(hash, "alice")
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 0))
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(3000, 0))
		require.Equal(t, 1, f.store.WriteBehindStats().Queued, "answered from the view, queued")
		require.Equal(t, "1000", rdb.HGet(ctx, record, "uploaded").Val())

		// The registry cannot be written (a key of another type), and
		// the last beat is taken as old.
		require.NoError(t, rdb.Del(ctx, btstore.FrontendsKey).Err())
		require.NoError(t, rdb.Set(ctx, btstore.FrontendsKey, "not a hash", 0).Err())
		swarm.ForgetBeat(f.store)

		require.Error(t, f.store.Flush(ctx))
		require.Equal(t, 1, f.store.WriteBehindStats().Queued, "held back, still queued")
		require.Zero(t, f.store.WriteBehindStats().DrainCalls)
		require.Equal(t, "1000", rdb.HGet(ctx, record, "uploaded").Val())

		// A re-announce whose view is stale goes through announce.lua,
		// which beats first too.
		f.clock.Advance(time.Second)
		_, err := f.store.Announce(ctx, request(hash, me, 1, passkey("passkeyA"), transfer(4000, 0)))
		require.Error(t, err)
		require.Equal(t, "1000", rdb.HGet(ctx, record, "uploaded").Val())
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)

		require.NoError(t, rdb.Del(ctx, btstore.FrontendsKey).Err())
		f.flush()
		require.Zero(t, f.store.WriteBehindStats().Queued)
		require.Equal(t, "3000", rdb.HGet(ctx, record, "uploaded").Val())
		require.Equal(t, f.store.Owner(), rdb.HGet(ctx, record, "w").Val())
		require.True(t, rdb.HExists(ctx, btstore.FrontendsKey, f.store.Owner()).Val())
	})
}

// The lead's decision 6: a complete round moves "fed up to" only to the
// oldest change that was not yet in the batch it flushed, so the
// backstop, which takes a dead frontend's records whose last_announce is
// at or after it, misses none. Three such changes: a refresh waiting in
// the write-behind queue (refresh.lua writes its announce's time as the
// record's last_announce, not the time it runs), an announce whose reply
// was not in when the round began, and refreshes a drain took from the
// queue and has not written. Each holds "fed up to" at its time while it
// is undelivered; once it is, the next round moves "fed up to" to its
// start. Each assertion fails with "fed up to" taken as the round's
// start (the rule before).
func TestFedUpToStaysBeforeTheOldestUndeliveredChange(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		l := newLedger()
		f, hash := privateFixture(t, b, swarm.Config{OnFeed: l.deliver})
		me, other := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, other, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		up := uint64(0)
		// stampAndQueue makes alice's record change twice: once
		// written at once (a stale view is read in the refresh.lua
		// call that writes it: stamped), then within the view's age,
		// answered from the view and queued at the time it returns.
		stampAndQueue := func() int64 {
			f.clock.Advance(time.Minute)
			up += 1000
			f.announce(hash, me, 1, passkey("passkeyA"), transfer(up, 0))
			f.clock.Advance(100 * time.Millisecond)
			up += 1000
			queuedAt := f.clock.Now().UnixMilli()
			f.announce(hash, me, 1, passkey("passkeyA"), transfer(up, 0))
			require.Equal(t, 1, f.store.WriteBehindStats().Queued)
			return queuedAt
		}
		round := func() (startedAt, fed int64) {
			f.clock.Advance(time.Minute)
			startedAt = f.clock.Now().UnixMilli()
			require.NoError(t, swarm.FeedRoundStamped(ctx, f.store))
			return startedAt, swarm.FedUpTo(f.store)
		}

		// A written-behind refresh, queued.
		queuedAt := stampAndQueue()
		_, fed := round()
		require.Equal(t, queuedAt, fed, "held at the queued refresh's announce")
		f.flush() // written: stamped again
		startedAt, fed := round()
		require.Equal(t, startedAt, fed)

		// An announce in flight when the round began.
		f.clock.Advance(time.Minute)
		inFlight := swarm.CallBegins(f.store)
		stampAndQueue()
		f.flush()
		_, fed = round()
		require.Equal(t, inFlight, fed, "held at the announce in flight")
		swarm.CallEnds(f.store, inFlight)
		stampAndQueue()
		f.flush()
		startedAt, fed = round()
		require.Equal(t, startedAt, fed)

		// Refreshes a drain took and has not written yet.
		queuedAt = stampAndQueue()
		write := swarm.TakeQueue(ctx, f.store)
		require.Equal(t, 1, f.store.WriteBehindStats().Queued, "a drain's taken refreshes count as queued")
		_, fed = round()
		require.Equal(t, queuedAt, fed, "held at the drain's oldest refresh")
		require.NoError(t, write())
		require.Zero(t, f.store.WriteBehindStats().Queued)
		startedAt, fed = round()
		require.Equal(t, startedAt, fed, "written and stamped: delivered by this round")

		// Nothing left counted once every call ended, through Announce
		// and through AnnounceBatch (a view read taking the queue along
		// among them), which would hold "fed up to" back for good.
		stampAndQueue()
		f.clock.Advance(time.Minute)
		up += 1000
		results := make([]bittorrent.AnnounceResult, 2)
		f.store.AnnounceBatch(ctx, []*bittorrent.AnnounceRequest{
			request(hash, me, 1, passkey("passkeyA"), transfer(up, 0)),
			request(hash, other, 2, passkey("passkeyB"), seeding),
		}, results)
		for _, r := range results {
			require.NoError(t, r.Err)
		}
		calls, held := swarm.Undelivered(f.store)
		require.Zero(t, calls)
		require.Zero(t, held)
		f.flush()
		startedAt, fed = round()
		require.Equal(t, startedAt, fed)
	})
}

// holdScript is a go-redis hook that, once armed, lets the first script
// call touching key run in Redis and then holds its reply back until
// released: an announce whose script ran and whose reply its frontend
// has not handled yet.
type holdScript struct {
	key      string
	armed    atomic.Bool
	entered  chan struct{}
	released chan struct{}
}

func (h *holdScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.hold(cmd)
		return err
	}
}

func (h *holdScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.hold(cmd)
		}
		return err
	}
}

func (h *holdScript) hold(cmd redis.Cmder) {
	if name := cmd.Name(); name != "fcall" && name != "evalsha" && name != "eval" {
		return
	}
	for _, arg := range cmd.Args() {
		if s, ok := arg.(string); ok && s == h.key && h.armed.CompareAndSwap(true, false) {
			close(h.entered)
			<-h.released
			return
		}
	}
}

// A real announce whose script ran before a round began and whose reply
// came in after it holds "fed up to" at its time: its record's
// last_announce. (Another user's change makes the round one that moves
// "fed up to".)
func TestFedUpToStaysBeforeAnAnnounceWhoseReplyIsNotIn(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		rdb, err := redisurl.Dial(b.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rdb.Close() })
		hash := infoHash("private")
		hold := &holdScript{key: btstore.UserTorrentKey(hash, "alice"), entered: make(chan struct{}), released: make(chan struct{})}
		rdb.AddHook(hold)
		clock := swarm.NewFakeClock(epoch)
		l := newLedger()
		store, err := swarm.New(rdb, swarm.Config{Clock: clock, Logger: quietLogger, Interval: 30 * time.Minute,
			Private: true, OnFeed: l.deliver})
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Stop() })
		// A failed assertion leaves the held call; released first
		// (cleanups run last in, first out), Stop does not wait on it.
		release := sync.OnceFunc(func() { close(hold.released) })
		t.Cleanup(release)
		require.NoError(t, store.RegisterTorrent(ctx, hash, "t1"))
		require.NoError(t, store.AddUser(ctx, pk("passkeyA"), "alice"))
		require.NoError(t, store.AddUser(ctx, pk("passkeyB"), "bob"))
		require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
		announce := func(peer bittorrent.PeerID, n int, opts ...announceOpt) error {
			_, err := store.Announce(ctx, request(hash, peer, n, opts...))
			return err
		}
		alice, bob := peerID("-TR", 1), peerID("-TR", 2)
		require.NoError(t, announce(alice, 1, passkey("passkeyA"), event(bittorrent.EventStarted)))
		require.NoError(t, announce(bob, 2, passkey("passkeyB"), event(bittorrent.EventStarted)))
		clock.Advance(time.Minute)
		require.NoError(t, announce(bob, 2, passkey("passkeyB"), event(bittorrent.EventCompleted), seeding, transfer(0, 1000)))

		hold.armed.Store(true)
		at := clock.Now().UnixMilli()
		done := make(chan error, 1)
		go func() {
			done <- announce(alice, 1, passkey("passkeyA"), event(bittorrent.EventCompleted), seeding, transfer(0, 1000))
		}()
		select {
		case <-hold.entered:
		case err := <-done:
			t.Fatalf("the announce's script was not held: %v", err)
		}
		require.Equal(t, strconv.FormatInt(at, 10), b.Client.HGet(ctx, btstore.UserTorrentKey(hash, "alice"), "last_announce").Val(),
			"the script ran")
		clock.Advance(time.Minute)
		require.NoError(t, swarm.FeedRoundStamped(ctx, store))
		require.Equal(t, at, swarm.FedUpTo(store), "held at the announce whose reply is not in")

		release()
		require.NoError(t, <-done)
		clock.Advance(time.Minute)
		startedAt := clock.Now().UnixMilli()
		require.NoError(t, swarm.FeedRoundStamped(ctx, store))
		require.Equal(t, startedAt, swarm.FedUpTo(store))
	})
}
