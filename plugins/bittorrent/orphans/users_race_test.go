package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// TestUserPurgeRacesRemovalsReAddsAndAnnounces runs cleanup over and over
// (full passes in one goroutine, another frontend's bounded ticks in
// another) while users go through cycles: added (a new passkey each
// time), announcing on every torrent, removed, and then either
//   - added again at once (a passkey rotation),
//   - added again a window later, racing the purge that may have begun,
//   - or left until the purge took them.
//
// Checked throughout: a user's records announced since it was added are
// all there while it is live, two more cleanup passes later (no live
// record removed); a user added again finds all of its records or none
// (never half); a user left alone is purged entirely within the bound.
//
// A few seconds by default; HOARD_TEST_LONG=1 (make test-long) runs many
// more cycles.
func TestUserPurgeRacesRemovalsReAddsAndAnnounces(t *testing.T) {
	users, cycles, torrents := 4, 6, 3
	if os.Getenv("HOARD_TEST_LONG") != "" {
		users, cycles, torrents = 8, 40, 4
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		hashes := make([]bittorrent.InfoHash, torrents)
		for i := range hashes {
			hashes[i] = infoHash("shared" + strconv.Itoa(i))
			require.NoError(t, f.store.RegisterTorrent(ctx, hashes[i], "shared"+strconv.Itoa(i)))
		}
		bg := runCleaners(f)
		report := bg.report
		passes := &bg.passes
		// waitPasses waits for n more full passes (bounded).
		waitPasses := func(n int64) error {
			target := passes.Load() + n
			for deadline := time.Now().Add(30 * time.Second); passes.Load() < target; {
				if time.Now().After(deadline) {
					return fmt.Errorf("no cleanup pass for 30 s")
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		}
		// records counts the user's records on the torrents.
		records := func(user string) int {
			n := 0
			for _, hash := range hashes {
				n += int(b.Client.Exists(ctx, btstore.UserTorrentKey(hash, user)).Val())
			}
			return n
		}
		var purged, rotated, readded, wholeOnReturn, freshOnReturn atomic.Int64
		var workers sync.WaitGroup
		for u := range users {
			workers.Add(1)
			go func() {
				defer workers.Done()
				user := "racer" + strconv.Itoa(u)
				for c := range cycles {
					passkey := fmt.Sprintf(pkPrefix+"%dx%d", u, c)
					if err := f.store.AddUser(ctx, passkey, user); err != nil {
						report(err)
						return
					}
					// All of its records or none: never half.
					if n := records(user); n != 0 && n != len(hashes) {
						report(fmt.Errorf("%s came back with %d of %d records", user, n, len(hashes)))
						return
					} else if c > 0 && n == 0 {
						freshOnReturn.Add(1)
					} else if c > 0 {
						wholeOnReturn.Add(1)
					}
					for i, hash := range hashes {
						peer := 1000*u + i
						if err := f.announce(hash, peer, passkey, 0, uint64(c), bittorrent.EventStarted); err != nil {
							report(fmt.Errorf("%s started: %w", user, err))
							return
						}
						if err := f.announce(hash, peer, passkey, 0, uint64(c+1), bittorrent.EventStopped); err != nil {
							report(fmt.Errorf("%s stopped: %w", user, err))
							return
						}
					}
					if err := f.store.Flush(ctx); err != nil {
						report(err)
						return
					}
					if err := waitPasses(2); err != nil {
						report(err)
						return
					}
					// Live: every record and every set entry is there.
					if n := records(user); n != len(hashes) {
						report(fmt.Errorf("%s is live and lost %d of its %d records", user, len(hashes)-n, len(hashes)))
						return
					}
					if n := b.Client.HLen(ctx, btstore.UserTorrentsKey(user)).Val(); n != int64(len(hashes)) {
						report(fmt.Errorf("%s is live and its sets name %d of %d torrents", user, n, len(hashes)))
						return
					}
					if err := f.store.RemoveUser(ctx, passkey); err != nil {
						report(err)
						return
					}
					switch c % 3 {
					case 0: // a rotation: added again at once
						rotated.Add(1)
					case 1: // added again a window later, racing the purge
						f.clock.Advance(window + time.Second)
						// a moment for the cleaners to begin the purge, or not
						time.Sleep(time.Duration(u+c) % 4 * time.Millisecond)
						readded.Add(1)
					case 2: // left alone until purged
						f.clock.Advance(window + time.Second)
						deadline := time.Now().Add(30 * time.Second)
						for b.Client.Exists(ctx, btstore.UserGoneKey(user)).Val() == 1 || records(user) > 0 {
							if time.Now().After(deadline) {
								report(fmt.Errorf("%s was not purged within 30 s: %s", user, f.userState(user, hashes)))
								return
							}
							time.Sleep(time.Millisecond)
						}
						if keys := f.userKeys(user); len(keys) > 0 {
							report(fmt.Errorf("%s purged, but %v are left", user, keys))
							return
						}
						purged.Add(1)
					}
				}
			}()
		}
		workers.Wait()
		bg.halt(t)
		t.Logf("%d passes and %d ticks; %d purged, %d rotations, %d re-added a window later (%d came back whole, %d afresh)",
			passes.Load(), bg.ticks.Load(), purged.Load(), rotated.Load(), readded.Load(), wholeOnReturn.Load(), freshOnReturn.Load())
		require.Positive(t, purged.Load())
		require.Positive(t, rotated.Load())

		// Every user removed now: all gone within one window and two
		// passes (the first lists nothing new and starts the purges).
		for u := range users {
			require.NoError(t, f.store.RemoveUser(ctx, fmt.Sprintf(pkPrefix+"%dx%d", u, cycles-1)))
		}
		f.clock.Advance(window + time.Second)
		f.pass()
		f.pass()
		for u := range users {
			f.requireUserGone("racer"+strconv.Itoa(u), hashes...)
		}
	})
}

// userState describes where a user's purge stands, for a failure.
func (f *fixture) userState(user string, hashes []bittorrent.InfoHash) string {
	ctx := context.Background()
	c := f.b.Client
	var records []string
	for _, hash := range hashes {
		records = append(records, fmt.Sprint(c.HGetAll(ctx, btstore.UserTorrentKey(hash, user)).Val()))
	}
	return fmt.Sprintf("now %d; gone %v; listing %v; index %v; passes %v; keys %v; torrents %v; records %v",
		f.clock.Now().UnixMilli(), c.HGetAll(ctx, btstore.UserGoneKey(user)).Val(), c.HGetAll(ctx, btstore.UserPasskeysKey(user)).Val(),
		c.ZScore(ctx, btstore.RemovedUsersKey, user).Val(), c.HGetAll(ctx, btstore.OrphanPassesKey).Val(), f.userKeys(user),
		c.HGetAll(ctx, btstore.UserTorrentsKey(user)).Val(), records)
}
