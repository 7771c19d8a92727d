package queues_test

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

const testGroup = "plugin:test"

func eventLogPatch() queues.SettingsPatch {
	return queues.SettingsPatch{EventLog: ptr(1000), ReclaimEnabled: ptr(true), ReclaimTTL: ptr(queues.Duration(time.Hour))}
}

// readAll reads and acknowledges everything the group has not seen.
func (tb bundle) readAll(t *testing.T, consumer string) []queues.Event {
	t.Helper()
	var all []queues.Event
	for {
		evs, err := tb.engine.ReadEvents(tb.ctx, tb.slug, testGroup, consumer, 100, time.Millisecond)
		require.NoError(t, err)
		if len(evs) == 0 {
			return all
		}
		for _, ev := range evs {
			require.NoError(t, tb.engine.AckEvents(tb.ctx, tb.slug, testGroup, ev.ID))
		}
		all = append(all, evs...)
	}
}

// expiries lists the items of the reclaim events, with who held them.
func expiries(evs []queues.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Kind == queues.EventReclaim {
			out = append(out, ev.Items[0]+"@"+ev.By)
		}
	}
	sort.Strings(out)
	return out
}

func TestEventLogHasEveryCompletionOnceInEveryMode(t *testing.T) {
	forEachMode(t, eventLogPatch(), func(t *testing.T, tb bundle, mode string) {
		require.NoError(t, tb.engine.JoinEventLog(tb.ctx, tb.slug, testGroup))
		tb.enqueue(t, todo, "a", "b", "c")
		require.Len(t, tb.claim(t, "alice", 3), 3)
		_, err := tb.done("alice", "a", "b")
		require.NoError(t, err)
		_, err = tb.done("alice", "a") // a repeat logs nothing
		require.NoError(t, err)
		_, err = tb.done("alice", "c")
		require.NoError(t, err)

		evs := tb.readAll(t, "frontend-1")
		require.Len(t, evs, 2)
		require.Equal(t, queues.EventDone, evs[0].Kind)
		require.Equal(t, []string{"a", "b"}, evs[0].Items)
		require.Equal(t, "alice", evs[0].By)
		require.Equal(t, tb.clock.Now().UnixMilli(), evs[0].At.UnixMilli())
		require.Equal(t, []string{"c"}, evs[1].Items)
		require.Empty(t, tb.readAll(t, "frontend-2"), "a group sees each entry once")
	})
}

// TestEveryExpiryIsLoggedOnceWhoeverSeesItFirst is the bug of the old
// sweep: a claim the queue reclaimed before the sweep read the deadlines
// had moved its deadline out of the sweep's window, and its expiry was
// never reported. Now the scan and claim.lua share a cursor.
func TestEveryExpiryIsLoggedOnceWhoeverSeesItFirst(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		require.NoError(t, tb.engine.JoinEventLog(tb.ctx, tb.slug, testGroup))
		tb.enqueue(t, todo, "scanned", "reclaimed", "both")
		require.Len(t, tb.claim(t, "alice", 3), 3)
		tb.clock.Advance(61 * time.Minute)

		// "reclaimed" is handed out again before any scan: claim.lua logs it.
		got := tb.claim(t, "bob", 1)
		require.Len(t, got, 1)
		first := got[0]
		evs := tb.readAll(t, "f1")
		require.Equal(t, []string{first + "@alice"}, expiries(evs))

		// The scan logs the two still expired, and not the one reclaimed.
		logged, more, err := tb.engine.ScanExpiredClaims(tb.ctx, tb.slug, 100)
		require.NoError(t, err)
		require.Equal(t, 2, logged)
		require.False(t, more)
		evs = tb.readAll(t, "f1")
		require.Len(t, expiries(evs), 2)
		require.NotContains(t, expiries(evs), first+"@alice")

		// Reclaiming those after the scan logs nothing more, and a second
		// scan finds nothing new.
		require.Len(t, tb.claim(t, "carol", 2), 2)
		logged, _, err = tb.engine.ScanExpiredClaims(tb.ctx, tb.slug, 100)
		require.NoError(t, err)
		require.Zero(t, logged)
		require.Empty(t, tb.readAll(t, "f1"))

		// Their second expiry is a new event (bob's claim of the first
		// one, with twice the TTL: 2 h after the reclaim).
		tb.clock.Advance(2*time.Hour + time.Minute)
		logged, _, err = tb.engine.ScanExpiredClaims(tb.ctx, tb.slug, 100)
		require.NoError(t, err)
		require.Equal(t, 3, logged)
		evs = tb.readAll(t, "f1")
		require.Contains(t, expiries(evs), first+"@bob")
	})
}

func TestExpiryScanPagesWithoutSkippingTies(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		require.NoError(t, tb.engine.JoinEventLog(tb.ctx, tb.slug, testGroup))
		items := names("t:", 25)
		tb.enqueue(t, todo, items...)
		// Claimed in three calls at three instants: deadlines tie in groups.
		tb.claim(t, "alice", 10)
		tb.clock.Advance(time.Millisecond)
		tb.claim(t, "alice", 10)
		tb.clock.Advance(time.Millisecond)
		tb.claim(t, "alice", 5)
		tb.clock.Advance(2 * time.Hour)
		total := 0
		for range 10 {
			logged, more, err := tb.engine.ScanExpiredClaims(tb.ctx, tb.slug, 4)
			require.NoError(t, err)
			total += logged
			if !more {
				break
			}
		}
		require.Equal(t, 25, total)
		evs := tb.readAll(t, "f1")
		require.Len(t, expiries(evs), 25)
		seen := map[string]bool{}
		for _, ev := range evs {
			require.False(t, seen[ev.Items[0]], "%s logged twice", ev.Items[0])
			seen[ev.Items[0]] = true
		}
	})
}

func TestStaleEventsGoToALiveConsumerAndAreGivenUpAfterMaxDeliveries(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		require.NoError(t, tb.engine.JoinEventLog(tb.ctx, tb.slug, testGroup))
		tb.enqueue(t, todo, "x")
		tb.claim(t, "alice", 1)
		_, err := tb.done("alice", "x")
		require.NoError(t, err)

		// frontend-1 reads it and dies without acknowledging.
		evs, err := tb.engine.ReadEvents(tb.ctx, tb.slug, testGroup, "frontend-1", 10, time.Millisecond)
		require.NoError(t, err)
		require.Len(t, evs, 1)
		none, err := tb.engine.ReadEvents(tb.ctx, tb.slug, testGroup, "frontend-2", 10, time.Millisecond)
		require.NoError(t, err)
		require.Empty(t, none, "a pending entry is not read again as new")

		// Not idle long enough: nothing to take over.
		stale, err := tb.engine.ClaimStaleEvents(tb.ctx, tb.slug, testGroup, "frontend-2", time.Hour, 10, 3)
		require.NoError(t, err)
		require.Empty(t, stale.Events)

		for delivery := int64(2); delivery <= 3; delivery++ {
			require.Eventually(t, func() bool {
				stale, err = tb.engine.ClaimStaleEvents(tb.ctx, tb.slug, testGroup, "frontend-2", time.Millisecond, 10, 3)
				require.NoError(t, err)
				return len(stale.Events) == 1
			}, 5*time.Second, 2*time.Millisecond)
			require.Equal(t, evs[0].ID, stale.Events[0].ID)
			require.Equal(t, []string{"x"}, stale.Events[0].Items)
			require.Equal(t, delivery, stale.Events[0].Deliveries)
		}
		// Delivered 3 times and still not acknowledged: given up, once.
		require.Eventually(t, func() bool {
			stale, err = tb.engine.ClaimStaleEvents(tb.ctx, tb.slug, testGroup, "frontend-2", time.Millisecond, 10, 3)
			require.NoError(t, err)
			return len(stale.GivenUp) == 1
		}, 5*time.Second, 2*time.Millisecond)
		require.Empty(t, stale.Events)
		require.Equal(t, []string{"x"}, stale.GivenUp[0].Items)
		stale, err = tb.engine.ClaimStaleEvents(tb.ctx, tb.slug, testGroup, "frontend-2", 0, 10, 3)
		require.NoError(t, err)
		require.Empty(t, stale.Events)
		require.Empty(t, stale.GivenUp)
	})
}

func TestEventLogOffWritesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "x")
		tb.claim(t, "alice", 1)
		_, err := tb.done("alice", "x")
		require.NoError(t, err)
		logged, _, err := tb.engine.ScanExpiredClaims(tb.ctx, tb.slug, 10)
		require.NoError(t, err)
		require.Zero(t, logged)
		n, err := tb.rdb.Exists(tb.ctx, queues.EventsKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestEventLogIsCapped(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		items := names("c:", 3000)
		tb.enqueue(t, todo, items...)
		for _, item := range items {
			tb.claim(t, "alice", 1)
			_, err := tb.done("alice", item)
			require.NoError(t, err)
		}
		n, err := tb.rdb.XLen(tb.ctx, queues.EventsKey(tb.slug)).Result()
		require.NoError(t, err)
		require.Less(t, n, int64(1200), "about event_log entries are kept")
		require.GreaterOrEqual(t, n, int64(1000))
	})
}

func TestCorruptEventLogRefusesTheDoneAndChangesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		tb.enqueue(t, todo, "x")
		tb.claim(t, "alice", 1)
		require.NoError(t, tb.rdb.Set(tb.ctx, queues.EventsKey(tb.slug), "junk", 0).Err())
		_, err := tb.done("alice", "x")
		requireCode(t, err, queues.CodeUnavailable)
		require.Equal(t, queues.Counts{Out: 1}, tb.counts(t))
	})
}

func TestDoneResultTravelsInTheEventLogOnly(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, eventLogPatch())
		require.NoError(t, tb.engine.JoinEventLog(tb.ctx, tb.slug, testGroup))
		tb.enqueue(t, todo, "x", "y")
		tb.claim(t, "alice", 2)
		_, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"x"},
			Result: []byte(`{ "peers": 12, "new": 3 }`)})
		require.NoError(t, err)
		for _, bad := range [][]byte{[]byte(`{"peers":`), make([]byte, queues.MaxResultBytes+1)} {
			_, err = tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: "alice", Items: []string{"y"}, Result: bad})
			requireCode(t, err, queues.CodeInvalid)
		}
		require.EqualValues(t, 1, tb.counts(t).Out, "a refused done changes nothing")
		evs := tb.readAll(t, "f1")
		require.Len(t, evs, 1)
		require.JSONEq(t, `{"peers":12,"new":3}`, string(evs[0].Result))
	})
}
