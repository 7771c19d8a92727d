package scoring_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
)

// TestEachBranchOfThePolicy: no peers ×0.5, fewer than max ×0.8, a full
// swarm with at least 5% of max new ×1.2, a full swarm with too few new
// ×0.8; "at least" is >= at both thresholds.
func TestEachBranchOfThePolicy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, `{"max_peers":40}`)
		for _, c := range []struct {
			name   string
			result scoring.Result
			want   float64
		}{
			{"no peers", scoring.Result{Peers: 0}, 0.5},
			{"some peers, fewer than max", scoring.Result{Peers: 39, New: 39}, 0.8},
			{"max peers, 5% of max new exactly", scoring.Result{Peers: 40, New: 2}, 1.2},
			{"more than max, many new", scoring.Result{Peers: 200, New: 150}, 1.2},
			{"max peers, under 5% new", scoring.Result{Peers: 40, New: 1}, 0.8},
		} {
			hash := f.tracked(c.name)
			require.Equal(t, scoring.Kept, f.apply(hash, 1, c.result), c.name)
			rec := f.record(hash)
			require.InDelta(t, c.want, rec.Score, 1e-12, c.name)
			require.Equal(t, int64(1), rec.Round, c.name)
			require.True(t, rec.Indexed, c.name)
			require.InDelta(t, c.want, rec.IndexedAt, 1e-12, "%s: the index shard shows the new score", c.name)
		}
	})
}

// TestExactlyTheMinimumStays: a score equal to min_score stays; below it
// the torrent leaves scoring.
func TestExactlyTheMinimumStays(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, `{"no_peers":0.005}`)
		hash := f.tracked("edge")
		require.Equal(t, scoring.Kept, f.apply(hash, 1, scoring.Result{}))
		rec := f.record(hash)
		require.Equal(t, 0.005, rec.Score, "1.0 × 0.005 is exactly the minimum")
		require.Equal(t, "active", rec.State)
		require.True(t, rec.Indexed)

		require.Equal(t, scoring.Removed, f.apply(hash, 2, scoring.Result{}))
		rec = f.record(hash)
		require.Equal(t, "removed", rec.State)
		require.False(t, rec.Indexed, "a removed torrent leaves the index")
	})
}

// TestTheEighthRoundWithoutPeersRemoves: 0.5^7 ≈ 0.0078 stays, 0.5^8 ≈
// 0.0039 is below 0.005 (the seed says the ninth).
func TestTheEighthRoundWithoutPeersRemoves(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		hash := f.tracked("empty swarm")
		for round := int64(1); round <= 7; round++ {
			require.Equal(t, scoring.Kept, f.apply(hash, round, scoring.Result{}), "round %d", round)
		}
		require.InDelta(t, math.Pow(0.5, 7), f.record(hash).Score, 1e-15)
		require.Equal(t, scoring.Removed, f.apply(hash, 8, scoring.Result{}))
		require.Equal(t, "removed", f.record(hash).State)
	})
}

// TestTheTwentyFourthRoundAtPointEightRemoves: 0.8^23 ≈ 0.0059 stays,
// 0.8^24 ≈ 0.0047 goes (the seed says the twenty-fifth).
func TestTheTwentyFourthRoundAtPointEightRemoves(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		hash := f.tracked("small swarm")
		for round := int64(1); round <= 23; round++ {
			require.Equal(t, scoring.Kept, f.apply(hash, round, scoring.Result{Peers: 3, New: 3}), "round %d", round)
		}
		require.InDelta(t, math.Pow(0.8, 23), f.record(hash).Score, 1e-15)
		require.Equal(t, scoring.Removed, f.apply(hash, 24, scoring.Result{Peers: 3}))
		require.False(t, f.record(hash).Indexed)
	})
}

// TestTheSameRoundTwiceChangesNothing: a redelivered result, or an older
// round arriving late, leaves the score as the first application left it.
func TestTheSameRoundTwiceChangesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		hash := f.tracked("twice")
		require.Equal(t, scoring.Kept, f.apply(hash, 1, scoring.Result{}))
		require.Equal(t, scoring.NotApplied, f.apply(hash, 1, scoring.Result{}))
		require.Equal(t, 0.5, f.record(hash).Score)
		require.Equal(t, scoring.Kept, f.apply(hash, 2, scoring.Result{Peers: 1, New: 1}))
		require.Equal(t, scoring.NotApplied, f.apply(hash, 1, scoring.Result{}), "an older round arriving late")
		rec := f.record(hash)
		require.InDelta(t, 0.4, rec.Score, 1e-15)
		require.Equal(t, int64(2), rec.Round)
		require.InDelta(t, 0.4, rec.IndexedAt, 1e-15, "the late round did not move the index back")
		require.Equal(t, int64(2), f.scorer.Applied())
	})
}

// TestBadResultsAndItemsChangeNothing: malformed items and impossible
// counts are refused with an error and leave the score alone.
func TestBadResultsAndItemsChangeNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		hash := f.tracked("bad input")
		for _, item := range []string{"score:zz:1", "score:" + strings.Repeat("a", 40), "score:" + strings.Repeat("a", 40) + ":0", "other:x"} {
			_, err := f.scorer.Apply(t.Context(), item, scoring.Result{Max: 50})
			require.Error(t, err, item)
		}
		for _, r := range []scoring.Result{{Peers: -1, Max: 50}, {Peers: 1, New: 2, Max: 50}, {Peers: 1}} {
			_, err := f.scorer.Apply(t.Context(), f.item(hash, 1), r)
			require.Error(t, err, "%+v", r)
		}
		rec := f.record(hash)
		require.Equal(t, 1.0, rec.Score)
		require.Equal(t, int64(0), rec.Round)
	})
}

// TestARemovedTorrentComesBackOnlyWhenSeenAgain: removed, it stays out
// through discovery and later results (btstat's HEAD let a ×0.8 after the
// removal add it back); announced again, it starts at 1.0, its rounds
// going on from where they were so item names stay unique.
func TestARemovedTorrentComesBackOnlyWhenSeenAgain(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, `{"no_peers":0.008}`)
		hash := f.tracked("comeback")
		require.Equal(t, scoring.Kept, f.apply(hash, 1, scoring.Result{}))
		require.Equal(t, scoring.Removed, f.apply(hash, 2, scoring.Result{}), "0.008² is under the minimum")
		require.Equal(t, scoring.NotApplied, f.apply(hash, 3, scoring.Result{Peers: 50, New: 50}), "no result brings it back")
		n, err := f.scorer.Discover(t.Context())
		require.NoError(t, err)
		require.Zero(t, n, "its swarm still has the old peer, but nobody announced since")
		require.Equal(t, "removed", f.record(hash).State)

		f.announce(hash, 1_000_000, 1) // the same peer announces again
		n, err = f.scorer.Discover(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		rec := f.record(hash)
		require.Equal(t, "active", rec.State)
		require.Equal(t, 1.0, rec.Score)
		require.True(t, rec.Indexed)
		require.Equal(t, int64(2), rec.Round, "rounds go on")
		require.Equal(t, scoring.Kept, f.apply(hash, 3, scoring.Result{}))
	})
}

// TestReRegistrationStartsAtOne: in private mode a removal only leaves the
// ranking; registering the torrent again puts it back at 1.0.
func TestReRegistrationStartsAtOne(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, true, `{"no_peers":0.001}`)
		ctx := t.Context()
		hash := infoHash("registered")
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "42"))
		unregistered := infoHash("never registered")
		ok, err := f.scorer.Track(ctx, unregistered)
		require.NoError(t, err)
		require.False(t, ok, "private mode scores registered torrents only")

		n, err := f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "discovery finds the registered torrent")
		require.Equal(t, 1.0, f.record(hash).Score)
		require.Equal(t, scoring.Removed, f.apply(hash, 1, scoring.Result{}))
		n, err = f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		ttl, err := b.Client.PTTL(ctx, btstore.ScoreKey(hash)).Result()
		require.NoError(t, err)
		require.Less(t, ttl, time.Duration(0), "unrank keeps the record (no TTL)")

		f.clock.Advance(time.Second)
		require.NoError(t, f.store.RegisterTorrent(ctx, hash, "42"))
		n, err = f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		rec := f.record(hash)
		require.Equal(t, "active", rec.State)
		require.Equal(t, 1.0, rec.Score)
	})
}

// TestUntrackDropsTheHistory: in open mode removal stops tracking: the
// seen IPs go and the tombstone expires.
func TestUntrackDropsTheHistory(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, `{"few_peers":0.001}`)
		ctx := t.Context()
		hash := f.tracked("untracked")
		require.Equal(t, scoring.Removed, f.apply(hash, 1, scoring.Result{Peers: 1, New: 1}))
		exists, err := b.Client.Exists(ctx, btstore.ScoreSeenKey(hash)).Result()
		require.NoError(t, err)
		require.Zero(t, exists)
		ttl, err := b.Client.PTTL(ctx, btstore.ScoreKey(hash)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl.Hours(), 24.0*29)
	})
}

// TestNewPeersAreThoseNotSeenForThirtyDays: counting only reads; applying
// a round marks the swarm's IPs seen; 30 days later they are new again.
func TestNewPeersAreThoseNotSeenForThirtyDays(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		hash := f.tracked("counting") // one peer
		f.announce(hash, 1, 3)
		r, err := f.scorer.Count(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, scoring.Result{Peers: 4, New: 4, Max: 50}, r)
		again, err := f.scorer.Count(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, r, again, "counting writes nothing")

		require.Equal(t, scoring.Kept, f.apply(hash, 1, r))
		f.announce(hash, 10, 1)
		r, err = f.scorer.Count(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, scoring.Result{Peers: 5, New: 1, Max: 50}, r, "only the newcomer is new")

		f.clock.Advance(30*24*time.Hour + time.Millisecond)
		r, err = f.scorer.Count(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, int64(5), r.New, "30 days later every IP is new again")
	})
}

// Counting only reads (score_count.lua declares no-writes), so a Redis
// over its maxmemory still answers it, while the round's write is refused
// with OOM and changes nothing.
func TestCountingAnswersOverMaxmemory(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		hash := f.tracked("full") // one peer
		f.announce(hash, 1, 2)
		want, err := f.scorer.Count(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, int64(3), want.Peers)
		before := f.record(hash)

		redistest.OverMaxmemory(t, b.Client)
		r, err := f.scorer.Count(ctx, hash)
		require.NoError(t, err, "counting answers over maxmemory")
		require.Equal(t, want, r)
		_, err = f.scorer.Apply(ctx, f.item(hash, 1), r)
		require.ErrorContains(t, err, "OOM", "the control: a writing script is refused")
		require.Equal(t, before, f.record(hash), "the refused round changed nothing")
	})
}

// TestRoundQueuesEveryScoredTorrentOnce: one item per indexed torrent,
// named by its next round, with its score; the index spreads over shards.
func TestRoundQueuesEveryScoredTorrentOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		want := map[string]float64{}
		for i := range 40 {
			hash := infoHash(string(rune('a' + i)))
			f.announce(hash, i, 1)
		}
		n, err := f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Equal(t, 40, n, "every swarm with peers is found")
		n, err = f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "indexed ones are skipped")
		first := infoHash("a")
		require.Equal(t, scoring.Kept, f.apply(first, 1, scoring.Result{}))
		for i := range 40 {
			hash := infoHash(string(rune('a' + i)))
			if hash == first {
				want[f.item(hash, 2)] = 0.5
			} else {
				want[f.item(hash, 1)] = 1.0
			}
		}
		got := map[string]float64{}
		total, err := f.scorer.Round(ctx, epoch, func(items []plugins.ScoredItem) error {
			for _, it := range items {
				got[it.Item] = it.Score
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 40, total)
		require.Equal(t, want, got)
		count, err := f.scorer.Scored(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(40), count)
		shards := 0
		for shard := range btstore.ScoreIndexShards {
			n, err := b.Client.ZCard(ctx, btstore.ScoreIndexKey(shard)).Result()
			require.NoError(t, err)
			if n > 0 {
				shards++
			}
		}
		require.Greater(t, shards, 8, "40 torrents spread over the shards")
		processed, err := f.scorer.ProcessedLastHour(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), processed)
	})
}

// TestACycleRunAgainQueuesTheSameItems: the host runs a cycle again when
// the plugin died under it (the run stays due, with its scheduled time).
// By then some of the cycle's items were done and applied; the run again
// must not queue them a second round (under load the kill test counted
// 3,053 dones for 3,000 items), and must queue the others under the same
// names, so the queue skips or rescores them. The next cycle scores every
// torrent again.
func TestACycleRunAgainQueuesTheSameItems(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		const torrents = 40
		hashes := make([]bittorrent.InfoHash, torrents)
		for i := range hashes {
			hashes[i] = infoHash(fmt.Sprintf("cycle-%d", i))
			f.announce(hashes[i], i, 1)
		}
		n, err := f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Equal(t, torrents, n)
		round := func(cycle time.Time) map[string]float64 {
			got := map[string]float64{}
			total, err := f.scorer.Round(ctx, cycle, func(items []plugins.ScoredItem) error {
				for _, it := range items {
					require.NotContains(t, got, it.Item, "listed once")
					got[it.Item] = it.Score
				}
				return nil
			})
			require.NoError(t, err)
			require.Len(t, got, total)
			return got
		}
		first := round(epoch)
		want := map[string]float64{}
		for _, hash := range hashes {
			want[f.item(hash, 1)] = 1.0
		}
		require.Equal(t, want, first)

		// Half the items are done and applied before the run dies.
		applied := hashes[:torrents/2]
		for _, hash := range applied {
			require.Equal(t, scoring.Kept, f.apply(hash, 1, scoring.Result{}))
		}
		again := round(epoch)
		want = map[string]float64{}
		for _, hash := range hashes[torrents/2:] {
			want[f.item(hash, 1)] = 1.0
		}
		require.Equal(t, want, again, "the same cycle: the applied ones are not queued again, the others under the same names")

		next := round(epoch.Add(24 * time.Hour))
		want = map[string]float64{}
		for _, hash := range applied {
			want[f.item(hash, 2)] = 0.5
		}
		for _, hash := range hashes[torrents/2:] {
			want[f.item(hash, 1)] = 1.0 // still waiting: the queue rescores it
		}
		require.Equal(t, want, next, "the next cycle scores every torrent")
	})
}

// TestACrashBetweenTheTwoStepsIsSettled: the index entry is a projection
// of the score record. Lost (a crash after the score was written), the
// next cycle's discovery puts it back; wrong, the redelivered result,
// though not applied again, sets it to the record's state.
func TestACrashBetweenTheTwoStepsIsSettled(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		ctx := t.Context()
		hash := f.tracked("crash")
		require.Equal(t, scoring.Kept, f.apply(hash, 1, scoring.Result{}))
		member := f.record(hash)
		require.True(t, member.Indexed)
		shard := -1
		for i := range btstore.ScoreIndexShards {
			if _, err := b.Client.ZScore(ctx, btstore.ScoreIndexKey(i), hexOf(hash)).Result(); err == nil {
				shard = i
			}
		}
		require.GreaterOrEqual(t, shard, 0)

		require.NoError(t, b.Client.ZRem(ctx, btstore.ScoreIndexKey(shard), hexOf(hash)).Err())
		n, err := f.scorer.Discover(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		rec := f.record(hash)
		require.Equal(t, 0.5, rec.IndexedAt, "re-indexed at its score, not reset to 1.0")
		require.Equal(t, 0.5, rec.Score)

		require.NoError(t, b.Client.ZAdd(ctx, btstore.ScoreIndexKey(shard), redis.Z{Score: 1, Member: hexOf(hash)}).Err())
		require.Equal(t, scoring.NotApplied, f.apply(hash, 1, scoring.Result{}))
		rec = f.record(hash)
		require.Equal(t, 0.5, rec.IndexedAt, "the redelivery settled the entry")
		require.Equal(t, 0.5, rec.Score)
	})
}

func hexOf(hash [20]byte) string { return hex.EncodeToString(hash[:]) }
