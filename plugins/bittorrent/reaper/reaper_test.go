package reaper_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"os"

	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// A never-seeded upload: initial notice strictly after 8 h, final
// strictly 48 h after it, removal strictly 24 h after that; no step early,
// none twice, none out of order, and no final in the run that inserted
// the row.
func TestNeverSeededGoesThroughBothNoticesBeforeRemoval(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		hash := f.register("never", "up1")
		// The initial notice's epoch is when it is planned; the later
		// steps' is when the initial notice was done: both at 8h+1ms.
		at := start.Add(8*time.Hour + time.Millisecond).UnixMilli()
		initial, final, remove := item(reaper.NotifyInitial, hash, at), item(reaper.NotifyFinal, hash, at), item(reaper.Remove, hash, at)

		f.clock.Advance(8 * time.Hour)
		require.Empty(t, f.plan(), "exactly the grace is not past it (strict <)")
		require.Equal(t, reaper.Outcome{Reason: "not due"}, f.apply(initial))
		require.Equal(t, reaper.Outcome{Reason: "out of order"}, f.apply(remove), "no removal without notices")
		require.Empty(t, f.state(hash).State, "a refused step changes nothing")

		f.clock.Advance(time.Millisecond)
		require.Equal(t, []string{initial}, f.tick())
		require.Empty(t, f.tick(), "a queued step is not queued again")
		require.Equal(t, reaper.Outcome{Done: true, Reason: "initial"}, f.apply(initial))
		require.Equal(t, reaper.Outcome{Reason: "already"}, f.apply(initial), "a repeated done changes nothing")
		s := f.state(hash)
		require.Equal(t, "never", s.State)
		require.Equal(t, "initial", s.Notify)
		require.Equal(t, f.clock.Now(), s.UnseededDate)
		require.Empty(t, f.plan(), "no final in the run that inserted the row")

		require.Equal(t, reaper.Outcome{Reason: "out of order"}, f.apply(remove))
		f.clock.Advance(48 * time.Hour)
		require.Empty(t, f.plan())
		require.Equal(t, reaper.Outcome{Reason: "not due"}, f.apply(final))
		f.clock.Advance(time.Millisecond)
		require.Equal(t, []string{final}, f.tick())
		require.Equal(t, reaper.Outcome{Done: true, Reason: "final"}, f.apply(final))
		require.Equal(t, reaper.Outcome{Reason: "already"}, f.apply(final))

		f.clock.Advance(24 * time.Hour)
		require.Equal(t, reaper.Outcome{Reason: "not due"}, f.apply(remove))
		f.clock.Advance(time.Millisecond)
		require.Equal(t, []string{remove}, f.tick())
		require.Equal(t, reaper.Outcome{Done: true, Reason: "removed"}, f.apply(remove))
		require.Equal(t, reaper.Outcome{Reason: "already"}, f.apply(remove))
		info, err := f.store.Torrent(f.ctx, hash)
		require.NoError(t, err)
		require.Empty(t, info.ID, "removed: unregistered")
		require.Empty(t, f.plan())
		s = f.state(hash)
		require.Equal(t, "removed", s.Notify)
		require.Equal(t, 8*time.Hour+48*time.Hour+24*time.Hour+3*time.Millisecond, s.RemovedAt.Sub(start))
	})
}

// An unseeded torrent's spell starts from last_action; a reseed seen by
// the announce path clears the state at once, and the steps already
// queued for that spell do nothing.
func TestReseedClearsTheStateAndStaleStepsDoNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, reaper.DefaultPolicy())
		hash := f.register("unseeded", "up1")
		f.seedAndLeave(hash)
		f.clock.Advance(480*time.Hour + time.Millisecond)
		epoch := f.clock.Now().UnixMilli()
		initial := item(reaper.NotifyInitial, hash, epoch)
		require.Equal(t, []string{initial}, f.tick())
		require.Equal(t, reaper.Outcome{Done: true, Reason: "initial"}, f.apply(initial))
		require.Equal(t, "unseeded", f.state(hash).State)

		f.clock.Advance(648*time.Hour + time.Millisecond)
		final := item(reaper.NotifyFinal, hash, epoch)
		require.Equal(t, []string{final}, f.tick())
		// Even if the state were not cleared, a moved last_action makes
		// the step do nothing: the spell it belongs to is over.
		row, err := b.Client.HGetAll(f.ctx, btstore.ReaperKey(hash)).Result()
		require.NoError(t, err)
		require.NoError(t, b.Client.HSet(f.ctx, btstore.TorrentKey(hash), "last_action", epoch).Err())
		require.Equal(t, reaper.Outcome{Reason: "reseeded"}, f.apply(final))
		require.Equal(t, row["notify"], f.state(hash).Notify, "refused: nothing changed")

		f.seedAndLeave(hash)
		s := f.state(hash)
		require.Empty(t, s.State, "a reseed clears the state")
		require.Equal(t, f.clock.Now().Add(15*time.Minute), s.ClaimUntil, "and opens the claim window: someone other than the uploader reseeded")
		require.Equal(t, reaper.Outcome{Reason: "out of order"}, f.apply(final), "its row is gone")
		require.Empty(t, f.state(hash).State)
		require.Empty(t, f.plan(), "seeded just now: nothing due")

		// Truncation: deleting the state only restarts at the initial notice.
		f.clock.Advance(480*time.Hour + time.Millisecond)
		again := item(reaper.NotifyInitial, hash, f.clock.Now().UnixMilli())
		require.Equal(t, []string{again}, f.tick())
		require.Equal(t, reaper.Outcome{Done: true, Reason: "initial"}, f.apply(again))
		require.NoError(t, b.Client.Del(f.ctx, btstore.ReaperKey(hash)).Err())
		f.clock.Advance(720 * time.Hour)
		restart := item(reaper.NotifyInitial, hash, f.clock.Now().UnixMilli())
		require.Equal(t, []string{restart}, f.plan(), "after truncation the next step is the initial notice again, under a new name")
		require.Equal(t, reaper.Outcome{Reason: "out of order"}, f.apply(item(reaper.NotifyFinal, hash, f.clock.Now().Add(-720*time.Hour).UnixMilli())),
			"a step of the deleted row's generation does nothing")
	})
}

// The caps: at most N per uploader, M uploaders, T in all, oldest first,
// never past T; what is left is taken by the next runs, breadth-first.
func TestCapsTakeOldestFirstAndCarryOver(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p := reaper.DefaultPolicy()
		p.MaxPerUser, p.MaxUsers, p.MaxTotal = 2, 2, 3
		f := newFixture(t, b, p)
		// Registered an hour apart: alice's first is the oldest, then bob's.
		var order []string
		for i, who := range []string{"alice", "bob", "alice", "carol", "alice", "bob"} {
			hash := f.register(who+string(rune('0'+i)), who)
			order = append(order, btstore.HexInfoHash(hash))
			f.clock.Advance(time.Hour)
		}
		f.clock.Advance(8 * time.Hour)
		hashesOf := func(names []string) []string {
			var out []string
			for _, name := range names {
				it, err := reaper.ParseItem(name)
				require.NoError(t, err)
				require.Equal(t, reaper.NotifyInitial, it.Step)
				out = append(out, btstore.HexInfoHash(it.InfoHash))
			}
			return out
		}
		// All six are due. alice (oldest first) gets 2, bob 1 (T=3 is not
		// overshot), carol waits (M=2).
		require.Equal(t, []string{order[0], order[2], order[1]}, hashesOf(f.tick()))
		// Next run: carol's (the oldest waiting), then alice's third; the
		// cap M=2 leaves bob's second to the run after.
		require.Equal(t, []string{order[3], order[4]}, hashesOf(f.tick()))
		require.Equal(t, []string{order[5]}, hashesOf(f.tick()), "bob's second, the last one left")
		require.Empty(t, f.tick(), "everything queued once")
	})
}

// Gazelle's pause scenario: torrents in every state, the reaper stopped
// for 30 simulated days, then started again. Its first run back queues
// only the next step of each torrent; no torrent is ever removed without
// both notices at least their gaps before; every run stays within the
// caps; and every due step is eventually done. 1,500 uploads with
// HOARD_TEST_LONG=1 (as CI runs it), 500 otherwise: the same scenario with
// the caps scaled, so they still bind (about 17 uploads per user against
// a per-user cap of 13), in a third of make test's time (two minutes
// under load at 1,500).
func TestThirtyDayPauseNeverCausesAMassRemoval(t *testing.T) {
	torrents := 500
	if os.Getenv("HOARD_TEST_LONG") != "" {
		torrents = 1500
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p := reaper.DefaultPolicy()
		p.MaxPerUser, p.MaxUsers, p.MaxTotal = torrents*2/75, 20, torrents/3
		f := newFixture(t, b, p)
		hashes := make([]string, 0, torrents)
		users := []string{}
		for u := range 30 {
			users = append(users, "user"+string(rune('a'+u%26))+string(rune('a'+u/26)))
		}
		// The reaper runs every 4 h, its workers doing every step at once.
		run := func() map[string]reaper.Outcome {
			names := f.tick()
			require.LessOrEqual(t, len(names), p.MaxTotal)
			perUser := map[string]int{}
			outcomes := map[string]reaper.Outcome{}
			for _, name := range names {
				it, err := reaper.ParseItem(name)
				require.NoError(t, err)
				info, err := f.store.Torrent(f.ctx, it.InfoHash)
				require.NoError(t, err)
				perUser[info.Uploader]++
				require.LessOrEqual(t, perUser[info.Uploader], p.MaxPerUser)
				outcomes[name] = f.apply(name)
			}
			require.LessOrEqual(t, len(perUser), p.MaxUsers)
			return outcomes
		}
		// One upload an hour for 62 days while the reaper runs, a third of
		// them seeded once: at the pause there are torrents in every state
		// (no row, initial and final of both kinds, removed).
		for i := range torrents {
			hash := f.register("t"+string(rune(i))+"x"+time.Duration(i).String(), users[i%len(users)])
			hashes = append(hashes, btstore.HexInfoHash(hash))
			if i%3 == 0 {
				f.seedAndLeave(hash)
			}
			if i%4 == 0 {
				run()
			}
			f.clock.Advance(time.Hour)
		}
		before := map[string]reaper.State{}
		for _, h := range hashes {
			hash, _ := swarm.ParseInfoHash(h)
			before[h] = f.state(hash)
		}

		f.clock.Advance(30 * 24 * time.Hour)
		firstBack := run()
		require.NotEmpty(t, firstBack)
		seen := map[string]bool{}
		steps := map[reaper.Step]int{}
		states := map[string]int{}
		for _, was := range before {
			states[was.State+"/"+was.Notify]++
		}
		for name := range firstBack {
			it, _ := reaper.ParseItem(name)
			steps[it.Step]++
		}
		t.Logf("before the pause: %v; first run back: %v", states, steps)
		for name, out := range firstBack {
			it, _ := reaper.ParseItem(name)
			h := btstore.HexInfoHash(it.InfoHash)
			require.False(t, seen[h], "one step per torrent in the first run back")
			seen[h] = true
			was := before[h]
			switch it.Step {
			case reaper.NotifyInitial:
				require.Empty(t, was.State)
			case reaper.NotifyFinal:
				require.Equal(t, "initial", was.Notify)
			case reaper.Remove:
				require.Equal(t, "final", was.Notify, "a removal only after the final notice went out before the pause")
			}
			require.True(t, out.Done, "%s: %s", name, out.Reason)
		}

		// Run on until nothing is due; then check every removal's history.
		for range 400 {
			if len(run()) == 0 && len(f.plan()) == 0 {
				registered, err := b.Client.HLen(f.ctx, btstore.RegistryKey).Result()
				require.NoError(t, err)
				if registered == 0 {
					break
				}
			}
			f.clock.Advance(4 * time.Hour)
		}
		removed := 0
		for _, h := range hashes {
			hash, _ := swarm.ParseInfoHash(h)
			s := f.state(hash)
			if s.Notify != "removed" {
				continue
			}
			removed++
			sched := p.Unseeded
			if s.State == "never" {
				sched = p.Never
			}
			require.Greater(t, s.FinalAt.Sub(s.InitialAt), sched.Final, h)
			require.Greater(t, s.RemovedAt.Sub(s.FinalAt), sched.Removal, h)
		}
		require.Equal(t, torrents, removed, "no one reseeded: every upload is reaped in the end")
	})
}
