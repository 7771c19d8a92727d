package queues_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// doneModes are the three ways a project keeps its completions. Tests of
// the claim/done path run in each, because count and archive keep no done
// set: a check that only looks there misses every completion they made.
var doneModes = []string{queues.DoneKeep, queues.DoneCount, queues.DoneArchive}

// forEachMode runs fn on every backend in every done mode, as subtests
// <backend>/<mode>. patch is applied with the mode added.
func forEachMode(t *testing.T, patch queues.SettingsPatch, fn func(t *testing.T, tb bundle, mode string)) {
	t.Helper()
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for _, mode := range doneModes {
			t.Run(mode, func(t *testing.T) {
				p := patch
				p.DoneMode = ptr(mode)
				tb := setupProject(t, b, "proj-"+mode, p)
				fn(t, tb, mode)
			})
		}
	})
}

func TestItemQueuedTwiceIsServedAndDoneOnce(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		// Queued twice while the first copy waits: the second is refused
		// at the door, so the count says 1 item, not 2.
		tb.enqueue(t, todo, "twice")
		again := tb.enqueueResult(t, todo, "twice")
		require.Equal(t, queues.EnqueueResult{AlreadyQueued: 1, Length: 1}, again)
		require.EqualValues(t, 1, tb.counts(t).Todo, "the count is honest before any pop")
		// A copy that got past the index (a list written before it existed,
		// in a project from before pop_check, which has no such field) is
		// still dropped when popped.
		require.NoError(t, tb.rdb.HDel(tb.ctx, queues.ConfigKey(tb.slug), "pop_check").Err())
		require.NoError(t, tb.rdb.RPush(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), "twice").Err())
		require.Equal(t, []string{"twice"}, tb.claim(t, "alice", 1))
		res, err := tb.done("alice", "twice")
		require.NoError(t, err)
		require.Equal(t, 1, res.New)

		requireCode(t, tb.claimErr("bob", 5), queues.CodeNoItem)
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["items_done"], "done once")
		require.EqualValues(t, 1, stats.Counters["items_served"], "served once")
		require.EqualValues(t, 1, stats.Counters["duplicates_dropped"])
		c := tb.counts(t)
		require.Zero(t, c.Todo)
		require.Zero(t, c.Out)
		require.EqualValues(t, 1, c.Done)
	})
}

// TestPopCheckOnlyWhereAListCanHoldACopyTheIndexLetPast: a new project's
// claims look up no duplicates when they pop (pop_check "0": every way into
// its lists goes through the queued index). The proof that they skip the
// look-up: a copy pushed past the index by hand is handed out again. The
// ways in that cannot keep that promise turn the look-up back on for good:
// the scored queue (no index) and an import of an item waiting in a list.
func TestPopCheckOnlyWhereAListCanHoldACopyTheIndexLetPast(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		popCheck := func() string {
			t.Helper()
			v, err := tb.rdb.HGet(tb.ctx, queues.ConfigKey(tb.slug), "pop_check").Result()
			require.NoError(t, err)
			return v
		}
		require.Equal(t, "0", popCheck(), "a new project")
		tb.enqueue(t, todo, "a", "b")
		require.Equal(t, []string{"a"}, tb.claim(t, "alice", 1))
		require.NoError(t, tb.rdb.RPush(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), "a").Err())
		require.Equal(t, []string{"b", "a"}, tb.claim(t, "bob", 5), "no look-up: the hand-pushed copy of a goes out")

		// An import of an item that waits in a list: the look-up is back.
		tb.enqueue(t, todo, "c")
		_, err := tb.engine.ImportClaims(tb.ctx, tb.slug, []queues.ImportedClaim{{Item: "c", Downloader: "carol", ClaimedAt: tb.clock.Now()}})
		require.NoError(t, err)
		require.Equal(t, "1", popCheck(), "c is out and still waits in todo")
		requireCode(t, tb.claimErr("dave", 5), queues.CodeNoItem)

		// The scored queue, in another project, turns it on too.
		slug := "scored-" + mode
		_, err = tb.engine.CreateProject(tb.ctx, slug, queues.SettingsPatch{DoneMode: ptr(mode)})
		require.NoError(t, err)
		pb := tb
		pb.slug = slug
		_, err = tb.engine.EnqueueScored(tb.ctx, slug, []queues.QueueItem{{Name: "s", Score: 1}})
		require.NoError(t, err)
		require.Equal(t, "1", pb.rdb.HGet(tb.ctx, queues.ConfigKey(slug), "pop_check").Val())
		// An import of items waiting nowhere changes nothing.
		slug2 := "import-" + mode
		_, err = tb.engine.CreateProject(tb.ctx, slug2, queues.SettingsPatch{DoneMode: ptr(mode)})
		require.NoError(t, err)
		_, err = tb.engine.ImportDone(tb.ctx, slug2, []string{"gone-1", "gone-2"})
		require.NoError(t, err)
		require.Equal(t, "0", tb.rdb.HGet(tb.ctx, queues.ConfigKey(slug2), "pop_check").Val())
	})
}

func TestClaimsAndDonesConserveItemsInEveryMode(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		items := names("m:", 30)
		tb.enqueue(t, todo, items...)
		require.Equal(t, 10, tb.enqueueResult(t, todo, items[:10]...).AlreadyQueued)
		served := map[string]int{}
		for {
			got, err := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "alice", IP: "127.0.0.1", Count: 7})
			if queues.CodeOf(err) == queues.CodeNoItem {
				break
			}
			require.NoError(t, err)
			batch := make([]string, len(got.Items))
			for i, it := range got.Items {
				batch[i] = it.Name
				served[it.Name]++
			}
			_, err = tb.done("alice", batch...)
			require.NoError(t, err)
		}
		require.Len(t, served, 30)
		for name, n := range served {
			require.Equal(t, 1, n, "%s served once", name)
		}
		require.EqualValues(t, 30, tb.counts(t).Done)
	})
}

// TestClaimScriptFailureLosesNoItem puts a key of the wrong type, or a
// counter that is not an integer, at each place claim.lua writes or reads
// after it pops. Once, the script popped items and then failed on such a
// key, and Redis kept the pops: the items were gone. Now what can fail
// after a pop runs guarded: the call's pops and claim writes are undone,
// the claim is refused naming the key, and the items wait where they were.
func TestClaimScriptFailureLosesNoItem(t *testing.T) {
	type corruption struct {
		name  string
		apply func(tb bundle) error
		// detail is a part of the error the claim must report.
		detail string
	}
	wrongType := func(key func(string) string) func(tb bundle) error {
		return func(tb bundle) error {
			k := key(tb.slug)
			if err := tb.rdb.Del(tb.ctx, k).Err(); err != nil {
				return err
			}
			return tb.rdb.SAdd(tb.ctx, k, "junk").Err()
		}
	}
	wrongTypeList := func(key func(string) string) func(tb bundle) error {
		return func(tb bundle) error {
			k := key(tb.slug)
			if err := tb.rdb.Del(tb.ctx, k).Err(); err != nil {
				return err
			}
			return tb.rdb.RPush(tb.ctx, k, "junk").Err()
		}
	}
	badCounter := func(key func(string) string, field string) func(tb bundle) error {
		return func(tb bundle) error {
			return tb.rdb.HSet(tb.ctx, key(tb.slug), field, "not-a-number").Err()
		}
	}
	withPopCheck := func(apply func(tb bundle) error) func(tb bundle) error {
		return func(tb bundle) error {
			if err := tb.rdb.HSet(tb.ctx, queues.ConfigKey(tb.slug), "pop_check", "1").Err(); err != nil {
				return err
			}
			return apply(tb)
		}
	}
	cases := []corruption{
		{"out of a previous build", wrongTypeList(queues.LegacyOutKey), "out"},
		{"deadlines", wrongTypeList(queues.DeadlinesKey), "deadlines"},
		{"claims", wrongTypeList(queues.ClaimsKey), "claims"},
		// A claim reads done and recent_done only where it looks for
		// duplicates (pop_check "1": a project from before the field, or
		// one with a scored queue).
		{"done", withPopCheck(wrongTypeList(queues.DoneKey)), "done"},
		{"budget", wrongTypeList(queues.BudgetKey), "budget"},
		// Extras are read only on a project whose items have some
		// (has_extras, set where enqueue.lua writes them).
		{"extras", func(tb bundle) error {
			if err := tb.rdb.HSet(tb.ctx, queues.ConfigKey(tb.slug), "has_extras", "1").Err(); err != nil {
				return err
			}
			return wrongTypeList(queues.ExtrasKey)(tb)
		}, "extras"},
		{"released", wrongTypeList(queues.ReleasedKey), "released"},
		{"recent_done", withPopCheck(wrongTypeList(queues.RecentDoneKey)), "recent_done"},
		{"backfeed queue", wrongType(func(s string) string { return queues.QueueKey(s, queues.QueueBackfeed) }), "backfeed"},
		{"reserved queue", wrongType(func(s string) string { return queues.ReservedQueueKey(s, "alice") }), "todo:d:alice"},
		{"budget of the claimant", badCounter(queues.BudgetKey, "alice"), "alice"},
	}
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		for i, c := range cases {
			// Each case in its own project, so one corruption never hides another.
			slug := "corrupt-" + mode + "-" + strings.Repeat("x", i%3) + string(rune('a'+i))
			// A budget limit above the claim's 10, so the budget is kept
			// (it is only while a limit is set) and reached by the claim.
			_, err := tb.engine.CreateProject(tb.ctx, slug, queues.SettingsPatch{DoneMode: ptr(mode), DownloaderBudget: ptr(1000)})
			require.NoError(t, err)
			pb := tb
			pb.slug = slug
			items := names("c:", 5)
			pb.enqueue(t, todo, items...)
			require.NoError(t, c.apply(pb), c.name)

			// Asking for more than is queued reaches every queue: a key is
			// only used (and found corrupt) when the claim gets to it.
			err = pb.claimErr("alice", 10)
			require.Error(t, err, c.name)
			require.Contains(t, err.Error(), c.detail, c.name)
			queued, err := pb.rdb.LRange(pb.ctx, queues.QueueKey(slug, queues.QueueTodo), 0, -1).Result()
			require.NoError(t, err)
			require.Equal(t, items, queued, "%s: every item is still queued, in order", c.name)
		}
	})
}

// TestPlainClaimFailureLosesNoItem is the same for the plain claim (no
// budget, limits, groups or optional keys), which claim.lua pops from todo
// before its general path: a failure after its pop puts the items back, in
// order. Asking for more than todo holds also hands its batch to the
// general path, whose failure on the backfeed queue must undo it too.
func TestPlainClaimFailureLosesNoItem(t *testing.T) {
	wrongType := func(key func(string) string) func(tb bundle) error {
		return func(tb bundle) error {
			k := key(tb.slug)
			if err := tb.rdb.Del(tb.ctx, k).Err(); err != nil {
				return err
			}
			return tb.rdb.RPush(tb.ctx, k, "junk").Err()
		}
	}
	cases := []struct {
		name   string
		apply  func(tb bundle) error
		detail string
		want   int
	}{
		{"queued index", wrongType(queues.QueuedKey), "queued", 3},
		{"claims", wrongType(queues.ClaimsKey), "claims", 3},
		{"deadlines", wrongType(queues.DeadlinesKey), "deadlines", 3},
		// 4 or more items share one deadline, a claim batch's.
		{"batches", wrongType(queues.BatchesKey), "batches", 5},
		{"batch deadlines", wrongType(queues.BatchDeadlinesKey), "batch_deadlines", 5},
		// A claim of one item runs claim_plain.lua's own copy of the
		// writes and their undo.
		{"queued index, one item", wrongType(queues.QueuedKey), "queued", 1},
		{"claims, one item", wrongType(queues.ClaimsKey), "claims", 1},
		{"deadlines, one item", wrongType(queues.DeadlinesKey), "deadlines", 1},
		{"backfeed after todo ran dry", func(tb bundle) error {
			k := queues.QueueKey(tb.slug, queues.QueueBackfeed)
			if err := tb.rdb.Del(tb.ctx, k).Err(); err != nil {
				return err
			}
			return tb.rdb.SAdd(tb.ctx, k, "junk").Err()
		}, "backfeed", 10},
	}
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		for i, c := range cases {
			slug := "plain-corrupt-" + mode + "-" + string(rune('a'+i))
			_, err := tb.engine.CreateProject(tb.ctx, slug, queues.SettingsPatch{DoneMode: ptr(mode)})
			require.NoError(t, err)
			pb := tb
			pb.slug = slug
			items := names("p:", 5)
			pb.enqueue(t, todo, items...)
			require.NoError(t, c.apply(pb), c.name)

			err = pb.claimErr("alice", c.want)
			require.Error(t, err, c.name)
			require.Contains(t, err.Error(), c.detail, c.name)
			queued, err := pb.rdb.LRange(pb.ctx, queues.QueueKey(slug, queues.QueueTodo), 0, -1).Result()
			require.NoError(t, err)
			require.Equal(t, items, queued, "%s: every item is still queued, in order", c.name)
			if !strings.HasPrefix(c.name, "queued index") {
				index, err := pb.rdb.SMembers(pb.ctx, queues.QueuedKey(slug)).Result()
				require.NoError(t, err)
				require.ElementsMatch(t, items, index, "%s: every item is back in the queued index", c.name)
			}
			claims, err := pb.rdb.Exists(pb.ctx, queues.DeadlinesKey(slug)).Result()
			require.NoError(t, err)
			if !strings.HasPrefix(c.name, "deadlines") {
				require.Zero(t, claims, "%s: no deadline is left", c.name)
			}
			out, err := pb.rdb.HLen(pb.ctx, queues.ClaimsKey(slug)).Result()
			if !strings.HasPrefix(c.name, "claims") {
				require.NoError(t, err)
				require.Zero(t, out, "%s: no claim record is left", c.name)
			}
			if c.name != "batch deadlines" {
				require.Zero(t, pb.rdb.ZCard(pb.ctx, queues.BatchDeadlinesKey(slug)).Val(), "%s: no claim batch is left", c.name)
			}
			if c.name != "batches" {
				require.Contains(t, []string{"", "0"}, pb.rdb.HGet(pb.ctx, queues.BatchesKey(slug), "out").Val(), "%s: no item is out in a batch", c.name)
			}
		}
	})
}

// The request counters are counted by the frontend and flushed by
// counters_flush.lua, which claims never wait on: a counter that is not an
// integer stops no claim, and the flush replaces it with what it adds.
func TestCorruptCounterStopsNoClaim(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b")
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.StatsKey(tb.slug), "items_served", "not-a-number", "requests_served", "x").Err())
		require.Equal(t, []string{"a", "b"}, tb.claim(t, "alice", 2))
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 2, stats.Counters["items_served"])
		require.EqualValues(t, 1, stats.Counters["requests_served"])
	})
}

// A due claim whose record is gone or unreadable is skipped and counted,
// and the rest of the request is served.
func TestUnreadableDueClaimIsSkippedAndCounted(t *testing.T) {
	forEachMode(t, queues.SettingsPatch{ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(60_000_000_000))}, func(t *testing.T, tb bundle, mode string) {
		tb.enqueue(t, todo, "a", "b")
		require.Equal(t, []string{"a", "b"}, tb.claim(t, "alice", 2))
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.ClaimsKey(tb.slug), "a", "garbage").Err())
		tb.clock.Advance(2 * 60_000_000_000)
		require.Equal(t, []string{"b"}, tb.claim(t, "bob", 2))
		stats, err := tb.engine.Stats(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["claims_unreadable"])
	})
}

// TestDoneIntoAWrongTypedDoneSetChangesNothing: done.lua writes where the
// items go first, so a done set of the wrong type refuses the done with
// the items still out, on the plain path (every item the reporter's first
// claim; one item, which done_plain.lua completes without tables, and two)
// and on the general one (an item reported twice).
func TestDoneIntoAWrongTypedDoneSetChangesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "a", "b")
		require.Equal(t, []string{"a", "b"}, tb.claim(t, "alice", 2))
		require.NoError(t, tb.rdb.RPush(tb.ctx, queues.DoneKey(tb.slug), "junk").Err())
		for _, items := range [][]string{{"a"}, {"a", "b"}, {"b", "b"}} {
			_, err := tb.done("alice", items...)
			require.Error(t, err, "%v", items)
			require.Contains(t, err.Error(), "completions could not be kept", "%v", items)
			out, err := tb.rdb.HLen(tb.ctx, queues.ClaimsKey(tb.slug)).Result()
			require.NoError(t, err)
			require.EqualValues(t, 2, out, "%v: both claims are still out", items)
			deadlines, err := tb.rdb.ZCard(tb.ctx, queues.DeadlinesKey(tb.slug)).Result()
			require.NoError(t, err)
			require.EqualValues(t, 2, deadlines, "%v: both deadlines are kept", items)
		}
	})
}
