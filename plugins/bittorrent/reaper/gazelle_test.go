package reaper_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Gazelle's testNeverSeeded: the initial notice, two uploads in one
// message, the final notice, the removal; with several torrents per run.
func TestGazelleNeverSeeded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		a1, a2, b1 := f.register("a1", "alice"), f.register("a2", "alice"), f.register("b1", "bob")

		f.clock.Advance(8*time.Hour + time.Millisecond)
		run := f.clock.Now()
		require.Len(t, f.runAll(), 3)
		notices, keys := ofKind[reaper.NoticeBody](t, f.pub.take(), reaper.KindNotice)
		require.Len(t, notices, 2, "one message per uploader")
		byUser := map[string]reaper.NoticeBody{}
		for i, n := range notices {
			byUser[n.User] = n
			require.Equal(t, "notice:initial:"+n.User+":"+itoa(run.UnixMilli()), keys[i])
		}
		require.Equal(t, "initial", byUser["alice"].Step)
		require.ElementsMatch(t, []string{btstore.HexInfoHash(a1), btstore.HexInfoHash(a2)}, hashesIn(byUser["alice"]), "two uploads in one message")
		require.Equal(t, []string{btstore.HexInfoHash(b1)}, hashesIn(byUser["bob"]))
		require.Equal(t, "never", byUser["bob"].Torrents[0].State)
		require.Equal(t, run.Add(72*time.Hour), byUser["bob"].Torrents[0].RemovalAt)

		f.clock.Advance(48*time.Hour + time.Millisecond)
		require.Len(t, f.runAll(), 3)
		notices, _ = ofKind[reaper.NoticeBody](t, f.pub.take(), reaper.KindNotice)
		require.Len(t, notices, 2)
		for _, n := range notices {
			require.Equal(t, "final", n.Step)
		}

		f.clock.Advance(24*time.Hour + time.Millisecond)
		require.Len(t, f.runAll(), 3)
		removed, keys := ofKind[reaper.RemovedBody](t, f.pub.take(), reaper.KindRemoved)
		require.Len(t, removed, 3)
		for i, r := range removed {
			require.Equal(t, "never", r.State)
			require.Empty(t, r.Snatchers, "never seeded: nobody snatched it")
			require.Contains(t, keys[i], "removed:"+r.InfoHash+":")
		}
		c, err := f.reaper.Counts(f.ctx)
		require.NoError(t, err)
		require.Equal(t, []int64{3, 3, 3, 4}, []int64{c.InitialDone, c.FinalDone, c.Removed, c.Notices})
	})
}

// Gazelle's testUnseeded: both audiences are told (the uploader's notice,
// the snatchers' invitation: not the uploader's), a snatcher's reseed
// wins the claim (the others' invitations close), the final notice goes
// to the uploader only, the removal to both.
func TestGazelleUnseeded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		saved, lost := hashOf("saved"), hashOf("lost")
		require.NoError(t, f.store.Register(f.ctx, saved, swarm.Registration{ID: "10", Uploader: "up", Value: 4}))
		require.NoError(t, f.store.Register(f.ctx, lost, swarm.Registration{ID: "11", Uploader: "up"}))
		for _, h := range []bittorrent.InfoHash{saved, lost} {
			f.reseed(h, "up")
			f.snatch(h, "up") // the uploader's own snatch does not make them a snatcher to invite
			f.snatch(h, "s1")
			f.stopSeeding(h, "up")
		}
		f.snatch(saved, "s2")

		// Strict <: exactly the grace after the last seeder is not past it.
		f.clock.Advance(480 * time.Hour)
		require.Empty(t, f.plan())
		f.clock.Advance(time.Millisecond)
		require.Len(t, f.runAll(), 2)
		events := f.pub.take()
		notices, _ := ofKind[reaper.NoticeBody](t, events, reaper.KindNotice)
		require.Len(t, notices, 1)
		require.Equal(t, "up", notices[0].User)
		require.Len(t, notices[0].Torrents, 2)
		invites, keys := ofKind[reaper.InviteBody](t, events, reaper.KindInvite)
		require.Len(t, invites, 2)
		for i, inv := range invites {
			require.Equal(t, "up", inv.Uploader)
			want := []string{"s1"}
			if inv.InfoHash == btstore.HexInfoHash(saved) {
				want = []string{"s1", "s2"}
			}
			require.Equal(t, want, inv.Users, "the snatchers, not the uploader")
			require.Equal(t, "invite:"+inv.InfoHash+":"+itoa(f.clock.Now().UnixMilli()), keys[i])
		}
		_, open, err := f.reaper.Claims(f.ctx, saved)
		require.NoError(t, err)
		require.Equal(t, []string{"s1", "s2"}, open)

		// s1 reseeds: the spell is over, s1 claims, s2's invitation closes.
		f.clock.Advance(time.Hour)
		f.reseed(saved, "s1")
		require.Empty(t, f.state(saved).State)
		claims, open, err := f.reaper.Claims(f.ctx, saved)
		require.NoError(t, err)
		require.Empty(t, open)
		require.Equal(t, []reaper.Claim{{User: "s1", At: f.clock.Now()}}, claims)
		f.runAll()
		events = f.pub.take()
		claimed, keys := ofKind[reaper.ClaimBody](t, events, reaper.KindClaim)
		require.Equal(t, []reaper.ClaimBody{{InfoHash: btstore.HexInfoHash(saved), TorrentID: "10", User: "s1", At: f.clock.Now(),
			First: true, Snatched: true, State: "unseeded"}}, claimed)
		require.Equal(t, []string{"claim:" + btstore.HexInfoHash(saved) + ":s1"}, keys)
		rewards, _ := ofKind[reaper.RewardBody](t, events, reaper.KindReward)
		require.Equal(t, []reaper.RewardBody{{InfoHash: btstore.HexInfoHash(saved), TorrentID: "10", User: "s1", Points: 5, Factor: 1.25, Value: 4}},
			rewards, "1.25 x the registered value")
		claims, _, err = f.reaper.Claims(f.ctx, saved)
		require.NoError(t, err)
		require.True(t, claims[0].Rewarded)
		f.runAll()
		require.Empty(t, f.pub.take(), "a reward is granted once")

		// The lost one: final notice to the uploader only, removal to both.
		f.clock.Advance(648*time.Hour - time.Hour + time.Millisecond)
		require.Len(t, f.runAll(), 1)
		events = f.pub.take()
		notices, _ = ofKind[reaper.NoticeBody](t, events, reaper.KindNotice)
		require.Len(t, events, 1, "only the uploader's final notice")
		require.Equal(t, "final", notices[0].Step)
		require.Equal(t, []string{btstore.HexInfoHash(lost)}, hashesIn(notices[0]))
		f.clock.Advance(72*time.Hour + time.Millisecond)
		require.Len(t, f.runAll(), 1)
		removed, _ := ofKind[reaper.RemovedBody](t, f.pub.take(), reaper.KindRemoved)
		require.Equal(t, []reaper.RemovedBody{{InfoHash: btstore.HexInfoHash(lost), TorrentID: "11", State: "unseeded", Uploader: "up",
			Snatchers: []string{"s1"}, Run: f.clock.Now()}}, removed)
		info, err := f.store.Torrent(f.ctx, saved)
		require.NoError(t, err)
		require.Equal(t, "10", info.ID, "the saved one stays")
	})
}

// Gazelle's testGracePeriod: an extension of 10 days moves unseeded_date
// by 864000 s; the steps wait for it, the ones already queued do nothing,
// a removal re-checks it in its own script, and a reseed after it still
// clears the state.
func TestGazelleGracePeriodExtension(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		hash := f.register("late", "up")
		f.clock.Advance(8*time.Hour + time.Millisecond)
		f.runAll()
		before := f.state(hash)
		queuedFinal := item(reaper.NotifyFinal, hash, before.Gen)

		ext, err := f.reaper.Extend(f.ctx, hash, 10)
		require.NoError(t, err)
		require.Equal(t, 864000*time.Second, ext.UnseededDate.Sub(before.UnseededDate))
		require.Equal(t, "initial", ext.Notify)
		after := f.state(hash)
		require.Equal(t, ext.UnseededDate, after.UnseededDate)
		require.NotEqual(t, before.Gen, after.Gen, "a new generation: steps get new names")

		f.clock.Advance(48*time.Hour + time.Millisecond)
		require.Empty(t, f.plan(), "the final notice waits for the extension")
		require.Equal(t, reaper.Outcome{Reason: "out of order"}, f.apply(queuedFinal), "a step queued before the extension does nothing")
		f.clock.Advance(10 * 24 * time.Hour)
		final := item(reaper.NotifyFinal, hash, after.Gen)
		require.Equal(t, []string{final}, f.tick())
		require.True(t, f.apply(final).Done)

		// The removal is queued; an extension comes before a worker takes
		// it: the removal's own script sees it and refuses.
		f.clock.Advance(24*time.Hour + time.Millisecond)
		remove := item(reaper.Remove, hash, after.Gen)
		require.Equal(t, []string{remove}, f.tick())
		_, err = f.reaper.Extend(f.ctx, hash, 1)
		require.NoError(t, err)
		require.Equal(t, reaper.Outcome{Reason: "out of order"}, f.apply(remove))
		s := f.state(hash)
		require.Equal(t, "final", s.Notify, "not removed")
		// Even a removal named for the new generation is not due yet: the
		// script checks unseeded_date itself.
		require.Equal(t, reaper.Outcome{Reason: "not due"}, f.apply(item(reaper.Remove, hash, s.Gen)))
		require.Equal(t, "final", f.state(hash).Notify)

		// Reseed after the extension: the state is cleared at once.
		f.reseed(hash, "someone")
		require.Empty(t, f.state(hash).State)
		require.Empty(t, f.plan())
		c, err := f.reaper.Counts(f.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), c.Extensions)
	})
}

func hashesIn(n reaper.NoticeBody) []string {
	var out []string
	for _, t := range n.Torrents {
		out = append(out, t.InfoHash)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Strict < at each of the unseeded schedule's thresholds (the never-seeded
// ones are in TestNeverSeededGoesThroughBothNoticesBeforeRemoval): exactly
// the gap is not past it, one millisecond more is.
func TestUnseededThresholdsAreStrict(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		hash := f.register("strict", "up")
		f.seedAndLeave(hash)
		for _, gap := range []time.Duration{480 * time.Hour, 648 * time.Hour, 72 * time.Hour} {
			f.clock.Advance(gap)
			require.Empty(t, f.plan(), "exactly %v is not past it", gap)
			f.clock.Advance(time.Millisecond)
			require.Len(t, f.runAll(), 1, "%v and 1 ms is", gap)
		}
		require.Equal(t, "removed", f.state(hash).Notify)
		require.Equal(t, "unseeded", f.state(hash).State)
	})
}
