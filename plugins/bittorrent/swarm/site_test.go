package swarm_test

import (
	"context"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Issue 28 point 4: a torrent the site deletes with a reason answers that
// reason for DeletedReasonTTL, then "unregistered torrent".
func TestDeletedTorrentAnswersItsReasonThenUnregistered(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{DeletedReasonTTL: time.Hour})
		ctx := context.Background()
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"))

		// Bad reasons are refused and change nothing: still registered.
		for _, bad := range []string{"tab\tok but newline\n", "\x1b[31mred", string(make([]byte, swarm.MaxReasonBytes+1)), "\xff\xfe"} {
			require.ErrorIs(t, f.store.DeleteTorrent(ctx, hash, bad), swarm.ErrInvalid, "%q", bad)
		}
		require.Equal(t, "t1", f.torrent(hash).ID)
		require.Zero(t, b.Client.Exists(ctx, btstore.DeletedKey(hash)).Val())

		require.NoError(t, f.store.DeleteTorrent(ctx, hash, "Trumped: a better encode is up"))
		require.Empty(t, f.torrent(hash).ID)
		require.Equal(t, "torrent deleted: Trumped: a better encode is up", f.refuse(hash, me, 1, passkey("passkeyA")))
		require.Equal(t, "torrent deleted: Trumped: a better encode is up", f.refuse(hash, peerID("-TR", 2), 2, passkey("passkeyB")))

		// The reason lives in Redis for its TTL (the key's own TTL, so a
		// frontend's clock does not matter): once it is gone, the plain
		// refusal.
		ttl := b.Client.PTTL(ctx, btstore.DeletedKey(hash)).Val()
		require.Greater(t, ttl, 59*time.Minute)
		require.LessOrEqual(t, ttl, time.Hour)
		require.NoError(t, b.Client.Del(ctx, btstore.DeletedKey(hash)).Err()) // as its TTL would
		require.Equal(t, "unregistered torrent", f.refuse(hash, me, 1, passkey("passkeyA")))

		// Registering it again drops the reason; deleting without one
		// answers the plain refusal.
		require.NoError(t, f.store.DeleteTorrent(ctx, hash, "Dupe"))
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "t1"))
		require.Zero(t, b.Client.Exists(ctx, btstore.DeletedKey(hash)).Val())
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		require.NoError(t, f.store.DeleteTorrent(ctx, hash, ""))
		require.Equal(t, "unregistered torrent", f.refuse(hash, me, 1, passkey("passkeyA")))
	})
}

// Issue 28 point 5: flood control refuses a peer's announces without an
// event sooner than FloodInterval after its last accepted one, never an
// event, and reports a repeat offender once per window.
func TestFloodControlRefusesAndReportsRepeatOffenders(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var mu sync.Mutex
		var reports []swarm.FloodReport
		cfg := swarm.Config{Interval: 30 * time.Minute, MinInterval: 10 * time.Minute, FloodInterval: 9 * time.Minute,
			FloodWindow: time.Hour, FloodReportAfter: 3,
			OnFlood: func(_ context.Context, r swarm.FloodReport) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, r)
			}}
		f, hash := privateFixture(t, b, cfg)
		ctx := context.Background()
		me, other := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted), transfer(0, 0))
		f.announce(hash, other, 2, passkey("passkeyB"), event(bittorrent.EventStarted))

		f.clock.Advance(time.Minute)
		reason := f.refuse(hash, me, 1, passkey("passkeyA"), transfer(0, 100))
		require.Equal(t, "announcing too often: wait at least 600 seconds between announces (min interval)", reason)
		record := b.Client.HGetAll(ctx, btstore.PeerKey(hash, me)).Val()
		require.Equal(t, "0", record["downloaded"], "a refused announce records no transfer")
		require.Equal(t, "1", record["floods"])

		// Events are never refused: a client must be able to stop, or
		// say it completed.
		f.announce(hash, other, 2, passkey("passkeyB"), event(bittorrent.EventCompleted), seeding)
		f.refuse(hash, me, 1, passkey("passkeyA"))
		require.Empty(t, reports)
		f.refuse(hash, me, 1, passkey("passkeyA"))
		require.Len(t, reports, 1, "the third refusal in the window reports the peer")
		require.Equal(t, swarm.FloodReport{InfoHash: hash, TorrentID: "t1", UserID: "alice", PeerID: me, Addr: addr(1),
			Refusals: 3, Since: epoch.Add(time.Minute)}, reports[0])
		f.refuse(hash, me, 1, passkey("passkeyA"))
		require.Len(t, reports, 1, "once per window")
		require.Equal(t, int64(4), f.store.FloodRefused())
		require.Equal(t, int64(1), f.store.FloodReported())

		// Once FloodInterval has passed since its last accepted announce
		// the peer is served, and the counts did not touch its swarm.
		f.clock.Advance(8 * time.Minute)
		resp := f.announce(hash, me, 1, passkey("passkeyA"), transfer(0, 100))
		require.Equal(t, int64(1), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)
		f.flush() // a plain re-announce is written behind
		require.Equal(t, "100", b.Client.HGet(ctx, btstore.PeerKey(hash, me), "downloaded").Val())

		// A stopped event is served at once.
		f.clock.Advance(time.Second)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStopped))
		require.Equal(t, int64(0), f.torrent(hash).Leechers)

		// A new window counts afresh and reports again.
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Hour)
		f.announce(hash, me, 1, passkey("passkeyA"))
		for range 3 {
			f.refuse(hash, me, 1, passkey("passkeyA"))
		}
		require.Len(t, reports, 2)
		require.Equal(t, int64(3), reports[1].Refusals)
		require.Equal(t, epoch.Add(time.Hour+9*time.Minute+time.Second), reports[1].Since)
	})
}

func TestFloodControlOffAndBadConfig(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash, me := infoHash("open"), peerID("-XL", 1)
		for range 3 {
			f.announce(hash, me, 1) // FloodInterval 0: off
		}
		require.Zero(t, f.store.FloodRefused())
		_, err := swarm.New(b.Client, swarm.Config{Interval: time.Hour, MinInterval: 10 * time.Minute, FloodInterval: 11 * time.Minute})
		require.ErrorContains(t, err, "FloodInterval")
	})
}

// Issue 28 point 7: deny lists in open mode (and private), applied at
// once on every frontend through the cache hint.
func TestDenyListsRefuseOnEveryFrontend(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{CacheTTL: time.Hour})
		other := newFixture(t, b, swarm.Config{CacheTTL: time.Hour})
		ctx := context.Background()
		require.NoError(t, other.store.Start(ctx)) // subscribes to the hints
		hash, fine := infoHash("denied"), infoHash("fine")
		xl, tr := peerID("-XL0012-", 1), peerID("-TR3000-", 2)
		other.announce(hash, tr, 2)
		other.announce(fine, xl, 1)

		// Bad input is refused and changes nothing.
		require.ErrorIs(t, f.store.DenyClient(ctx, "", "x"), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.DenyClient(ctx, "-XL0012-", "bad\x00reason"), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.DenyTorrent(ctx, hash, string(make([]byte, 300))), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.AllowClient(ctx, "-NOPE"), swarm.ErrNotListed)
		torrents, clients, err := f.store.DenyLists(ctx)
		require.NoError(t, err)
		require.Empty(t, torrents)
		require.Empty(t, clients)

		require.NoError(t, f.store.DenyTorrent(ctx, hash, "DMCA takedown"))
		require.NoError(t, f.store.DenyClient(ctx, "-XL0012-", "leaks peers"))
		// The other frontend's cache lives an hour: only the hint can
		// make it see the change at once.
		require.Eventually(t, func() bool {
			_, err := other.store.Announce(ctx, request(hash, tr, 2))
			return err != nil
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, "this torrent is not allowed on this tracker: DMCA takedown", other.refuse(hash, tr, 2))
		require.Equal(t, "your client is not allowed on this tracker: leaks peers", other.refuse(fine, xl, 1))
		other.announce(fine, peerID("-XL0013-", 3), 3)
		entries, err := other.store.Scrape(ctx, "", []bittorrent.InfoHash{hash, fine})
		require.NoError(t, err)
		require.Equal(t, bittorrent.ScrapeEntry{}, entries[0], "a denied torrent scrapes as unknown")
		require.Equal(t, int64(2), entries[1].Incomplete)
		require.Equal(t, int64(3), other.store.Denials(), "the two above and the one that saw the hint")

		torrents, clients, err = f.store.DenyLists(ctx)
		require.NoError(t, err)
		require.Equal(t, []swarm.Denied{{Key: btstore.HexInfoHash(hash), Reason: "DMCA takedown"}}, torrents)
		require.Equal(t, []swarm.Denied{{Key: "-XL0012-", Reason: "leaks peers"}}, clients)

		require.NoError(t, f.store.AllowTorrent(ctx, hash))
		require.NoError(t, f.store.AllowClient(ctx, "-XL0012-"))
		require.Eventually(t, func() bool {
			_, err := other.store.Announce(ctx, request(hash, tr, 2))
			return err == nil
		}, 5*time.Second, 5*time.Millisecond)
		other.announce(fine, xl, 1)
	})
}

func TestDenyListsInPrivateMode(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.DenyClient(ctx, "-TR2", ""))
		require.Equal(t, "your client is not allowed on this tracker", f.refuse(hash, peerID("-TR2", 1), 1, passkey("passkeyA")))
		f.announce(hash, peerID("-TR3", 1), 1, passkey("passkeyA"))
	})
}

// FuzzCheckReason: whatever a site or an operator sends as a reason, an
// accepted one is what clients and terminals can show: 1-200 bytes of
// UTF-8 without a control character but tab.
func FuzzCheckReason(f *testing.F) {
	for _, seed := range []string{"Trumped", "Dupe: see #12", "\x1b[2J", "a\tb", "\xc2\x85", "é"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		if swarm.CheckReason(reason) != nil {
			return
		}
		if reason == "" || len(reason) > swarm.MaxReasonBytes || !utf8.ValidString(reason) {
			t.Fatalf("%q accepted", reason)
		}
		for _, r := range reason {
			if (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("%q accepted with U+%04X", reason, r)
			}
		}
	})
}
