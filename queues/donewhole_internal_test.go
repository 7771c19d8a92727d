package queues

import (
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// wholeDone runs done_plain_whole.lua as the engine runs it for a done of
// these items by downloader.
func (pb plainBundle) wholeDone(t *testing.T, script *luascript.Script, downloader string, items ...string) any {
	t.Helper()
	args := []any{downloader}
	for _, item := range items {
		args = append(args, item)
	}
	reply, err := pb.a.runScript(pb.ctx, "test", script, plainKeys(pb.a.warriorKeys.get(pb.slug).donePlain, len(items)), args...)
	require.NoError(t, err)
	return reply
}

// doneState is everything a plain done reads or writes of a project, by
// content (not key name), so two projects' can be compared.
func (pb plainBundle) doneState(t *testing.T) map[string]any {
	t.Helper()
	members := func(key string) []string {
		if pb.rdb.Type(pb.ctx, key).Val() != "set" {
			return []string{pb.rdb.Type(pb.ctx, key).Val()}
		}
		m := pb.rdb.SMembers(pb.ctx, key).Val()
		sort.Strings(m)
		return m
	}
	return map[string]any{
		"claims":          pb.rdb.HGetAll(pb.ctx, ClaimsKey(pb.slug)).Val(),
		"done":            members(DoneKey(pb.slug)),
		"deadlines":       pb.rdb.ZRangeWithScores(pb.ctx, DeadlinesKey(pb.slug), 0, -1).Val(),
		"batches":         pb.rdb.HGetAll(pb.ctx, BatchesKey(pb.slug)).Val(),
		"batch_deadlines": pb.rdb.ZRangeWithScores(pb.ctx, BatchDeadlinesKey(pb.slug), 0, -1).Val(),
		"todo":            pb.rdb.LRange(pb.ctx, QueueKey(pb.slug, QueueTodo), 0, -1).Val(),
		"queued":          members(QueuedKey(pb.slug)),
	}
}

// TestWholeBatchDoneTakesTheBatchWhole: a done naming exactly the items of
// one claim batch, in their order, by its claimant, is answered by
// done_plain_whole.lua's own step (a string, which done_plain.lua answers
// only for one item) and leaves what done_plain.lua leaves: the items
// done, no record, no batch. Through the engine, the same done counts
// every item new with its claim-to-done time.
func TestWholeBatchDoneTakesTheBatchWhole(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "whole")
		_, err := pb.a.UpdateProject(pb.ctx, pb.slug, SettingsPatch{LogLength: ptrTo(7)})
		require.NoError(t, err)
		pb.enqueue(t, pb.a, names(12)...)
		first, err := pb.claim(pb.a, "alice", 6)
		require.NoError(t, err)
		claimedAt := pb.clock.Now().UnixMilli()
		pb.clock.Advance(1500 * time.Millisecond)
		second, err := pb.claim(pb.a, "alice", 4)
		require.NoError(t, err)
		require.Len(t, pb.rdb.ZRange(pb.ctx, BatchDeadlinesKey(pb.slug), 0, -1).Val(), 2, "two claim batches")

		reply := pb.wholeDone(t, donePlainWholeScript, "alice", first...)
		require.Equal(t, strconv.FormatInt(claimedAt, 10)+" 7", reply, "the whole-batch step answered")
		state := pb.doneState(t)
		require.Equal(t, first, state["done"])
		require.Len(t, state["claims"], 4, "only the second batch's records are left")
		require.Equal(t, map[string]string{"seq": "2", "out": "4", "i2": pb.rdb.HGet(pb.ctx, BatchesKey(pb.slug), "i2").Val(), "n2": "4"},
			state["batches"], "the first batch is gone, its items no longer counted out")
		require.Equal(t, []redis.Z{{Score: float64(pb.clock.Now().Add(DefaultReclaimTTL).UnixMilli()), Member: "2"}}, state["batch_deadlines"])

		// Through the engine: the second batch, new, its time counted.
		pb.clock.Advance(2 * time.Second)
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: second})
		require.NoError(t, err)
		require.Equal(t, DoneResult{New: 4}, res)
		require.NoError(t, pb.a.FlushCounters(pb.ctx))
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 4, stats.Counters["items_done"], "the engine counted its own done, not the script's above")
		require.EqualValues(t, 4, stats.Counters["rtt_count"])
		require.EqualValues(t, 4*2000, stats.Counters["rtt_ms_sum"])
		counts, err := pb.a.Counts(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.Equal(t, Counts{Todo: 2, Done: 10}, counts)
		require.Equal(t, map[string]string{"seq": "2", "out": "0"}, pb.rdb.HGetAll(pb.ctx, BatchesKey(pb.slug)).Val())
		require.Zero(t, pb.rdb.HLen(pb.ctx, ClaimsKey(pb.slug)).Val())
		_, _, done, _ := pb.script()
		require.False(t, done, "done.lua did not run")
		require.True(t, pb.ran(t, donePlainWholeScript), "done_plain_whole.lua ran")
	})
}

// names are n item names, i0, i1, ...
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("i", i)
	}
	return out
}

// TestWholeBatchDoneRunsDonePlainOtherwise: every done that is not exactly
// one whole batch of the reporter's is answered by done_plain.lua's text
// in done_plain_whole.lua: its reply and every key it reads or writes are
// what done_plain.lua alone gives for the same project state (two
// projects set up alike, one done by each script).
func TestWholeBatchDoneRunsDonePlainOtherwise(t *testing.T) {
	// Each case sets a project up (alice claims i0-i5 as one batch, 12
	// items queued) and names the done.
	cases := []struct {
		name  string
		setup func(t *testing.T, pb plainBundle)
		by    string
		items []string
	}{
		{name: "partial batch", by: "alice", items: names(5)},
		{name: "other order", by: "alice", items: []string{"i1", "i0", "i2", "i3", "i4", "i5"}},
		{name: "other reporter", by: "bob", items: names(6)},
		{name: "batch and one more out", by: "alice", items: append(names(6), "i6"), setup: func(t *testing.T, pb plainBundle) {
			got, err := pb.claim(pb.a, "alice", 1)
			require.NoError(t, err)
			require.Equal(t, []string{"i6"}, got)
		}},
		{name: "batch and one never handed out", by: "alice", items: append(names(6), "i11")},
		{name: "two batches", by: "alice", items: names(10), setup: func(t *testing.T, pb plainBundle) {
			got, err := pb.claim(pb.a, "alice", 4)
			require.NoError(t, err)
			require.Equal(t, []string{"i6", "i7", "i8", "i9"}, got)
		}},
		{name: "an item already done", by: "alice", items: []string{"i1", "i2", "i3", "i4", "i5"}, setup: func(t *testing.T, pb plainBundle) {
			_, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"i0"}})
			require.NoError(t, err)
		}},
		{name: "an item already done, named again", by: "alice", items: names(6), setup: func(t *testing.T, pb plainBundle) {
			_, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"i3"}})
			require.NoError(t, err)
		}},
		{name: "an item released", by: "alice", items: []string{"i0", "i1", "i2", "i4", "i5"}, setup: func(t *testing.T, pb plainBundle) {
			_, err := pb.a.Release(pb.ctx, pb.slug, []string{"i3"}, "")
			require.NoError(t, err)
		}},
		{name: "not a batch", by: "alice", items: []string{"i6", "i7", "i8", "i9"}, setup: func(t *testing.T, pb plainBundle) {
			for _, n := range []int{2, 2} {
				_, err := pb.claim(pb.a, "alice", n)
				require.NoError(t, err)
			}
		}},
		{name: "event log on", by: "alice", items: names(6), setup: func(t *testing.T, pb plainBundle) {
			_, err := pb.a.UpdateProject(pb.ctx, pb.slug, SettingsPatch{EventLog: ptrTo(1000)})
			require.NoError(t, err)
		}},
		{name: "corrupt done set", by: "alice", items: names(6), setup: func(t *testing.T, pb plainBundle) {
			require.NoError(t, pb.rdb.Set(pb.ctx, DoneKey(pb.slug), "x", 0).Err())
		}},
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				var replies []any
				var states []map[string]any
				for j, script := range []*luascript.Script{donePlainWholeScript, donePlainScript} {
					pb := newPlainBundle(t, b, fmt.Sprintf("other%d-%d", i, j))
					pb.enqueue(t, pb.a, names(12)...)
					got, err := pb.claim(pb.a, "alice", 6)
					require.NoError(t, err)
					require.Equal(t, names(6), got)
					pb.clock.Advance(time.Second)
					if c.setup != nil {
						c.setup(t, pb)
					}
					pb.clock.Advance(time.Second)
					reply := pb.wholeDone(t, script, c.by, c.items...)
					_, isString := reply.(string)
					require.False(t, isString, "not taken whole: %v", reply)
					replies = append(replies, reply)
					states = append(states, pb.doneState(t))
				}
				require.Equal(t, replies[1], replies[0], "done_plain.lua's reply")
				require.Equal(t, states[1], states[0], "done_plain.lua's writes")
			})
		}
	})
}

// oldBuildRelease is what release.lua of a build from before claim
// batches (main before eb66426) did to one claimed item, by hand: the
// record and the item's own deadline go, a released record is written
// (its claimants the record's field as that build read it: "#<id>" as a
// claimant), the item goes to redo and the queued index, and the first
// released record moves config_version. It never counts a batch down.
// (Its history entry and items_released counter are left out: nothing
// here reads them.)
var oldBuildRelease = luascript.FromSource(`
local record = redis.call('HGET', KEYS[1], ARGV[1])
local count, _, claimant, _, earlier = string.match(record, '^(%d+) (%d+) (%S+) (%S+) (%S+) (%S+)$')
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local before = redis.call('EXISTS', KEYS[3])
local claimants = claimant
if earlier ~= '-' then claimants = claimants .. ',' .. earlier end
redis.call('HSET', KEYS[3], ARGV[1], count .. ' ' .. ARGV[2] .. ' ' .. claimants)
redis.call('RPUSH', KEYS[4], ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
if before == 0 then redis.call('HINCRBY', KEYS[6], 'config_version', 1) end
return 1`)

// TestWholeBatchDoneNeedsEveryFrontendToCountBatchesDown is the gate's
// purpose. A frontend of a build from before claim batches releases one
// of alice's batched items (its record goes, the batch's count does not);
// bob claims that item again; alice then reports her whole batch, as
// seesaw does.
//
// With Options.PreBatchFrontends (the gate off: `hoard serve
// --all-frontends-count-batches=false`) this build reads every record:
// bob's item goes to done.lua, which lets alice, an earlier claimant,
// complete it and ends bob's claim with its deadline; every item is done
// once and none is left out.
//
// With the gate on (the default) the same sequence is the unsafe case
// the setting exists for: the batch's count and list still match, so the
// whole-batch step completes bob's item as alice's batch item and removes
// bob's record as hers, leaving his deadline: the item is both done and
// counted out, and stays so past its deadline (invariant 1 broken).
func TestWholeBatchDoneNeedsEveryFrontendToCountBatchesDown(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, gateOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("every frontend counts batches down=%v", gateOn), func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
				pb := newPlainBundle(t, b, "gate")
				e := NewEngine(b.Client, Options{Clock: pb.clock, Logger: quiet, PreBatchFrontends: !gateOn})
				items := names(6)
				pb.enqueue(t, e, items...)
				got, err := pb.claim(e, "alice", 6)
				require.NoError(t, err)
				require.Equal(t, items, got)
				pb.clock.Advance(time.Second)

				released := oldBuildRelease.Run(pb.ctx, pb.rdb, []string{ClaimsKey(pb.slug), DeadlinesKey(pb.slug), ReleasedKey(pb.slug),
					QueueKey(pb.slug, QueueRedo), QueuedKey(pb.slug), ConfigKey(pb.slug)}, "i2", pb.clock.Now().UnixMilli())
				require.NoError(t, released.Err())
				require.Equal(t, "6", pb.rdb.HGet(pb.ctx, BatchesKey(pb.slug), "n1").Val(), "the old build did not count the batch down")
				got, err = pb.claim(e, "bob", 1)
				require.NoError(t, err)
				require.Equal(t, []string{"i2"}, got, "bob claims the released item again")
				bobs := pb.rdb.HGet(pb.ctx, ClaimsKey(pb.slug), "i2").Val()
				require.Contains(t, bobs, " bob ")
				pb.clock.Advance(time.Second)

				pb.flushScripts(t)
				res, err := e.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: items})
				require.NoError(t, err)
				require.Equal(t, gateOn, pb.ran(t, donePlainWholeScript), "done_plain_whole.lua ran only with the gate on")
				// alice is one of the item's claimants (bob's record names
				// her as an earlier one), so her report completes it either
				// way, and bob's is a duplicate.
				require.Equal(t, DoneResult{New: 6}, res)
				res, err = e.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "bob", Items: []string{"i2"}})
				require.NoError(t, err)
				require.Equal(t, DoneResult{Duplicates: 1}, res)
				done := pb.rdb.SMembers(pb.ctx, DoneKey(pb.slug)).Val()
				sort.Strings(done)
				require.Equal(t, items, done, "every item done once")
				require.Zero(t, pb.rdb.HLen(pb.ctx, ClaimsKey(pb.slug)).Val())
				require.NoError(t, e.FlushCounters(pb.ctx))
				stats, err := e.Stats(pb.ctx, pb.slug)
				require.NoError(t, err)
				require.EqualValues(t, 6, stats.Counters["items_done"])
				// Past every deadline (the batch's mends the count the old
				// build left high, prelude.lua's batch_explode).
				pb.clock.Advance(DefaultReclaimTTL * 3)
				_, err = pb.claim(e, "carol", 1)
				require.Error(t, err, "nothing to claim")
				counts, err := e.Counts(pb.ctx, pb.slug)
				require.NoError(t, err)
				if !gateOn {
					// done.lua read bob's record and ended his claim with it,
					// his deadline too.
					require.Equal(t, Counts{Done: 6}, counts, "no item left out")
					require.Zero(t, pb.rdb.ZCard(pb.ctx, DeadlinesKey(pb.slug)).Val())
					return
				}
				// The whole-batch step removed bob's record as alice's batch
				// item's, and left his deadline: a done item still counted
				// out past its deadline, which no reclaim mends (a deadline
				// without a record is left due for an operator, claim.lua).
				require.NotZero(t, pb.rdb.ZScore(pb.ctx, DeadlinesKey(pb.slug), "i2").Val(), "bob's deadline is left")
				require.Equal(t, Counts{Out: 1, Done: 6, Reclaimable: 1, OldestClaimAgeSeconds: counts.OldestClaimAgeSeconds}, counts,
					"a done item is counted out")
			})
		})
	}
}
