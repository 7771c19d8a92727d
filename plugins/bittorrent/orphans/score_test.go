package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// externalURL is an external tracker registered for scored torrents; no
// test announces to it (results are applied as a worker would report them).
const externalURL = "http://tracker.example.org:1/announce" // a name, never dialled: a literal loopback is refused at set time

func newScorer(f *fixture, untrack bool) *scoring.Scorer {
	return scoring.New(f.b.Client, scoring.Policy{MinScore: 0.005, NewWindow: time.Hour, Untrack: untrack,
		TombstoneTTL: 48 * time.Hour, MaxPeers: 50, NoPeers: 0.5, FewPeers: 0.8, Growing: 1.2, Stale: 0.8,
		NewFraction: 0.05, TrackerGrace: -1, History: 10}, f.clock, quietLogger)
}

// scoreToRemoval tracks hash with an external tracker, applies rounds of
// no peers (the tracker giving one IP each round, staged as a worker
// stages it) until scoring removes the torrent, then stages IPs for a
// round that never comes: every scoring key of the torrent exists.
func scoreToRemoval(t *testing.T, f *fixture, scorer *scoring.Scorer, hash bittorrent.InfoHash) {
	t.Helper()
	ctx := context.Background()
	_, _, err := scorer.SetTrackers(ctx, hash, []scoring.Tracker{{URL: externalURL}})
	require.NoError(t, err)
	ok, err := scorer.Track(ctx, hash)
	require.NoError(t, err)
	require.True(t, ok)
	id := btstore.SourceID(externalURL)
	for n := 1; ; n++ {
		require.Less(t, n, 50, "scoring never removed the torrent")
		item, err := scorer.NextItem(ctx, hash)
		require.NoError(t, err)
		_, round, err := scoring.ParseItem(item)
		require.NoError(t, err)
		stageIP(t, f, hash, id, round)
		f.clock.Advance(time.Minute)
		out, err := scorer.Apply(ctx, item,
			scoring.Result{Max: 50, Trackers: []scoring.TrackerResult{{URL: externalURL, Max: 50}}})
		require.NoError(t, err)
		if out == scoring.Removed {
			stageIP(t, f, hash, id, round+1)
			return
		}
	}
}

func stageIP(t *testing.T, f *fixture, hash bittorrent.InfoHash, id string, round int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.b.Client.ZAdd(ctx, btstore.ScorePendingKey(hash, id), redis.Z{Score: float64(round), Member: "\x0a\x00\x00\x01"}).Err())
	require.NoError(t, f.b.Client.PExpire(ctx, btstore.ScorePendingKey(hash, id), 24*time.Hour).Err())
}

// scoreKeys lists the torrent's keys of scoring: ":score" and below.
func scoreKeys(f *fixture, hash bittorrent.InfoHash) []string {
	var out []string
	for _, key := range f.torrentKeys(hash) {
		if strings.HasPrefix(key, btstore.ScoreKey(hash)) {
			out = append(out, key)
		}
	}
	return out
}

// allScoreKinds checks that every kind of scoring key is there: the
// record, history, trackers and their stamp, the tracker's seen set and
// pending IPs.
func allScoreKinds(t *testing.T, f *fixture, hash bittorrent.InfoHash) {
	t.Helper()
	id := btstore.SourceID(externalURL)
	require.ElementsMatch(t, []string{btstore.ScoreKey(hash), btstore.ScoreHistoryKey(hash), btstore.ScoreTrackersKey(hash),
		btstore.ScoreTrackersAtKey(hash), btstore.SourceSeenKey(hash, id), btstore.ScorePendingKey(hash, id)}, scoreKeys(f, hash))
}

// indexed says whether the torrent has a revision or an entry in its
// score index shard.
func indexed(f *fixture, hash bittorrent.InfoHash) bool {
	ctx := context.Background()
	shard := int(hash[0]) % btstore.ScoreIndexShards
	hexHash := btstore.HexInfoHash(hash)
	return f.b.Client.HExists(ctx, btstore.ScoreIndexRevsKey(shard), hexHash).Val() ||
		f.b.Client.ZScore(ctx, btstore.ScoreIndexKey(shard), hexHash).Err() == nil
}

// TestScoreKeysOfGoneTorrentPrivate: in private mode a torrent removed
// from scoring keeps its tombstone (unrank); unregistered, after the
// window, every scoring key of it goes, and its index revision in the
// same two passes; an active score record of a gone torrent stays. The
// page size varies so that the torrent's keys come in one page or many
// (the finishing call, and later pages with the record already gone).
func TestScoreKeysOfGoneTorrentPrivate(t *testing.T) {
	for _, scan := range []int{100, 1} {
		t.Run("scan="+strconv.Itoa(scan), func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
				f := newFixture(t, b, true)
				f.cleaner = f.newCleaner(orphans.Policy{Window: window, ScanCount: scan, MaxKeysPerTick: 100_000})
				ctx := context.Background()
				scorer := newScorer(f, false)
				gone := privateTorrent(t, f, "scored-gone", "t1")
				scoreToRemoval(t, f, scorer, gone)
				allScoreKinds(t, f, gone)
				lastItem, err := scorer.NextItem(ctx, gone) // the name after its last round
				require.NoError(t, err)
				require.Equal(t, "removed", b.Client.HGet(ctx, btstore.ScoreKey(gone), "state").Val())
				require.Equal(t, time.Duration(-1), b.Client.PTTL(ctx, btstore.ScoreKey(gone)).Val(), "unrank: a tombstone without TTL")
				require.True(t, indexed(f, gone), "its revision stays in the shard")

				active := privateTorrent(t, f, "scored-active", "t2")
				ok, err := scorer.Track(ctx, active)
				require.NoError(t, err)
				require.True(t, ok)
				item, err := scorer.NextItem(ctx, active)
				require.NoError(t, err)
				_, err = scorer.Apply(ctx, item, scoring.Result{Max: 50})
				require.NoError(t, err)

				require.NoError(t, f.store.UnregisterTorrent(ctx, gone))
				require.NoError(t, f.store.UnregisterTorrent(ctx, active))
				f.clock.Advance(window)
				r := f.pass()
				require.Zero(t, r.Removed(), "exactly the window: still protected, %+v", r)
				allScoreKinds(t, f, gone)

				f.clock.Advance(time.Millisecond)
				r = f.pass()
				r.ScoreKeys += f.pass().ScoreKeys
				require.Empty(t, f.torrentKeys(gone), "nothing under the gone torrent's tag")
				require.Equal(t, 6, r.ScoreKeys, "record, history, trackers, their stamp, seen and pending")
				require.False(t, indexed(f, gone), "index entry and revision went within the two passes")

				// The active record is scoring's: it decays it to removal.
				require.ElementsMatch(t, []string{btstore.ScoreHistoryKey(active), btstore.ScoreKey(active)}, scoreKeys(f, active))
				require.Equal(t, "active", b.Client.HGet(ctx, btstore.ScoreKey(active), "state").Val())
				require.NotContains(t, f.torrentKeys(active), btstore.TorrentKey(active), "the torrent itself went")
				require.True(t, indexed(f, active))

				// Back, it is scored afresh under item names its old
				// record never used: the queue skips a name among its
				// recent completions, so a repeated one would never run.
				f.clock.Advance(time.Second)
				require.NoError(t, f.store.Register(ctx, gone, swarm.Registration{ID: "t1"}))
				ok, err = scorer.Track(ctx, gone)
				require.NoError(t, err)
				require.True(t, ok)
				first, err := scorer.NextItem(ctx, gone)
				require.NoError(t, err)
				_, oldRound, _ := scoring.ParseItem(lastItem)
				_, newRound, _ := scoring.ParseItem(first)
				require.Greater(t, newRound, oldRound, "%s after %s", first, lastItem)
				rec, err := scorer.Record(ctx, gone)
				require.NoError(t, err)
				require.Zero(t, rec.Round, "its rounds count from 1 again in the views")
			})
		})
	}
}

// TestScoreKeysOfGoneTorrentOpen: in open mode the tombstone has a TTL
// (48h here, longer than the window); once the torrent's record is gone
// (its retention expired), its scoring keys go after the window by their
// own stamps, not waiting for that TTL.
func TestScoreKeysOfGoneTorrentOpen(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false)
		ctx := context.Background()
		scorer := newScorer(f, true)
		hash := infoHash("open-scored")
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStarted))
		require.NoError(t, f.announce(hash, 1, "", 0, 0, bittorrent.EventStopped))
		scoreToRemoval(t, f, scorer, hash)
		allScoreKinds(t, f, hash)
		require.Greater(t, b.Client.PTTL(ctx, btstore.ScoreKey(hash)).Val(), window, "the tombstone's TTL outlasts the window")

		// The record's retention expired; the tombstone is recent.
		require.NoError(t, b.Client.Del(ctx, btstore.TorrentKey(hash)).Err())
		f.pass()
		allScoreKinds(t, f, hash)

		f.clock.Advance(window + time.Millisecond)
		r := f.pass()
		r.ScoreKeys += f.pass().ScoreKeys
		require.Equal(t, 6, r.ScoreKeys)
		require.Empty(t, f.torrentKeys(hash))
		require.False(t, indexed(f, hash))
	})
}

// TestScoreKeysOfReturningTorrentAreKept: a torrent removed from scoring
// and unregistered, registered and announced again after the window
// (just before the pass), keeps every scoring key; so does a tracker
// list set for a torrent not registered yet, for the window.
func TestScoreKeysOfReturningTorrentAreKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true)
		ctx := context.Background()
		scorer := newScorer(f, false)
		hash := privateTorrent(t, f, "returning", "t1")
		scoreToRemoval(t, f, scorer, hash)
		require.NoError(t, f.store.UnregisterTorrent(ctx, hash))
		f.clock.Advance(window + time.Millisecond)

		require.NoError(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1"}))
		require.NoError(t, f.announce(hash, 2, pkPrefix+"bob", 100, 0, bittorrent.EventStarted))
		require.NoError(t, f.announce(hash, 2, pkPrefix+"bob", 100, 0, bittorrent.EventStopped))
		before := scoreKeys(f, hash)
		r := f.pass()
		require.Zero(t, r.ScoreKeys+r.Torrents, "%+v", r)
		require.Equal(t, before, scoreKeys(f, hash))
		allScoreKinds(t, f, hash)
		require.Equal(t, "t1", b.Client.HGet(ctx, btstore.TorrentKey(hash), "id").Val())

		// Trackers set ahead of a registration are kept for the window.
		early := infoHash("not-yet")
		_, _, err := scorer.SetTrackers(ctx, early, []scoring.Tracker{{URL: externalURL}})
		require.NoError(t, err)
		require.Zero(t, f.pass().ScoreKeys)
		require.ElementsMatch(t, []string{btstore.ScoreTrackersKey(early), btstore.ScoreTrackersAtKey(early)}, f.torrentKeys(early))
		f.clock.Advance(window + time.Millisecond)
		require.Equal(t, 2, f.pass().ScoreKeys, "never registered: the list and its stamp go")
		require.Empty(t, f.torrentKeys(early))
	})
}
