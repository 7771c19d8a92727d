package queues_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// a frontend whose cache says "no groups" enqueues with version "" and
// is never checked; items land in plain todo and are served unlimited.
func TestFrontendWithNoGroupsCachedStillRoutesByNewGroups(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		stale := queues.NewEngine(b.Client, queues.Options{Clock: tb.clock, Logger: quietLogger})
		// frontend "stale" caches the (empty) groups by serving one enqueue
		_, err := stale.Enqueue(tb.ctx, tb.slug, todo, []queues.QueueItem{{Name: "other:1"}})
		require.NoError(t, err)
		// operator, via another frontend, pauses group "user"
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		// stale frontend queues user items
		var items []queues.QueueItem
		for i := range 5 {
			items = append(items, queues.QueueItem{Name: fmt.Sprintf("user:%d", i)})
		}
		_, err = stale.Enqueue(tb.ctx, tb.slug, todo, items)
		require.NoError(t, err)
		got := tb.claim(t, "alice", 10)
		for _, it := range got {
			require.False(t, strings.HasPrefix(it, "user:"), "paused group item served: %v", got)
		}
	})
}

// a paused (rate 0) group's items come back through release -> plain redo.
func TestReleaseKeepsItemsInTheirGroup(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "user:a", "user:b")
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 60, Burst: 2}})
		require.NoError(t, err)
		require.Len(t, tb.claim(t, "alice", 2), 2)
		// operator pauses the group, then releases stale claims
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		_, err = tb.engine.ReleaseClaims(tb.ctx, tb.slug, queues.ReleaseFilter{})
		require.NoError(t, err)
		got, _ := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "bobby", IP: "1", Count: 2})
		require.Empty(t, got.Items, "paused group's items served after release")
	})
}

// reclaims of a paused group's items are served at full speed.
func TestReclaimsSpendTheirGroupsRate(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{ReclaimEnabled: ptr(true)})
		tb.enqueue(t, todo, "user:a", "user:b")
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 60, Burst: 2}})
		require.NoError(t, err)
		require.Len(t, tb.claim(t, "alice", 2), 2)
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		tb.clock.Advance(7 * time.Hour)
		got, _ := tb.engine.Claim(tb.ctx, queues.ClaimRequest{Project: tb.slug, Downloader: "bobby", IP: "1", Count: 2})
		require.Empty(t, got.Items, "paused group's items served as reclaims")
	})
}

// moving 5 items by count pushes the rest of the peeked page to the tail.
func TestMoveByCountKeepsQueueOrder(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, names("i", 2000)...)
		r, err := tb.engine.Move(tb.ctx, tb.slug, queues.MoveRequest{From: queues.QueueTodo, To: queues.QueueSecondary, Count: 5})
		require.NoError(t, err)
		require.Equal(t, 5, r.Moved)
		head, err := tb.rdb.LIndex(tb.ctx, queues.QueueKey(tb.slug, queues.QueueTodo), 0).Result()
		require.NoError(t, err)
		require.Equal(t, "i0005", head, "FIFO head after moving 5")
	})
}

// conservation under concurrent claims, enqueues, regrouping and moves.
func TestConcurrentSiftsEnqueuesAndClaimsConserveItems(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		ctx, cancel := context.WithTimeout(tb.ctx, 3*time.Second)
		defer cancel()
		var mu sync.Mutex
		queued := map[string]bool{}
		claimed := map[string]int{}
		var wg sync.WaitGroup
		// enqueuers on separate engines (separate caches)
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := queues.NewEngine(b.Client, queues.Options{Clock: tb.clock, Logger: quietLogger})
				qs := []queues.Queue{queues.QueueTodo, queues.QueueBackfeed, queues.QueueRedo}
				for i := 0; ctx.Err() == nil && i < 300; i++ {
					var items []queues.QueueItem
					for j := range 20 {
						p := []string{"user", "url", "x"}[(i+j)%3]
						items = append(items, queues.QueueItem{Name: fmt.Sprintf("%s:w%d-%d-%d", p, w, i, j)})
					}
					// Not the deadline's ctx: an enqueue the deadline cut
					// short on the client may still have run in Redis, and
					// its items would then be counted but not known here.
					if _, err := e.Enqueue(tb.ctx, tb.slug, queues.Target{Queue: qs[i%3]}, items); err == nil {
						mu.Lock()
						for _, it := range items {
							queued[it.Name] = true
						}
						mu.Unlock()
					}
				}
			}()
		}
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := queues.NewEngine(b.Client, queues.Options{Clock: tb.clock, Logger: quietLogger})
				for ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
					res, err := e.Claim(ctx, queues.ClaimRequest{Project: tb.slug, Downloader: fmt.Sprintf("dl%d", w), IP: "1", Count: 3})
					if err == nil {
						var names []string
						mu.Lock()
						for _, it := range res.Items {
							claimed[it.Name]++
							names = append(names, it.Name)
						}
						mu.Unlock()
						if len(names) > 0 && rand.Intn(3) == 0 {
							// give back: counts may repeat after release
							mu.Lock()
							for _, n := range names {
								claimed[n]--
							}
							mu.Unlock()
							_, _ = e.Release(ctx, tb.slug, names, "")
						} else if len(names) > 0 && rand.Intn(2) == 0 {
							_, _ = e.Done(ctx, queues.DoneRequest{Project: tb.slug, Downloader: fmt.Sprintf("dl%d", w), Items: names})
						}
					}
				}
			}()
		}
		sets := [][]queues.LimitGroup{
			{{Name: "users", Type: "user", RatePerMinute: 1e6, Burst: 1000}},
			{{Name: "urls", Glob: "url:*", RatePerMinute: 1e6, Burst: 1000}, {Name: "users", Regex: "^user:", RatePerMinute: 1e6, Burst: 1000}},
			{},
		}
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := queues.NewEngine(b.Client, queues.Options{Clock: tb.clock, Logger: quietLogger})
				rng := rand.New(rand.NewSource(int64(w)))
				for ctx.Err() == nil {
					if rng.Intn(2) == 0 {
						_, _ = e.SetLimitGroups(ctx, tb.slug, sets[rng.Intn(len(sets))])
					} else {
						qs := queues.SharedQueues
						from, to := qs[rng.Intn(4)], qs[rng.Intn(4)]
						if from != to {
							_, _ = e.Move(ctx, tb.slug, queues.MoveRequest{From: from, To: to, Count: rng.Intn(50)})
						}
					}
				}
			}()
		}
		wg.Wait()
		// settle: route everything per current groups, then check places
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, nil)
		require.NoError(t, err)
		_, err = tb.engine.Reroute(tb.ctx, tb.slug)
		require.NoError(t, err)
		places := placesOf(t, tb)
		for it, n := range claimed {
			require.LessOrEqual(t, n, 1, "%s claimed %d times", it, n)
		}
		missing, dup := 0, 0
		for it := range queued {
			switch len(places[it]) {
			case 0:
				missing++
			case 1:
				if strings.Contains(places[it][0], ":g:") {
					t.Errorf("stranded %s in %s", it, places[it][0])
				}
			default:
				dup++
				t.Logf("dup %s %v", it, places[it])
			}
		}
		t.Logf("queued %d claimed %d", len(queued), len(claimed))
		require.Zero(t, missing)
		require.Zero(t, dup)
		c := tb.counts(t)
		require.EqualValues(t, len(queued), c.TodoTotal()+c.Out+c.Done)
	})
}

// a released item rerouted into a group's redo sub-queue, then done
// late: done.lua LREMs plain redo (full O(N) scan, misses), the copy stays
// in the sub-queue and Counts keep it as queued.
func TestLateDoneAfterRerouteLeavesNoCopy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "user:a")
		require.Equal(t, []string{"user:a"}, tb.claim(t, "alice", 1))
		_, err := tb.engine.Release(tb.ctx, tb.slug, []string{"user:a"}, "")
		require.NoError(t, err)
		_, err = tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		_, err = tb.done("alice", "user:a")
		require.NoError(t, err)
		t.Logf("places: %v", placesOf(t, tb)["user:a"])
		c := tb.counts(t)
		require.EqualValues(t, 0, c.Redo, "done item still counted as queued")
	})
}

// R7: an interrupted re-route (client gone, ctx cancelled) strands a removed
// group's items: Counts show them as todo, no claim serves them, nothing
// resumes the re-route, and the admin log never records the change.
// TestInterruptedRerouteStrandsNothing: a re-route cut off midway leaves a
// removed group's items in its sub-queues; claims still serve them (without
// limit), and a later re-route empties and forgets the group.
func TestInterruptedRerouteStrandsNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 0}})
		require.NoError(t, err)
		for i := 0; i < 5; i++ {
			var items []queues.QueueItem
			for j := range 10000 {
				items = append(items, queues.QueueItem{Name: fmt.Sprintf("user:%d-%d", i, j)})
			}
			_, err := tb.engine.Enqueue(tb.ctx, tb.slug, todo, items)
			require.NoError(t, err)
		}
		// The groups change, and the re-route never runs (the process died).
		rerouteNeeded, err := tb.engine.UpdateLimitGroups(tb.ctx, tb.slug, nil)
		require.NoError(t, err)
		require.True(t, rerouteNeeded)
		left, err := tb.rdb.LLen(tb.ctx, queues.GroupQueueKey(tb.slug, queues.QueueTodo, "users")).Result()
		require.NoError(t, err)
		require.EqualValues(t, 50000, left, "the re-route never ran")
		require.Len(t, tb.claim(t, "alice", 100), 100, "a removed group's items are served without limit")

		_, err = tb.engine.Reroute(tb.ctx, tb.slug)
		require.NoError(t, err)
		left, err = tb.rdb.LLen(tb.ctx, queues.GroupQueueKey(tb.slug, queues.QueueTodo, "users")).Result()
		require.NoError(t, err)
		require.Zero(t, left)
		known, err := tb.rdb.SMembers(tb.ctx, queues.GroupsKnownKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Empty(t, known, "an emptied removed group is forgotten")
		require.EqualValues(t, 50000-100, tb.counts(t).Todo)
	})
}
