package reaper_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Gazelle's pause scenario at the size: 10,000 uploads (with
// HOARD_TEST_LONG=1, as CI runs it; 1,000 otherwise, the same scenario
// scaled: 2,000 took a minute and a half of make test under load), half
// of them seeded once. A quarter are older than the run
// (created, or last seeded, over the 25 days before), the rest are
// uploaded day by day while the reaper runs daily for 35 days, so at the
// pause there are torrents in every state (no row, initial and final of
// both kinds, removed). Then the reaper is paused 30 simulated days and
// runs daily again. The first run back does one step per torrent, the
// next of its process, within the caps (more is due than they allow: the
// rest carries over); every run stays within the caps; no torrent is
// removed without both notices at least their gaps before; and in the end
// every upload is reaped (nobody reseeds) through its two notices.
func TestPauseOf30DaysOver10000Torrents(t *testing.T) {
	torrents := 1_000
	if os.Getenv("HOARD_TEST_LONG") != "" {
		torrents = 10_000
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p := reaper.DefaultPolicy()
		p.MaxPerUser, p.MaxUsers, p.MaxTotal = torrents/160, 80, torrents*3/10
		f := newFixture(t, b, p)
		const users = 120
		began := time.Now()
		hashes := make([]bittorrent.InfoHash, 0, torrents)
		uploader := make(map[bittorrent.InfoHash]string, torrents)
		register := func(n int, spread time.Duration) {
			pipe := b.Client.Pipeline()
			for range n {
				i := len(hashes)
				hash := hashOf(fmt.Sprintf("sim-%d", i))
				hashes = append(hashes, hash)
				uploader[hash] = fmt.Sprintf("user%d", i%users)
				at := f.clock.Now().Add(-time.Duration(n-len(hashes)%n) * spread / time.Duration(n))
				require.NoError(t, f.store.Register(f.ctx, hash, swarm.Registration{ID: fmt.Sprintf("t%d", i),
					Uploader: uploader[hash], Created: at}))
				if i%2 == 0 {
					// Seeded once: its last seeder left then (what the
					// announce path stores as last_action).
					pipe.HSet(f.ctx, btstore.TorrentKey(hash), "last_action", at.UnixMilli())
				}
			}
			_, err := pipe.Exec(f.ctx)
			require.NoError(t, err)
		}
		run := func() map[string]reaper.Outcome {
			names := f.tick()
			require.LessOrEqual(t, len(names), p.MaxTotal)
			perUser := map[string]int{}
			outcomes := make(map[string]reaper.Outcome, len(names))
			for _, name := range names {
				it, err := reaper.ParseItem(name)
				require.NoError(t, err)
				perUser[uploader[it.InfoHash]]++
				outcomes[name] = f.apply(name)
			}
			require.LessOrEqual(t, len(perUser), p.MaxUsers)
			for user, n := range perUser {
				require.LessOrEqual(t, n, p.MaxPerUser, user)
			}
			return outcomes
		}

		f.clock.Advance(25 * 24 * time.Hour)
		register(torrents/4, 25*24*time.Hour)
		daily := (torrents - torrents/4) / 35
		for day := range 35 {
			n := daily
			if day == 34 {
				n = torrents - len(hashes)
			}
			register(n, 24*time.Hour)
			run()
			f.clock.Advance(24 * time.Hour)
		}
		t.Logf("%d registered and 35 daily runs in %v", len(hashes), time.Since(began))
		before := make(map[bittorrent.InfoHash]reaper.State, torrents)
		states := map[string]int{}
		for _, h := range hashes {
			s := f.state(h)
			before[h] = s
			states[s.State+"/"+s.Notify]++
		}
		for _, want := range []string{"/", "never/initial", "never/final", "never/removed", "unseeded/initial", "unseeded/final", "unseeded/removed"} {
			require.Positive(t, states[want], "at the pause some torrents are %q: %v", want, states)
		}

		f.clock.Advance(30 * 24 * time.Hour)
		firstBack := run()
		steps := map[reaper.Step]int{}
		for name, out := range firstBack {
			it, _ := reaper.ParseItem(name)
			steps[it.Step]++
			was := before[it.InfoHash]
			switch it.Step {
			case reaper.NotifyInitial:
				require.True(t, was.State == "" || was.Notify == "", name)
			case reaper.NotifyFinal:
				require.Equal(t, "initial", was.Notify, name)
			case reaper.Remove:
				require.Equal(t, "final", was.Notify, "a removal in the first run back only after a final notice before the pause")
			}
			require.True(t, out.Done, "%s: %s", name, out.Reason)
		}
		t.Logf("at the pause: %v; first run back (caps %d per user, %d users, %d in all): %v",
			states, p.MaxPerUser, p.MaxUsers, p.MaxTotal, steps)
		carried := len(f.plan())
		t.Logf("the caps left %d due steps to the next runs", carried)
		require.Positive(t, carried, "more was due than one run may do: the caps hold and the rest carries over")

		runs := 1
		for ; runs < 200; runs++ {
			f.clock.Advance(24 * time.Hour)
			run()
			registered, err := b.Client.HLen(f.ctx, btstore.RegistryKey).Result()
			require.NoError(t, err)
			if registered == 0 {
				break
			}
		}
		for _, h := range hashes {
			s := f.state(h)
			require.Equal(t, "removed", s.Notify, btstore.HexInfoHash(h))
			sched := p.Unseeded
			if s.State == "never" {
				sched = p.Never
			}
			require.Greater(t, s.FinalAt.Sub(s.InitialAt), sched.Final, btstore.HexInfoHash(h))
			require.Greater(t, s.RemovedAt.Sub(s.FinalAt), sched.Removal, btstore.HexInfoHash(h))
		}
		t.Logf("all %d uploads reaped through both notices, %d daily runs after the pause; %v in all", len(hashes), runs, time.Since(began))
	})
}
