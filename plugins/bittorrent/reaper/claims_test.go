package reaper_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
)

// unseededSpell registers an upload of "up", seeded once and snatched by
// the given users, and runs the reaper until its initial notice is done.
func (f *fixture) unseededSpell(name string, snatchers ...string) bittorrent.InfoHash {
	f.t.Helper()
	hash := f.register(name, "up")
	f.reseed(hash, "up")
	for _, u := range snatchers {
		f.snatch(hash, u)
	}
	f.stopSeeding(hash, "up")
	return hash
}

func claimUsers(t *testing.T, f *fixture, hash bittorrent.InfoHash) map[string]bool {
	t.Helper()
	claims, _, err := f.reaper.Claims(f.ctx, hash)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, c := range claims {
		out[c.User] = c.Rewarded
	}
	return out
}

// Claims within and beyond the window, per torrent (Orpheus measured the
// longest time spent once per run), by a winner who never snatched, and
// never twice for one person and upload.
func TestClaimWindowIsPerTorrentAndInclusive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		x, y := f.unseededSpell("x", "a", "b"), f.unseededSpell("y", "a", "b")
		f.clock.Advance(480*time.Hour + time.Millisecond)
		require.Len(t, f.runAll(), 2)
		f.pub.take()

		first := f.clock.Now()
		f.reseed(x, "a")
		f.clock.Advance(15 * time.Minute)
		f.reseed(x, "stranger") // exactly 15 minutes less seed time than a: wins; never snatched it
		f.clock.Advance(time.Millisecond)
		f.reseed(x, "b") // beyond the window: no claim
		require.Equal(t, map[string]bool{"a": false, "stranger": false}, claimUsers(t, f, x))

		f.reseed(y, "b") // y's own first reseed, 15 min after x's: its own window
		f.clock.Advance(10 * time.Minute)
		f.reseed(y, "up") // the uploader never claims
		f.reseed(y, "c")  // within y's window, beyond x's: wins y
		require.Equal(t, map[string]bool{"b": false, "c": false}, claimUsers(t, f, y))

		f.clock.Advance(time.Hour)
		f.runAll()
		claimed, keys := ofKind[reaper.ClaimBody](t, f.pub.take(), reaper.KindClaim)
		require.Len(t, claimed, 4)
		got := map[string]reaper.ClaimBody{}
		for i, c := range claimed {
			got[c.InfoHash[:4]+"/"+c.User] = c
			require.Equal(t, "claim:"+c.InfoHash+":"+c.User, keys[i])
		}
		hx, hy := btstore.HexInfoHash(x)[:4], btstore.HexInfoHash(y)[:4]
		require.True(t, got[hx+"/a"].First)
		require.Equal(t, first, got[hx+"/a"].At)
		require.True(t, got[hx+"/a"].Snatched)
		require.False(t, got[hx+"/stranger"].First)
		require.False(t, got[hx+"/stranger"].Snatched, "a winner who never snatched still has the win recorded")
		require.True(t, got[hy+"/b"].First)
		require.False(t, got[hy+"/c"].First)
		require.Equal(t, map[string]bool{"a": true, "stranger": true}, claimUsers(t, f, x), "rewarded")
		require.Equal(t, reaper.State{}, f.state(x), "the window is over and its rewards granted: the row is gone")

		// The same torrent unseeded again: a, who claimed it, is not invited
		// again, and a's reseed ends the spell with no second reward.
		for _, u := range []string{"a", "stranger", "b", "c"} {
			f.stopSeeding(x, u)
			f.stopSeeding(y, u)
		}
		f.clock.Advance(480*time.Hour + time.Millisecond)
		f.runAll()
		invites, _ := ofKind[reaper.InviteBody](t, f.pub.take(), reaper.KindInvite)
		for _, inv := range invites {
			if inv.InfoHash == btstore.HexInfoHash(x) {
				require.Equal(t, []string{"b"}, inv.Users, "claimed once: never invited again")
			}
		}
		f.reseed(x, "a")
		require.Empty(t, f.state(x).State, "a reseed by a past claimer still saves it")
		f.runAll()
		claimed, _ = ofKind[reaper.ClaimBody](t, f.pub.take(), reaper.KindClaim)
		require.Empty(t, claimed, "one person claims one upload once, ever")
		c, err := f.reaper.Counts(f.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), c.Claims)
		require.Equal(t, int64(4), c.Rewards)
	})
}

// The uploader reseeding clears the state and the open invitations, with
// no reward and no claim window.
func TestUploaderReseedGetsNoReward(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		hash := f.unseededSpell("own", "s1", "s2")
		f.clock.Advance(480*time.Hour + time.Millisecond)
		f.runAll()
		_, open, err := f.reaper.Claims(f.ctx, hash)
		require.NoError(t, err)
		require.Equal(t, []string{"s1", "s2"}, open)
		f.reseed(hash, "up")
		require.Equal(t, reaper.State{}, f.state(hash))
		claims, open, err := f.reaper.Claims(f.ctx, hash)
		require.NoError(t, err)
		require.Empty(t, claims)
		require.Empty(t, open)
		f.reseed(hash, "s1")
		require.Empty(t, claimUsers(t, f, hash), "no window after the uploader's reseed")
		f.pub.take()
		f.runAll()
		require.Empty(t, f.pub.take())
	})
}

// At least once: a worker whose publish fails has done the step but not
// acknowledged it; the next worker's Process finds it done and publishes
// the same events, with the same keys. The run's notices and the rewards
// are published before their steps are marked done, the same way.
func TestEventsArePublishedBeforeTheAcknowledgement(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p := reaper.DefaultPolicy()
		p.Unseeded = reaper.Schedule{Grace: time.Hour, Final: time.Hour, Removal: time.Hour}
		f := newFixture(t, b, p)
		hash := f.unseededSpell("t", "s1")
		f.clock.Advance(time.Hour + time.Millisecond)

		f.pub.fail = errors.New("site down")
		_, err := f.reaper.Tick(f.ctx)
		require.ErrorContains(t, err, "site down")
		require.Empty(t, f.state(hash).Pending, "the run's marks are taken back: nothing was queued")
		f.pub.fail = nil
		initial := f.tick()
		require.Len(t, initial, 1)
		notices, _ := ofKind[reaper.NoticeBody](t, f.pub.take(), reaper.KindNotice)
		require.Len(t, notices, 1)

		f.pub.fail = errors.New("site down")
		_, err = f.reaper.Process(f.ctx, initial[0])
		require.ErrorContains(t, err, "site down")
		require.Equal(t, "initial", f.state(hash).Notify, "the step itself was done")
		f.pub.fail = nil
		out, err := f.reaper.Process(f.ctx, initial[0])
		require.NoError(t, err)
		require.Equal(t, reaper.Outcome{Reason: "already"}, out)
		first, keys := ofKind[reaper.InviteBody](t, f.pub.take(), reaper.KindInvite)
		require.Equal(t, []string{"s1"}, first[0].Users)
		out, err = f.reaper.Process(f.ctx, initial[0])
		require.NoError(t, err)
		_, again := ofKind[reaper.InviteBody](t, f.pub.take(), reaper.KindInvite)
		require.Equal(t, keys, again, "the same event, the same key")
		require.True(t, f.apply(item(reaper.NotifyInitial, hash, 1)).Reason == "already")
		require.Empty(t, f.pub.take(), "Apply (the done hook) publishes only a step done now")

		// The removal, the same way.
		f.clock.Advance(time.Hour + time.Millisecond)
		f.runAll()
		f.clock.Advance(time.Hour + time.Millisecond)
		remove := f.tick()
		require.Len(t, remove, 1)
		f.pub.take()
		f.pub.fail = errors.New("site down")
		_, err = f.reaper.Process(f.ctx, remove[0])
		require.Error(t, err)
		require.Equal(t, "removed", f.state(hash).Notify)
		f.pub.fail = nil
		_, err = f.reaper.Process(f.ctx, remove[0])
		require.NoError(t, err)
		removed, _ := ofKind[reaper.RemovedBody](t, f.pub.take(), reaper.KindRemoved)
		require.Equal(t, []string{"s1"}, removed[0].Snatchers)
		require.Equal(t, "up", removed[0].Uploader)
		require.NotEmpty(t, removed[0].TorrentID, "the removed torrent's id, kept in its row")

		// Rewards: the claim stays waiting until its events are published.
		other := f.unseededSpell("r", "s1")
		f.clock.Advance(time.Hour + time.Millisecond)
		f.runAll()
		f.reseed(other, "s1")
		f.pub.fail = errors.New("site down")
		_, err = f.reaper.Tick(f.ctx)
		require.Error(t, err)
		require.Equal(t, map[string]bool{"s1": false}, claimUsers(t, f, other))
		f.pub.fail = nil
		f.tick()
		rewards, keys := ofKind[reaper.RewardBody](t, f.pub.take(), reaper.KindReward)
		require.Len(t, rewards, 1)
		require.Equal(t, []string{"reward:" + btstore.HexInfoHash(other) + ":s1"}, keys)
		require.Equal(t, map[string]bool{"s1": true}, claimUsers(t, f, other))
	})
}

// Preview says what the next run would do and changes nothing: every key
// is byte-identical (DUMP) before and after, including a removed torrent
// whose registry cleanup failed (Plan retries that; Preview does not).
func TestPreviewChangesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p := reaper.DefaultPolicy()
		p.Never = reaper.Schedule{Grace: time.Hour, Final: time.Hour, Removal: time.Hour}
		p.MaxPerUser = 1
		f := newFixture(t, b, p)
		failing := reaper.New(b.Client, reaper.Config{Policy: p, Now: f.clock.Now, Logger: quiet, Publisher: f.pub,
			Unregister: func(ctxt context.Context, _ bittorrent.InfoHash) error { return errors.New("registry down") }})
		gone := f.register("gone", "u0")
		f.clock.Advance(time.Hour + time.Millisecond)
		names, err := failing.Tick(f.ctx)
		require.NoError(t, err)
		for range 2 {
			for _, n := range names {
				_, err := failing.Process(f.ctx, n)
				require.NoError(t, err)
			}
			f.clock.Advance(time.Hour + time.Millisecond)
			names, err = failing.Tick(f.ctx)
			require.NoError(t, err)
		}
		for _, n := range names {
			_, err := failing.Process(f.ctx, n)
			require.NoError(t, err)
		}
		require.Equal(t, "removed", f.state(gone).Notify)
		claimed := f.unseededSpell("c", "s1")
		f.clock.Advance(480*time.Hour + time.Millisecond)
		f.runAll()
		f.reseed(claimed, "s1")
		f.register("n1", "u1")
		f.register("n2", "u1")
		f.clock.Advance(time.Hour + time.Millisecond)

		before := dump(t, b.Client)
		preview, err := f.reaper.Preview(f.ctx)
		require.NoError(t, err)
		require.Equal(t, before, dump(t, b.Client), "preview changed nothing")
		require.Equal(t, 1, preview.LeftOver, "u1's second upload waits for the next run")
		require.Len(t, preview.Steps, 1)
		require.Equal(t, []reaper.PreviewReward{{InfoHash: btstore.HexInfoHash(claimed), Users: []string{"s1"}, Points: 1.25}}, preview.Rewards)

		var items []string
		for _, s := range preview.Steps {
			items = append(items, s.Item)
		}
		require.Equal(t, items, f.tick(), "the run does what the preview said")
	})
}

// Bad input to an extension gets a clear error and changes nothing.
func TestExtendRefusesBadInput(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		in := f.register("in", "up")
		quiet := f.register("quiet", "up")
		f.clock.Advance(8*time.Hour + time.Millisecond)
		f.runAll()
		f.reseed(quiet, "up")
		before := dump(t, b.Client)
		for _, days := range []int{0, -1, reaper.MaxExtensionDays + 1} {
			_, err := f.reaper.Extend(f.ctx, in, days)
			require.ErrorIs(t, err, reaper.ErrInvalid, days)
			require.ErrorContains(t, err, "want a whole number from 1 to 3650")
		}
		_, err := f.reaper.Extend(f.ctx, hashOf("unknown"), 3)
		require.ErrorIs(t, err, reaper.ErrNotFound)
		require.ErrorContains(t, err, "is not registered")
		_, err = f.reaper.Extend(f.ctx, quiet, 3)
		require.ErrorIs(t, err, reaper.ErrNoNotice)
		_, err = f.reaper.ExtendUser(f.ctx, "nobody", 3)
		require.ErrorIs(t, err, reaper.ErrNotFound)
		_, err = f.reaper.ExtendUser(f.ctx, "{up}", 3)
		require.ErrorIs(t, err, reaper.ErrInvalid)
		require.Equal(t, before, dump(t, b.Client), "nothing changed")

		exts, err := f.reaper.ExtendUser(f.ctx, "up", 2)
		require.NoError(t, err)
		require.Len(t, exts, 1, "only the upload in the process")
		require.Equal(t, in, exts[0].InfoHash)
		require.Equal(t, f.clock.Now().Add(48*time.Hour), exts[0].UnseededDate)
	})
}
