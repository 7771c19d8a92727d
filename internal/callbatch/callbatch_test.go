package callbatch_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/callbatch"
)

type call struct {
	n      int
	result int
	runs   atomic.Int32
}

// Many goroutines at once: every call runs once, in its own slot, no batch
// exceeds its bound and no more batches run at once than leaders.
// So with each option, which only changes when a batch goes out.
func TestEveryCallRunsOnceWithinTheBounds(t *testing.T) {
	for name, opts := range map[string]callbatch.Options{
		"default":       {},
		"MoreLeadersAt": {MoreLeadersAt: 3},
	} {
		t.Run(name, func(t *testing.T) { everyCallRunsOnceWithinTheBounds(t, opts) })
	}
}

func everyCallRunsOnceWithinTheBounds(t *testing.T, opts callbatch.Options) {
	const leaders, maxBatch, calls = 3, 5, 500
	var inFlight, mostInFlight atomic.Int32
	var mu sync.Mutex
	var sizes []int
	b := callbatch.NewWith(leaders, maxBatch, opts, func(batch []*call) {
		now := inFlight.Add(1)
		for {
			most := mostInFlight.Load()
			if now <= most || mostInFlight.CompareAndSwap(most, now) {
				break
			}
		}
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		for _, c := range batch {
			c.runs.Add(1)
			c.result = c.n * 2
		}
		inFlight.Add(-1)
	})
	all := make([]*call, calls)
	var wg sync.WaitGroup
	for i := range calls {
		all[i] = &call{n: i}
		wg.Go(func() {
			b.Do(all[i])
			require.Equal(t, 2*i, all[i].result, "the call's own result, in when Do returns")
		})
	}
	wg.Wait()
	for i, c := range all {
		require.Equal(t, int32(1), c.runs.Load(), "call %d", i)
	}
	total := 0
	for _, n := range sizes {
		require.LessOrEqual(t, n, maxBatch)
		total += n
	}
	require.Equal(t, calls, total)
	require.LessOrEqual(t, mostInFlight.Load(), int32(leaders))
	require.Zero(t, b.Waiting())
}

// A call allocates nothing of its own once the pools are warm: its
// waiting record, channel and the leader's batch slices are reused. Calls
// from many goroutines still each get their own result (the test above).
// Under the race detector (as CI runs it) sync.Pool drops a quarter of
// what it is given, so there a call allocates about one object, against
// three unpooled under it: the bound is between.
func TestACallAllocatesNothing(t *testing.T) {
	b := callbatch.New(2, 4, func(batch []*call) {
		for _, c := range batch {
			c.result = c.n * 2
		}
	})
	c := &call{n: 21}
	allocs := testing.AllocsPerRun(1000, func() {
		b.Do(c)
		if c.result != 42 {
			t.Fatalf("result %d", c.result)
		}
	})
	t.Logf("%.2f allocations per call", allocs)
	if raceEnabled {
		require.Less(t, allocs, 2.5, "pooled, a call allocates only what the race detector dropped")
		return
	}
	require.Zero(t, allocs)
}

// heldBatches returns Batches whose batches each wait until released, and
// report each batch's size as it starts.
func heldBatches(t *testing.T, leaders, maxBatch int, opts callbatch.Options) (b *callbatch.Batches[call], started chan int, release chan struct{}) {
	t.Helper()
	started, release = make(chan int, 100), make(chan struct{})
	b = callbatch.NewWith(leaders, maxBatch, opts, func(batch []*call) {
		started <- len(batch)
		<-release
		for _, c := range batch {
			c.runs.Add(1)
			c.result = c.n * 2
		}
	})
	return b, started, release
}

// goDo runs b.Do(c) in a goroutine that wg waits for.
func goDo(wg *sync.WaitGroup, b *callbatch.Batches[call], c *call) {
	wg.Go(func() { b.Do(c) })
}

// waitFor blocks until b holds n waiting calls: Eventually on the count,
// not a sleep.
func waitFor(t *testing.T, b *callbatch.Batches[call], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.Waiting() == n }, 10*time.Second, time.Millisecond)
}

// With MoreLeadersAt, a second batch goes out only once that many calls
// wait while one is in flight; fewer wait for the running leader, whose
// hand-off then sends them all in one batch. A lone call on an idle
// Batches still goes at once.
func TestMoreLeadersAtHoldsASecondBatchUntilWorthIt(t *testing.T) {
	b, started, release := heldBatches(t, 2, 64, callbatch.Options{MoreLeadersAt: 3})
	var wg sync.WaitGroup
	first := &call{n: 1}
	goDo(&wg, b, first)
	require.Equal(t, 1, <-started, "an idle Batches sends a lone call at once")
	more := []*call{{n: 2}, {n: 3}}
	for _, c := range more {
		goDo(&wg, b, c)
	}
	waitFor(t, b, 2)
	select {
	case n := <-started:
		t.Fatalf("a second batch of %d went out below the threshold", n)
	default:
	}
	third := &call{n: 4}
	goDo(&wg, b, third)
	require.Equal(t, 3, <-started, "the third waiting call makes a second leader, which takes all three")
	close(release)
	wg.Wait()
	for _, c := range append(more, first, third) {
		require.Equal(t, int32(1), c.runs.Load())
		require.Equal(t, 2*c.n, c.result)
	}
	require.Zero(t, b.Waiting())
}

// Below the threshold the waiting calls are not stranded: the running
// leader hands its role to the oldest of them when its batch ends.
func TestMoreLeadersAtHandsOffBelowTheThreshold(t *testing.T) {
	b, started, release := heldBatches(t, 2, 64, callbatch.Options{MoreLeadersAt: 10})
	var wg sync.WaitGroup
	goDo(&wg, b, &call{n: 1})
	require.Equal(t, 1, <-started)
	rest := []*call{{n: 2}, {n: 3}}
	for _, c := range rest {
		goDo(&wg, b, c)
	}
	waitFor(t, b, 2)
	release <- struct{}{}
	require.Equal(t, 2, <-started, "the finishing leader's successor takes both waiting calls")
	close(release)
	wg.Wait()
	for _, c := range rest {
		require.Equal(t, 2*c.n, c.result)
	}
}
