package queues

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/callbatch"
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// holdPlainBatches gives e a plain batcher of one leader whose first batch
// (a call that is never sent) waits until open is called, so the calls
// made meanwhile queue up and go as one batch after it. waiting reports
// how many calls are queued.
func holdPlainBatches(t *testing.T, e *Engine) (waiting func() int, open func()) {
	t.Helper()
	p := newPlainBatcher(e.rdb, 1, plainBatchMax)
	gate, inRun := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p.batches = callbatch.New(1, plainBatchMax, func(batch []*plainCall) {
		once.Do(func() {
			close(inRun)
			<-gate
		})
		p.run(batch)
	})
	e.plainBatches = p
	held, cancel := context.WithCancel(context.Background())
	cancel()
	go func() { _, _ = p.do(plainCall{ctx: held}) }()
	<-inRun
	var opened sync.Once
	t.Cleanup(func() { opened.Do(func() { close(gate) }) })
	return p.batches.Waiting, func() { opened.Do(func() { close(gate) }) }
}

// coalesce runs fns concurrently while e's plain batches are held, once
// all n have queued, and waits for them.
func coalesce(t *testing.T, e *Engine, fns ...func()) {
	t.Helper()
	waiting, open := holdPlainBatches(t, e)
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	require.Eventually(t, func() bool { return waiting() == len(fns) }, 10*time.Second, time.Millisecond, "waiting %d of %d", waiting(), len(fns))
	open()
	wg.Wait()
}

// ran reports whether the script's function was loaded on the project's
// node since the last flush (a call that found it missing loads it).
func (pb plainBundle) ran(t *testing.T, s *luascript.Script) bool {
	t.Helper()
	libs, err := pb.node.FunctionList(pb.ctx, redis.FunctionListQuery{LibraryNamePattern: s.Name()}).Result()
	require.NoError(t, err)
	return len(libs) == 1
}

type claimAnswer struct {
	items []string
	err   error
}

// coalescedClaims makes one-item claims by the downloaders in one batch.
func (pb plainBundle) coalescedClaims(t *testing.T, e *Engine, downloaders ...string) []claimAnswer {
	t.Helper()
	answers := make([]claimAnswer, len(downloaders))
	fns := make([]func(), len(downloaders))
	for i, d := range downloaders {
		fns[i] = func() {
			res, err := e.Claim(pb.ctx, ClaimRequest{Project: pb.slug, Downloader: d, IP: "10.0.0." + fmt.Sprint(i+1), Count: 1})
			answers[i].err = err
			for _, it := range res.Items {
				answers[i].items = append(answers[i].items, it.Name)
			}
		}
	}
	coalesce(t, e, fns...)
	return answers
}

// TestCoalescedClaimsGetDistinctItemsEachWithItsOwnRecord: one-item
// claims of k downloaders made together go as one claim_plain_many.lua
// call, which hands each its own item with its own record and deadline,
// exactly as k claim_plain.lua calls would, and each request is counted.
func TestCoalescedClaimsGetDistinctItemsEachWithItsOwnRecord(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "many")
		pb.enqueue(t, pb.a, "a", "b", "c", "d", "e", "f")
		// The copy of the settings is loaded before the batch.
		_, err := pb.claim(pb.a, "zed", 1)
		require.NoError(t, err)
		pb.flushScripts(t)
		now := pb.clock.Now().UnixMilli()
		downloaders := []string{"dl1", "dl2", "dl3", "dl4"}
		answers := pb.coalescedClaims(t, pb.a, downloaders...)
		got := map[string]string{}
		for i, a := range answers {
			require.NoError(t, a.err, downloaders[i])
			require.Len(t, a.items, 1, downloaders[i])
			got[a.items[0]] = downloaders[i]
		}
		require.Len(t, got, 4, "four distinct items: %v", got)
		for item, d := range got {
			require.Contains(t, []string{"b", "c", "d", "e"}, item, "from todo's head")
			record, err := pb.rdb.HGet(pb.ctx, ClaimsKey(pb.slug), item).Result()
			require.NoError(t, err)
			c, ok := parseClaimRecord(item, record)
			require.True(t, ok, record)
			require.Equal(t, d, c.Downloader, item)
			require.Equal(t, "10.0.0."+d[2:], c.IP, item)
			require.Equal(t, 1, c.TimesClaimed)
			require.Equal(t, now, c.ClaimedAt.UnixMilli())
			deadline, err := pb.rdb.ZScore(pb.ctx, DeadlinesKey(pb.slug), item).Result()
			require.NoError(t, err)
			require.EqualValues(t, now+DefaultReclaimTTL.Milliseconds(), deadline)
		}
		todo, err := pb.rdb.LRange(pb.ctx, QueueKey(pb.slug, QueueTodo), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"f"}, todo)
		queued, err := pb.rdb.SMembers(pb.ctx, QueuedKey(pb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"f"}, queued)
		require.True(t, pb.ran(t, claimPlainManyScript), "one coalesced call")
		require.False(t, pb.ran(t, claimPlainScript), "no one-item call")
		require.False(t, pb.ran(t, claimScript))

		// Each is the claimant of its own item: its one-item done is plain.
		for item, d := range got {
			res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: d, Items: []string{item}})
			require.NoError(t, err)
			require.Equal(t, DoneResult{New: 1}, res)
		}
		require.False(t, pb.ran(t, doneScript))
		require.NoError(t, pb.a.FlushCounters(pb.ctx))
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 5, stats.Counters["requests"], "each request counted")
		require.EqualValues(t, 5, stats.Counters["items_served"])
		require.EqualValues(t, 4, stats.Counters["items_done"])
	})
}

// TestCoalescedClaimsOfTwoProjectsGoAsOneCallEach: a batch holding claims
// of two projects (on a cluster, maybe two nodes) sends each project's as
// its own call.
func TestCoalescedClaimsOfTwoProjectsGoAsOneCallEach(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		one := newPlainBundle(t, b, "one")
		two := newPlainBundle(t, b, "two")
		one.enqueue(t, one.a, "o1", "o2")
		two.enqueue(t, one.a, "t1", "t2")
		one.flushScripts(t)
		two.flushScripts(t)
		e := one.a
		var mu sync.Mutex
		got := map[string]string{}
		claim := func(slug, d string) func() {
			return func() {
				res, err := e.Claim(one.ctx, ClaimRequest{Project: slug, Downloader: d, Count: 1})
				require.NoError(t, err)
				mu.Lock()
				got[d] = res.Items[0].Name
				mu.Unlock()
			}
		}
		// Copies of both projects' settings first.
		require.NotNil(t, e.plainConfigs.get(one.ctx, e, "one"))
		require.NotNil(t, e.plainConfigs.get(one.ctx, e, "two"))
		coalesce(t, e, claim("one", "aaa"), claim("two", "bbb"), claim("one", "ccc"), claim("two", "ddd"))
		// Which of a project's two gets which item is the order they queued in.
		require.ElementsMatch(t, []string{"o1", "o2"}, []string{got["aaa"], got["ccc"]})
		require.ElementsMatch(t, []string{"t1", "t2"}, []string{got["bbb"], got["ddd"]})
		require.True(t, one.ran(t, claimPlainManyScript))
		require.True(t, two.ran(t, claimPlainManyScript))
	})
}

// TestCoalescedClaimsBeyondTodoGoToClaimLua: when todo holds fewer items
// than the batch wants, the first requests get them and the others are
// served by claim.lua (here from the backfeed queue), as one by one.
func TestCoalescedClaimsBeyondTodoGoToClaimLua(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "partial")
		pb.enqueue(t, pb.a, "t1", "t2")
		_, err := pb.a.Enqueue(pb.ctx, pb.slug, Target{Queue: QueueBackfeed}, []QueueItem{{Name: "b1"}})
		require.NoError(t, err)
		require.NotNil(t, pb.a.plainConfigs.get(pb.ctx, pb.a, pb.slug))
		pb.flushScripts(t)
		answers := pb.coalescedClaims(t, pb.a, "dl1", "dl2", "dl3", "dl4")
		var items []string
		empty := 0
		for _, a := range answers {
			if a.err != nil {
				require.Equal(t, CodeNoItem, CodeOf(a.err), "%v", a.err)
				empty++
				continue
			}
			items = append(items, a.items...)
		}
		sort.Strings(items)
		require.Equal(t, []string{"b1", "t1", "t2"}, items)
		require.Equal(t, 1, empty)
		require.True(t, pb.ran(t, claimPlainManyScript))
		require.True(t, pb.ran(t, claimScript), "claim.lua served the rest")
		for _, item := range items {
			record, err := pb.rdb.HGet(pb.ctx, ClaimsKey(pb.slug), item).Result()
			require.NoError(t, err, item)
			require.Contains(t, record, "1 ", item)
		}
		require.NoError(t, pb.a.FlushCounters(pb.ctx))
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 3, stats.Counters["items_served"])
	})
}

// TestCoalescedClaimsWithAStaleCopyHandOutNothingFromIt: another frontend
// paused the project after this one's copy was read; the batch's script
// sees the copy is stale, changes nothing, and claim.lua refuses each.
func TestCoalescedClaimsWithAStaleCopyHandOutNothingFromIt(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "stale")
		pb.enqueue(t, pb.a, "a", "b", "c")
		require.NotNil(t, pb.a.plainConfigs.get(pb.ctx, pb.a, pb.slug))
		_, err := pb.b.UpdateProject(pb.ctx, pb.slug, SettingsPatch{Paused: ptrTo(true)})
		require.NoError(t, err)
		answers := pb.coalescedClaims(t, pb.a, "dl1", "dl2", "dl3")
		for _, a := range answers {
			require.Error(t, a.err)
			require.Contains(t, a.err.Error(), "paused")
		}
		todo, err := pb.rdb.LRange(pb.ctx, QueueKey(pb.slug, QueueTodo), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c"}, todo)
		n, err := pb.rdb.HLen(pb.ctx, ClaimsKey(pb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// TestCoalescedClaimsCorruptMidBatchLoseNothing: the deadlines key has the
// wrong type, so the batch's last write fails after the pop, the queued
// index and the claim records: every item is back where it was, in order.
func TestCoalescedClaimsCorruptMidBatchLoseNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "corrupt")
		pb.enqueue(t, pb.a, "a", "b", "c", "d")
		require.NotNil(t, pb.a.plainConfigs.get(pb.ctx, pb.a, pb.slug))
		require.NoError(t, pb.rdb.Set(pb.ctx, DeadlinesKey(pb.slug), "oops", 0).Err())
		answers := pb.coalescedClaims(t, pb.a, "dl1", "dl2", "dl3")
		for _, a := range answers {
			require.Error(t, a.err)
			require.Equal(t, CodeUnavailable, CodeOf(a.err), "%v", a.err)
			require.Contains(t, a.err.Error(), "nothing was handed out")
		}
		todo, err := pb.rdb.LRange(pb.ctx, QueueKey(pb.slug, QueueTodo), 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c", "d"}, todo)
		queued, err := pb.rdb.SMembers(pb.ctx, QueuedKey(pb.slug)).Result()
		require.NoError(t, err)
		sort.Strings(queued)
		require.Equal(t, []string{"a", "b", "c", "d"}, queued)
		n, err := pb.rdb.HLen(pb.ctx, ClaimsKey(pb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		require.True(t, pb.ran(t, claimPlainManyScript))
	})
}

type doneAnswer struct {
	res DoneResult
	err error
}

// TestCoalescedDonesAnswerAsOneByOne: a batch of one-item dones mixing
// plain ones, a second report of an item, a stranger's, a reclaimed item
// and one never handed out gets the answers, state and counters that the
// same dones made one by one get on a twin project.
func TestCoalescedDonesAnswerAsOneByOne(t *testing.T) {
	type report struct{ downloader, item string }
	reports := []report{
		{"alice", "a"},   // plain
		{"bob", "b"},     // plain
		{"alice", "a"},   // the same item again: a duplicate
		{"eve", "c"},     // carol's item
		{"dave", "d"},    // released by erin: dave's is its second claim
		{"alice", "zzz"}, // never handed out
		{"carol", "e"},   // plain
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		run := func(slug string, together bool) ([]doneAnswer, map[string]int64, []string, int64) {
			pb := newPlainBundle(t, b, slug)
			pb.enqueue(t, pb.a, "a", "b", "c", "d", "e")
			for _, c := range []report{{"alice", "a"}, {"bob", "b"}, {"carol", "c"}, {"erin", "d"}, {"carol", "e"}} {
				got, err := pb.claim(pb.a, c.downloader, 1)
				require.NoError(t, err)
				require.Equal(t, []string{c.item}, got)
			}
			// erin's claim of d is released and d handed to dave: his is
			// its second claim.
			_, err := pb.a.Release(pb.ctx, slug, []string{"d"}, "")
			require.NoError(t, err)
			_, err = pb.a.Move(pb.ctx, slug, MoveRequest{From: QueueRedo, To: QueueTodo})
			require.NoError(t, err)
			got, err := pb.claim(pb.a, "dave", 1)
			require.NoError(t, err)
			require.Equal(t, []string{"d"}, got)
			require.NoError(t, pb.a.FlushCounters(pb.ctx))

			pb.clock.Advance(time.Second)
			answers := make([]doneAnswer, len(reports))
			done := func(i int) func() {
				return func() {
					r := reports[i]
					answers[i].res, answers[i].err = pb.a.Done(pb.ctx, DoneRequest{Project: slug, Downloader: r.downloader, Items: []string{r.item}, Bytes: map[string]int64{"data": 10}})
				}
			}
			if together {
				fns := make([]func(), len(reports))
				for i := range reports {
					fns[i] = done(i)
				}
				coalesce(t, pb.a, fns...)
				require.True(t, pb.ran(t, donePlainManyScript))
			} else {
				for i := range reports {
					done(i)()
				}
			}
			require.NoError(t, pb.a.FlushCounters(pb.ctx))
			stats, err := pb.a.Stats(pb.ctx, slug)
			require.NoError(t, err)
			doneSet, err := pb.rdb.SMembers(pb.ctx, DoneKey(slug)).Result()
			require.NoError(t, err)
			sort.Strings(doneSet)
			claims, err := pb.rdb.HLen(pb.ctx, ClaimsKey(slug)).Result()
			require.NoError(t, err)
			return answers, stats.Counters, doneSet, claims
		}
		oneByOne, countersA, doneA, claimsA := run("single", false)
		together, countersB, doneB, claimsB := run("batch", true)
		// The same item twice: whichever report queued first completes it
		// and the other is done.lua's duplicate answer, as one by one.
		require.ElementsMatch(t, []DoneResult{{New: 1}, {Duplicates: 1}}, []DoneResult{together[0].res, together[2].res})
		require.NoError(t, together[0].err)
		require.NoError(t, together[2].err)
		for i := range reports {
			if i == 0 || i == 2 {
				continue
			}
			require.Equal(t, oneByOne[i].res, together[i].res, "report %d %v", i, reports[i])
			require.Equal(t, CodeOf(oneByOne[i].err), CodeOf(together[i].err), "report %d %v: %v / %v", i, reports[i], oneByOne[i].err, together[i].err)
		}
		require.Equal(t, CodeNotHandedOut, CodeOf(together[5].err), "%v", together[5].err)
		require.Equal(t, doneA, doneB)
		require.Equal(t, claimsA, claimsB)
		for _, name := range []string{"items_done", "bytes_done", "requests", "items_served"} {
			require.Equal(t, countersA[name], countersB[name], name)
		}
	})
}

// TestCoalescedDonesCorruptDoneSetChangeNothing: the done set has the
// wrong type: the batch's script completes nothing and says so to each.
func TestCoalescedDonesCorruptDoneSetChangeNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "baddone")
		pb.enqueue(t, pb.a, "a", "b")
		_, err := pb.claim(pb.a, "alice", 1)
		require.NoError(t, err)
		_, err = pb.claim(pb.a, "bob", 1)
		require.NoError(t, err)
		require.NoError(t, pb.rdb.Set(pb.ctx, DoneKey(pb.slug), "oops", 0).Err())
		errs := make([]error, 2)
		coalesce(t, pb.a, func() {
			_, errs[0] = pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"a"}})
		}, func() {
			_, errs[1] = pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "bob", Items: []string{"b"}})
		})
		for _, err := range errs {
			require.Equal(t, CodeUnavailable, CodeOf(err), "%v", err)
		}
		n, err := pb.rdb.HLen(pb.ctx, ClaimsKey(pb.slug)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "both still out")
	})
}

// TestLonePlainClaimAndDoneGoAtOnce: with nothing else waiting, a claim
// and a done are sent at once, alone, as the one-item scripts (no timer:
// the fake clock never moves here).
func TestLonePlainClaimAndDoneGoAtOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "lone")
		pb.enqueue(t, pb.a, "a")
		pb.flushScripts(t)
		got, err := pb.claim(pb.a, "alice", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, got)
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"a"}})
		require.NoError(t, err)
		require.Equal(t, DoneResult{New: 1}, res)
		require.True(t, pb.ran(t, claimPlainScript))
		require.True(t, pb.ran(t, donePlainScript))
		require.False(t, pb.ran(t, claimPlainManyScript))
		require.False(t, pb.ran(t, donePlainManyScript))
	})
}

// TestCoalescedCountersAreExactUnderConcurrency: many warriors claiming
// and completing one item at a time, concurrently, each item once: every
// item is done once and every request and item counted once.
func TestCoalescedCountersAreExactUnderConcurrency(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "busy")
		const warriors, each = 16, 20
		names := make([]string, warriors*each)
		for i := range names {
			names[i] = fmt.Sprintf("item%04d", i)
		}
		pb.enqueue(t, pb.a, names...)
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		for w := range warriors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := fmt.Sprintf("w%02d", w)
				for range each {
					res, err := pb.a.Claim(pb.ctx, ClaimRequest{Project: pb.slug, Downloader: d, Count: 1})
					if !assertNoError(t, err) {
						return
					}
					item := res.Items[0].Name
					mu.Lock()
					other, dup := seen[item]
					seen[item] = d
					mu.Unlock()
					if dup {
						t.Errorf("%s handed to %s and %s", item, other, d)
						return
					}
					r, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: d, Items: []string{item}, Bytes: map[string]int64{"data": 3}})
					if !assertNoError(t, err) || r.New != 1 {
						t.Errorf("done %s by %s: %+v", item, d, r)
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Len(t, seen, warriors*each)
		require.NoError(t, pb.a.FlushCounters(pb.ctx))
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, warriors*each, stats.Counters["requests"])
		require.EqualValues(t, warriors*each, stats.Counters["items_served"])
		require.EqualValues(t, warriors*each, stats.Counters["items_done"])
		require.EqualValues(t, 3*warriors*each, stats.Counters["bytes_done"])
		require.Len(t, stats.Downloaders, warriors)
		for _, d := range stats.Downloaders {
			require.EqualValues(t, each, d.Items, d.Name)
		}
		n, err := pb.rdb.SCard(pb.ctx, DoneKey(pb.slug)).Result()
		require.NoError(t, err)
		require.EqualValues(t, warriors*each, n)
	})
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
