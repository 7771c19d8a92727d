package swarm_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The peer record and the user-torrent record are what accounting reads
// (Ocelot's xbt_files_users and users_leech_stats): these tests read them
// straight from Redis, field by field, as announce.lua writes them.

// hash reads one Redis hash.
func (f *fixture) hash(key string) map[string]string {
	f.t.Helper()
	v, err := f.b.Client.HGetAll(context.Background(), key).Result()
	require.NoError(f.t, err)
	return v
}

func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// speed is a transfer rate as the script formats it: bytes per second
// with two decimals.
func speed(delta, elapsedMs int64) string {
	return fmt.Sprintf("%.2f", float64(delta)*1000/float64(elapsedMs))
}

func TestPeerRecordFields(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash, peer := infoHash("peer-record"), peerID("-TR", 1)
		key := btstore.PeerKey(hash, peer)
		first := epoch

		f.announce(hash, peer, 1, event(bittorrent.EventStarted), transfer(100, 50))
		rec := f.hash(key)
		require.Equal(t, "100", rec["uploaded"], "counters are stored as reported")
		require.Equal(t, "50", rec["downloaded"])
		require.Equal(t, "1000", rec["left"])
		require.Equal(t, millis(first), rec["first_announce"])
		require.Equal(t, millis(first), rec["last_announce"])
		require.Equal(t, "0", rec["total_time"])
		require.Equal(t, "1", rec["active"])
		require.Equal(t, "", rec["user"], "open mode has no user")
		require.NotContains(t, rec, "speed_up", "no speed before any time has passed")
		require.NotContains(t, rec, "speed_down")
		require.NotContains(t, rec, "completed")

		// 7 s later it has sent 3000 bytes, received 12345 and finished.
		f.clock.Advance(7 * time.Second)
		second := first.Add(7 * time.Second)
		f.announce(hash, peer, 1, seeding, event(bittorrent.EventCompleted), transfer(100+3000, 50+12345))
		rec = f.hash(key)
		require.Equal(t, "3100", rec["uploaded"])
		require.Equal(t, "12395", rec["downloaded"])
		require.Equal(t, "0", rec["left"])
		require.Equal(t, millis(first), rec["first_announce"], "first_announce stays")
		require.Equal(t, millis(second), rec["last_announce"])
		require.Equal(t, "7000", rec["total_time"])
		require.Equal(t, speed(3000, 7000), rec["speed_up"])
		require.Equal(t, speed(12345, 7000), rec["speed_down"])
		require.Equal(t, "1763.57", rec["speed_down"], "12345 B in 7 s")
		require.Equal(t, "1", rec["completed"])
		require.Equal(t, "1", rec["active"])
		ttl, err := b.Client.PTTL(context.Background(), key).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "an active peer's record does not expire")

		// 3 s later it stops, having sent 600 more and received nothing.
		f.clock.Advance(3 * time.Second)
		third := second.Add(3 * time.Second)
		f.announce(hash, peer, 1, seeding, event(bittorrent.EventStopped), transfer(3100+600, 12395))
		rec = f.hash(key)
		require.Equal(t, "3700", rec["uploaded"])
		require.Equal(t, "12395", rec["downloaded"])
		require.Equal(t, millis(first), rec["first_announce"])
		require.Equal(t, millis(third), rec["last_announce"])
		require.Equal(t, "10000", rec["total_time"], "total_time is the time between first and last announce")
		require.Equal(t, speed(600, 3000), rec["speed_up"])
		require.Equal(t, "200.00", rec["speed_up"])
		require.Equal(t, "0.00", rec["speed_down"])
		require.Equal(t, "1", rec["completed"], "completed stays")
		require.Equal(t, "0", rec["active"])
		ttl, err = b.Client.PTTL(context.Background(), key).Result()
		require.NoError(t, err)
		retention := f.store.Config().PeerRetention
		require.True(t, ttl > 0 && ttl <= retention, "a stopped peer's record lives PeerRetention (%v) longer, has %v", retention, ttl)
	})
}

func TestUserTorrentRecordFields(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		peer := peerID("-TR", 1)
		key := btstore.UserTorrentKey(hash, "alice")
		start := epoch
		alice := passkey("passkeyA")

		// A started event opens the session at the counters it reports.
		f.announce(hash, peer, 1, alice, event(bittorrent.EventStarted), transfer(1000, 2000))
		rec := f.hash(key)
		// The script writes only the numbers that changed: absent is 0.
		require.NotContains(t, rec, "uploaded", "a started event's counters are the session's base")
		require.NotContains(t, rec, "downloaded")
		require.NotContains(t, rec, "leech_ms")
		require.Equal(t, "1", rec["peers"])
		require.Equal(t, millis(start), rec["first_announce"])
		require.Equal(t, millis(start), rec["last_announce"])
		require.Equal(t, "alice", f.hash(btstore.PeerKey(hash, peer))["user"])

		// 5 s leeching, then 5 s more leeching ending in completed: leech time.
		f.clock.Advance(5 * time.Second)
		f.announce(hash, peer, 1, alice, transfer(1000+10, 2000+400))
		f.clock.Advance(5 * time.Second)
		completedAt := start.Add(10 * time.Second)
		f.announce(hash, peer, 1, alice, seeding, event(bittorrent.EventCompleted), transfer(1000+30, 2000+1000))
		rec = f.hash(key)
		require.Equal(t, "10000", rec["leech_ms"])
		require.NotContains(t, rec, "seed_ms", "not seeded yet")
		require.Equal(t, "30", rec["uploaded"], "deltas since the session began")
		require.Equal(t, "1000", rec["downloaded"])
		require.Equal(t, "1", rec["complete"])
		require.Equal(t, millis(completedAt), rec["snatched"])

		// 4 s seeding, then 2 s more seeding ending in stopped: seed time.
		f.clock.Advance(4 * time.Second)
		f.announce(hash, peer, 1, alice, seeding, transfer(1000+530, 3000))
		f.clock.Advance(2 * time.Second)
		stoppedAt := start.Add(16 * time.Second)
		f.announce(hash, peer, 1, alice, seeding, event(bittorrent.EventStopped), transfer(1000+730, 3000))
		rec = f.hash(key)
		require.Equal(t, "6000", rec["seed_ms"])
		require.Equal(t, "10000", rec["leech_ms"])
		require.Equal(t, "730", rec["uploaded"])
		require.Equal(t, "1000", rec["downloaded"])
		require.Equal(t, "0", rec["peers"], "its only peer left")
		require.Equal(t, millis(completedAt), rec["snatched"], "snatched is the first completed")
		require.Equal(t, millis(start), rec["first_announce"])
		require.Equal(t, millis(stoppedAt), rec["last_announce"])
		ttl, err := b.Client.PTTL(context.Background(), key).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "the hit-and-run truth has no TTL")
	})
}

// A plain re-announce written by refresh.lua (read with the view, or
// from the queue) leaves the record as announce.lua would: refresh.lua
// writes only the fields that changed, so a seeder's downloaded and left
// stay as they were, and a counter past 2^53 is stored as reported with
// its delta as text, as before.
func TestRefreshedRecordHasTheReannounce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash, peer := infoHash("refreshed-record"), peerID("-TR", 1)
		key := btstore.PeerKey(hash, peer)
		f.announce(hash, peer, 1, seeding, event(bittorrent.EventStarted), transfer(100, 50))

		// Past the view's age: the re-announce reads the view and is
		// written in that refresh.lua call.
		f.clock.Advance(10 * time.Second)
		at := epoch.Add(10 * time.Second)
		f.announce(hash, peer, 1, seeding, transfer(4100, 50))
		require.Equal(t, int64(1), f.store.WriteBehindStats().ViewReads)
		rec := f.hash(key)
		require.Equal(t, "4100", rec["uploaded"])
		require.Equal(t, "50", rec["downloaded"], "unchanged, not rewritten")
		require.Equal(t, "0", rec["left"])
		require.Equal(t, "4000", rec["up_delta"])
		require.Equal(t, "0", rec["down_delta"])
		require.Equal(t, "10000", rec["total_time"])
		require.Equal(t, speed(4000, 10000), rec["speed_up"])
		require.Equal(t, "0.00", rec["speed_down"])
		require.Equal(t, millis(at), rec["last_announce"])

		// Within the view's age: queued, written by the flush.
		const huge = uint64(1) << 60
		f.clock.Advance(500 * time.Millisecond)
		at = at.Add(500 * time.Millisecond)
		f.announce(hash, peer, 1, seeding, transfer(huge, 50))
		require.Equal(t, 1, f.store.WriteBehindStats().Queued)
		f.flush()
		rec = f.hash(key)
		require.Equal(t, strconv.FormatUint(huge, 10), rec["uploaded"])
		require.Equal(t, strconv.FormatFloat(float64(huge)-4100, 'f', 0, 64), rec["up_delta"],
			"a delta past 2^53 as text, as Lua's double has it")
		require.Equal(t, "0", rec["down_delta"])
		require.Equal(t, "10500", rec["total_time"])
		require.Equal(t, millis(at), rec["last_announce"])
		require.Equal(t, "50", rec["downloaded"])
		require.Equal(t, "0", rec["left"])
		require.Equal(t, "3", f.hash(btstore.TorrentKey(hash))["announces"])
	})
}

// A view of a swarm larger than the sample (Config.MaxNumWant) is a
// random sample of it (HRANDFIELD); of a smaller one, the whole role
// hash (HVALS): both answer distinct peers of the swarm and its counts.
func TestViewSamplesLargeSwarmsAndReadsSmallOnesWhole(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{MaxNumWant: 3})
		for _, seeders := range []int{2, 5} {
			hash := infoHash(fmt.Sprint("view-sample-", seeders))
			in := map[bittorrent.PeerID]bool{}
			for i := range seeders {
				id := peerID("-SD", 10+i)
				in[id] = true
				f.announce(hash, id, 10+i, seeding, event(bittorrent.EventStarted))
			}
			me := peerID("-ME", 1)
			f.announce(hash, me, 1, event(bittorrent.EventStarted))
			reads := f.store.WriteBehindStats().ViewReads
			f.clock.Advance(10 * time.Second)
			resp := f.announce(hash, me, 1)
			require.Equal(t, reads+1, f.store.WriteBehindStats().ViewReads, "read with the view")
			require.Equal(t, int64(seeders), resp.Complete)
			require.Equal(t, int64(1), resp.Incomplete)
			got := peerIDs(resp.Peers)
			require.Len(t, got, min(seeders, 3))
			seen := map[bittorrent.PeerID]bool{}
			for _, id := range got {
				require.True(t, in[id], "a seeder of the swarm")
				require.False(t, seen[id], "each once")
				seen[id] = true
			}
		}
	})
}

// TestPackedViewFollowsEveryChange: a role read whole is kept packed in
// the torrent's record and served from there while its tag holds, and
// every change of a role hash makes the next view read whole again: a
// join (announce.lua), an expiry (expire.lua) and an announce counted by
// a frontend that does not know the tag (an older build beside this one).
// The packed entries are replaced by a wrong string between reads, so an
// answer shows which one it came from.
func TestPackedViewFollowsEveryChange(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f := newFixture(t, b, swarm.Config{Interval: time.Minute})
		hash := infoHash("packed-view")
		key := btstore.TorrentKey(hash)
		me := peerID("-ME", 1)
		f.announce(hash, me, 1, event(bittorrent.EventStarted))
		for i := range 2 {
			f.announce(hash, peerID("-SD", 10+i), 10+i, seeding, event(bittorrent.EventStarted))
		}
		// view reads whole; only the first seeder's entry is left packed
		// (the wrong string), so an answer from the packed view has one
		// seeder and an answer read whole has them all.
		seeders := func() []bittorrent.PeerID {
			t.Helper()
			f.clock.Advance(10 * time.Second)
			reads := f.store.WriteBehindStats().ViewReads
			resp := f.announce(hash, me, 1)
			require.Equal(t, reads+1, f.store.WriteBehindStats().ViewReads, "read with the view")
			return peerIDs(resp.Peers)
		}
		poison := func(n int) {
			t.Helper()
			packed, err := b.Client.HGet(ctx, key, "view_s").Result()
			require.NoError(t, err)
			require.NotEmpty(t, packed, "the seeders are packed")
			require.Zero(t, len(packed)%n, "n entries of one length")
			require.NoError(t, b.Client.HSet(ctx, key, "view_s", packed[:len(packed)/n]).Err())
		}
		require.Len(t, seeders(), 2, "read whole, then packed")
		poison(2)
		require.Len(t, seeders(), 1, "the packed view answers, and stays packed across the refreshes it writes")
		require.Len(t, seeders(), 1)

		// A join makes the next read whole.
		f.announce(hash, peerID("-SD", 12), 12, seeding, event(bittorrent.EventStarted))
		require.Len(t, seeders(), 3, "a join: read whole")
		poison(3)
		require.Len(t, seeders(), 1)

		// An announce counted by a build that does not know the tag.
		require.NoError(t, b.Client.HIncrBy(ctx, key, "announces", 1).Err())
		require.Len(t, seeders(), 3, "announces moved without the tag: read whole")

		// An expiry: everyone but the third seeder re-announces, and the
		// third times out.
		poison(3)
		f.clock.Advance(50 * time.Second)
		f.announce(hash, peerID("-SD", 10), 10, seeding)
		f.announce(hash, peerID("-SD", 11), 11, seeding)
		f.announce(hash, me, 1)
		f.flush()
		f.clock.Advance(60 * time.Second)
		removed, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, removed)
		got := seeders()
		require.ElementsMatch(t, []bittorrent.PeerID{peerID("-SD", 10), peerID("-SD", 11)}, got, "an expiry: read whole")
	})
}
