package callbatch_test

import (
	"sync"
	"sync/atomic"
	"testing"

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
func TestEveryCallRunsOnceWithinTheBounds(t *testing.T) {
	const leaders, maxBatch, calls = 3, 5, 500
	var inFlight, mostInFlight atomic.Int32
	var mu sync.Mutex
	var sizes []int
	b := callbatch.New(leaders, maxBatch, func(batch []*call) {
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
