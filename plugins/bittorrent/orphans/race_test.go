package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// TestCleanupRacesAnnouncesRegistrationsAndReAddedUsers runs cleanup over
// and over (a full pass in one goroutine, bounded ticks of a second
// cleaner in another) while:
//   - live torrents are unregistered and registered again and announced
//     by two users (started, then stopped with one more byte uploaded, so
//     the swarm is empty between cycles and every user record counts its
//     cycles);
//   - revived torrents, unregistered long ago and stale, are registered
//     again and announced at random moments, the very torrents being
//     cleaned;
//   - orphans, unregistered at the start, are never touched again;
//   - users are re-added, and the clock moves a window forward every few
//     cycles.
//
// Afterwards: no live record was removed (each user record counts every
// cycle, and every user's sets show every live torrent), each revived
// torrent is whole (registered, its users set names exactly its user
// records), and every orphan is gone after two more passes.
//
// A few seconds by default; HOARD_TEST_LONG=1 (make test-long) runs many
// more cycles.
func TestCleanupRacesAnnouncesRegistrationsAndReAddedUsers(t *testing.T) {
	cycles, live, revived, orphaned := 15, 12, 12, 20
	if os.Getenv("HOARD_TEST_LONG") != "" {
		cycles, live, revived, orphaned = 200, 24, 40, 200
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		users := []string{"alice", "bob"}
		name := func(kind string, i int) bittorrent.InfoHash { return infoHash(kind + strconv.Itoa(i)) }
		for i := range revived + orphaned {
			kind, n := "revived", i
			if i >= revived {
				kind, n = "orphan", i-revived
			}
			hash := name(kind, n)
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, kind+strconv.Itoa(n)))
			for u, user := range users {
				require.NoError(t, f.announce(hash, 100+u, pkPrefix+user, 0, 0, bittorrent.EventStarted))
				require.NoError(t, f.announce(hash, 100+u, pkPrefix+user, 0, 1, bittorrent.EventStopped))
			}
			require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		}
		for i := range live {
			require.NoError(t, f.store.RegisterTorrent(ctx, name("live", i), "live"+strconv.Itoa(i)))
		}
		// Scoring's tombstones (unrank mode: no TTL) with their history,
		// tracker list and tracker's seen set, all stale by the time the
		// cleaners run: the live torrents' must stay, the orphans' go.
		for i := range live {
			writeScoreTombstone(t, f, name("live", i))
		}
		for i := range orphaned {
			writeScoreTombstone(t, f, name("orphan", i))
		}
		// Registered and idle for ages: live, however old.
		idle := privateTorrent(t, f, "idle", "idle")
		require.NoError(t, f.store.Flush(ctx))
		f.clock.Advance(window + time.Second) // revived and orphans are stale now

		bg := runCleaners(f)
		bg.loop(func() error { // users re-added
			for _, user := range users {
				if err := f.store.AddUser(ctx, pkPrefix+user, user); err != nil {
					return err
				}
			}
			time.Sleep(time.Millisecond)
			return nil
		})

		// Two announcers, each owning half of the live and revived torrents.
		done := make([]map[string]int, 2)
		var announcers sync.WaitGroup
		for a := range 2 {
			done[a] = map[string]int{}
			announcers.Add(1)
			go func() {
				defer announcers.Done()
				cycle := func(hash bittorrent.InfoHash, id string, base int, unregister bool) error {
					if unregister {
						if err := f.store.UnregisterTorrent(ctx, hash); err != nil {
							return err
						}
					}
					if err := f.store.RegisterTorrent(ctx, hash, id); err != nil {
						return err
					}
					for u, user := range users {
						if err := f.announce(hash, u+1, pkPrefix+user, 0, uint64(base), bittorrent.EventStarted); err != nil {
							return fmt.Errorf("%s started: %w", id, err)
						}
						if err := f.announce(hash, u+1, pkPrefix+user, 0, uint64(base+1), bittorrent.EventStopped); err != nil {
							return fmt.Errorf("%s stopped: %w", id, err)
						}
					}
					return nil
				}
				for c := range cycles {
					// Unregistered for a moment (well within the window)
					// while the cleaners run: the stamp protects them.
					for i := a; i < live; i += 2 {
						if err := f.store.UnregisterTorrent(ctx, name("live", i)); err != nil {
							bg.report(err)
							return
						}
					}
					time.Sleep(2 * time.Millisecond)
					for i := a; i < live; i += 2 {
						id := "live" + strconv.Itoa(i)
						if err := cycle(name("live", i), id, 10*c, false); err != nil {
							bg.report(err)
							return
						}
						done[a][id]++
					}
					// One revived torrent per cycle comes back while cleanup runs.
					if i := 2*c + a; i < revived {
						// Registered again as it is, stale: cleanup may take it
						// just before, never half of it.
						if err := cycle(name("revived", i), "revived"+strconv.Itoa(i), 0, false); err != nil {
							bg.report(err)
							return
						}
					}
					if a == 0 && c%4 == 3 {
						// A window passes: only what is unregistered for
						// longer is fair game, and nothing live is.
						f.clock.Advance(window / 4)
					}
				}
			}()
		}
		announcers.Wait()
		bg.halt(t)
		t.Logf("%d full passes and %d ticks ran beside the traffic", bg.passes.Load(), bg.ticks.Load())

		// Zero live records removed: every cycle counted on every record.
		for a := range done {
			for id, n := range done[a] {
				i, _ := strconv.Atoi(id[len("live"):])
				hash := name("live", i)
				for _, user := range users {
					up := b.Client.HGet(ctx, btstore.UserTorrentKey(hash, user), "uploaded").Val()
					require.Equal(t, strconv.Itoa(n), up, "%s of %s lost cycles", user, id)
				}
			}
		}
		for i := range live {
			require.Len(t, scoreKeys(f, name("live", i)), 5, "live%d's scoring keys", i)
		}
		for _, user := range users {
			complete := f.user(user).Complete
			for i := range live {
				require.Contains(t, complete, "live"+strconv.Itoa(i), user)
			}
			for i := range revived {
				require.Contains(t, complete, "revived"+strconv.Itoa(i), user)
			}
			require.Contains(t, complete, "idle", user)
		}
		require.Equal(t, "idle", b.Client.HGet(ctx, btstore.TorrentKey(idle), "id").Val())
		require.ElementsMatch(t, users, b.Client.SMembers(ctx, btstore.TorrentUsersKey(idle)).Val())
		// Revived torrents are whole: registered, and their users set
		// names exactly the user records they have.
		for i := range revived {
			hash := name("revived", i)
			require.Equal(t, "revived"+strconv.Itoa(i), b.Client.HGet(ctx, btstore.TorrentKey(hash), "id").Val())
			members := b.Client.SMembers(ctx, btstore.TorrentUsersKey(hash)).Val()
			require.ElementsMatch(t, users, members)
			for _, user := range users {
				require.Equal(t, int64(1), b.Client.Exists(ctx, btstore.UserTorrentKey(hash, user)).Val())
			}
		}
		// Every orphan gone within one window and two passes.
		f.pass()
		f.pass()
		for i := range orphaned {
			require.Empty(t, f.torrentKeys(name("orphan", i)))
		}
		for _, user := range users {
			for _, id := range f.user(user).Complete {
				require.NotContains(t, id, "orphan")
			}
		}
	})
}

// writeScoreTombstone writes, as of now, a score tombstone of hash in
// unrank mode (no TTL), its history, a tracker list with its stamp and the
// tracker's seen set: five keys.
func writeScoreTombstone(t *testing.T, f *fixture, hash bittorrent.InfoHash) {
	t.Helper()
	ctx := context.Background()
	now := f.clock.Now().UnixMilli()
	pipe := f.b.Client.TxPipeline()
	pipe.HSet(ctx, btstore.ScoreKey(hash), "state", "removed", "score", "0.004", "removed_at", now, "applied_at", now, "rev", now)
	pipe.LPush(ctx, btstore.ScoreHistoryKey(hash), `{"round":8,"removed":true}`)
	pipe.HSet(ctx, btstore.ScoreTrackersKey(hash), externalURL, 50)
	pipe.Set(ctx, btstore.ScoreTrackersAtKey(hash), now, 0)
	pipe.ZAdd(ctx, btstore.SourceSeenKey(hash, btstore.SourceID(externalURL)), redisZ(now, "ip"))
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}
