package queues_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// BenchmarkClaimDone measures one claim script plus one done script per
// item, from parallel callers, on each real backend.
func BenchmarkClaimDone(b *testing.B) {
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) { benchClaimDone(b, backend, queues.SettingsPatch{}) })
	}
}

// BenchmarkClaimDoneWithEventLog is BenchmarkClaimDone on a project whose
// event log is on (as a plugin's project has it): the difference is what
// the durable host-to-plugin event costs per done, inside the done
// script. docs/at-least-once.md compares it with the outbox's append.
func BenchmarkClaimDoneWithEventLog(b *testing.B) {
	events := queues.DefaultPluginEventLog
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) { benchClaimDone(b, backend, queues.SettingsPatch{EventLog: &events}) })
	}
}

func benchClaimDone(b *testing.B, backend redistest.Backend, settings queues.SettingsPatch) {
	ctx := context.Background()
	if err := redistest.Flush(ctx, backend); err != nil {
		b.Fatal(err)
	}
	engine := queues.NewEngine(backend.Client, queues.Options{Logger: quietLogger})
	if _, err := engine.CreateProject(ctx, "bench", settings); err != nil {
		b.Fatal(err)
	}
	items := make([]queues.QueueItem, 0, 10000)
	for i := 0; i < b.N+1000; i++ {
		items = append(items, queues.QueueItem{Name: fmt.Sprintf("item-%09d", i)})
		if len(items) == cap(items) {
			if _, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, items); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	if _, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, items); err != nil {
		b.Fatal(err)
	}
	var worker atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		downloader := fmt.Sprintf("bench%03d", worker.Add(1))
		for pb.Next() {
			res, err := engine.Claim(ctx, queues.ClaimRequest{Project: "bench", Downloader: downloader, IP: "127.0.0.1", Count: 1})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := engine.Done(ctx, queues.DoneRequest{Project: "bench", Downloader: downloader,
				Items: []string{res.Items[0].Name}, Bytes: map[string]int64{"data": 1000}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkItemStatusOffloaded measures the public item status of an item
// found in no Redis place, with 200,000 items on disk in 100 segments:
// the cost of searching every segment's index (two pipelined rounds), per
// request, on each real backend.
func BenchmarkItemStatusOffloaded(b *testing.B) {
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			if err := redistest.Flush(ctx, backend); err != nil {
				b.Fatal(err)
			}
			engine := queues.NewEngine(backend.Client, queues.Options{Logger: quietLogger})
			above, segment := 4000, 2000
			if _, err := engine.CreateProject(ctx, "bench", queues.SettingsPatch{OffloadAbove: &above, OffloadSegment: &segment}); err != nil {
				b.Fatal(err)
			}
			batch := make([]queues.QueueItem, 10_000)
			for n := range 20 {
				for i := range batch {
					batch[i] = queues.QueueItem{Name: fmt.Sprintf("bench:%02d:%05d", n, i)}
				}
				if _, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, batch); err != nil {
					b.Fatal(err)
				}
			}
			o := &queues.Offloader{Engine: engine, Dir: b.TempDir(), Node: "bench", Logger: quietLogger}
			for range 3 { // at most 64 segments a pass
				if err := o.RunOnce(ctx); err != nil {
					b.Fatal(err)
				}
			}
			segments, err := o.Segments(ctx, "bench")
			if err != nil || len(segments) < 90 {
				b.Fatalf("%d segments (%v)", len(segments), err)
			}
			for i := 0; b.Loop(); i++ {
				s, err := engine.ItemStatus(ctx, "bench", fmt.Sprintf("never:%d", i))
				if err != nil || s.State != queues.StateUnknown {
					b.Fatalf("%+v %v", s, err)
				}
			}
		})
	}
}

// BenchmarkMultiClaimDone measures seesaw's multi=N round trip through
// the engine: 32 callers each claim N items, then report those N done, as
// `hoard-bench warrior-path`'s multi100 scenario does over HTTP (and
// keepalive with N=1). It reports the process's allocations and bytes per
// item (-benchmem's are per round trip). With HOARD_BENCH_CALLGRIND_PID
// naming a redis-server under `valgrind --tool=callgrind
// --instr-atstart=no` (and HOARD_TEST_REDIS_URL pointing at it,
// HOARD_TEST_CLUSTER=0), the claims and the dones are dumped as two parts
// (docs/warrior-path.md).
func BenchmarkMultiClaimDone(b *testing.B) {
	const callers = 32
	for _, backend := range redistest.Backends() {
		for _, multi := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/multi=%d", backend.Name, multi), func(b *testing.B) { benchMultiClaimDone(b, backend, multi, callers) })
		}
	}
}

func benchMultiClaimDone(b *testing.B, backend redistest.Backend, multi, callers int) {
	ctx := context.Background()
	if err := redistest.Flush(ctx, backend); err != nil {
		b.Fatal(err)
	}
	engine := queues.NewEngine(backend.Client, queues.Options{Logger: quietLogger})
	maxMulti := queues.MaxMulti
	if _, err := engine.CreateProject(ctx, "bench", queues.SettingsPatch{MaxMulti: &maxMulti}); err != nil {
		b.Fatal(err)
	}
	rounds := (b.N + callers - 1) / callers
	items := make([]queues.QueueItem, 0, 10000)
	for i := 0; i < rounds*callers*multi+multi; i++ {
		items = append(items, queues.QueueItem{Name: fmt.Sprintf("bench/item/%09d", i)})
		if len(items) == cap(items) {
			if _, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, items); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	if _, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, items); err != nil {
		b.Fatal(err)
	}
	// Each caller claims its rounds, then reports them done: the
	// two parts can be counted apart (callgrind) and the claims
	// hash holds what 32 warriors' round trips leave out.
	claimed := make([][][]string, callers)
	each := func(part func(w int, downloader string) error) {
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := part(w, fmt.Sprintf("bench%03d", w)); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	dump := redistest.CountRedisInstructions(b)
	each(func(w int, downloader string) error {
		for range rounds {
			res, err := engine.Claim(ctx, queues.ClaimRequest{Project: "bench", Downloader: downloader, IP: "127.0.0.1", Count: multi})
			if err != nil {
				return err
			}
			if len(res.Items) != multi {
				return fmt.Errorf("claimed %d items, want %d", len(res.Items), multi)
			}
			names := make([]string, multi)
			for i, item := range res.Items {
				names[i] = item.Name
			}
			claimed[w] = append(claimed[w], names)
		}
		return nil
	})
	claimsWall := dump()
	dump = redistest.CountRedisInstructions(b)
	each(func(w int, downloader string) error {
		for _, names := range claimed[w] {
			res, err := engine.Done(ctx, queues.DoneRequest{Project: "bench", Downloader: downloader,
				Items: names, Bytes: map[string]int64{"data": 1000}})
			if err != nil {
				return err
			}
			if res.New != multi {
				return fmt.Errorf("done: %d new, want %d", res.New, multi)
			}
		}
		return nil
	})
	donesWall := dump()
	b.StopTimer()
	if claimsWall > 0 {
		// By which Redis's idle timers are taken off each part's count.
		b.ReportMetric(claimsWall.Seconds(), "claims-wall-s")
		b.ReportMetric(donesWall.Seconds(), "dones-wall-s")
	}
	runtime.ReadMemStats(&after)
	n := float64(rounds * callers * multi)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/item")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/item")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "us/item")
}

// BenchmarkBackfeedNew backfeeds batches of 1,000 new items (as the
// warrior-path backfeed scenario's senders post them) through the engine,
// one batch per b.N, and reports the cost per new item. With
// HOARD_BENCH_CALLGRIND_PID naming a redis-server under `valgrind
// --tool=callgrind --instr-atstart=no` (HOARD_TEST_REDIS_URL pointing at
// it, HOARD_TEST_CLUSTER=0), the timed part is dumped as one callgrind part,
// whose instructions divided by b.N*1000 are Redis's per new item.
func BenchmarkBackfeedNew(b *testing.B) {
	for _, backend := range redistest.Backends() {
		for _, kind := range []string{queues.BloomKindBlocked, queues.BloomKindSets} {
			b.Run(backend.Name+"/"+kind, func(b *testing.B) { benchmarkBackfeedNew(b, backend, kind) })
		}
	}
}

// benchmarkBackfeedNew is BenchmarkBackfeedNew for one backend and one
// bloom_kind.
func benchmarkBackfeedNew(b *testing.B, backend redistest.Backend, kind string) {
	ctx := context.Background()
	if err := redistest.Flush(ctx, backend); err != nil {
		b.Fatal(err)
	}
	engine := queues.NewEngine(backend.Client, queues.Options{Logger: quietLogger})
	secret := "bench_secret"
	patch := queues.SettingsPatch{BackfeedSecret: &secret, BloomKind: &kind}
	// The first batch creates the filter's generation and grows its
	// string to nearly its full size (1,000 random words reach within
	// 0.1% of its end); keep both out. Counted in, the growth's
	// zero-filling and copying were 6-9k instructions per new item, more
	// the larger the generation: a cost a filter pays once, in its
	// first few thousand items, not per item. A sets generation's cost
	// grows with its buckets' fill instead (a longer intset to search,
	// move and grow): it is measured half full, its mean over its life,
	// in a generation of 100k items (313 buckets) holding 50k.
	warm := 1000
	if kind == queues.BloomKindSets {
		capacity := 100_000
		patch.BloomCapacity = &capacity
		warm = capacity / 2
	}
	if _, err := engine.CreateProject(ctx, "bench", patch); err != nil {
		b.Fatal(err)
	}
	for start := 0; start < warm; start += 1000 {
		warmUp := make([]string, 1000)
		for j := range warmUp {
			warmUp[j] = fmt.Sprintf("url:https://example.org/warm-up/i%06d", start+j)
		}
		if _, err := engine.Backfeed(ctx, "bench", secret, warmUp); err != nil {
			b.Fatal(err)
		}
	}
	batches := make([][]string, b.N)
	for i := range batches {
		batches[i] = make([]string, 1000)
		for j := range batches[i] {
			batches[i][j] = fmt.Sprintf("url:https://example.org/b%06d/i%06d", i, j)
		}
	}
	b.ResetTimer()
	dump := redistest.CountRedisInstructions(b)
	for _, batch := range batches {
		res, err := engine.Backfeed(ctx, "bench", secret, batch)
		if err != nil {
			b.Fatal(err)
		}
		if res.New != len(batch) {
			b.Fatalf("%d new of %d", res.New, len(batch))
		}
	}
	wall := dump()
	b.StopTimer()
	if wall > 0 {
		b.ReportMetric(wall.Seconds(), "wall-s")
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*1000), "us/item")
}

// BenchmarkScriptCeiling is `hoard-bench script`'s ceiling in the harness
// of BenchmarkMultiClaimDone: the cheapest script that touches a key of
// the project's slot, from 32 callers through a batcher like the engine's.
// With HOARD_BENCH_CALLGRIND_PID its calls are dumped as one part, so the
// instructions per call of claim_plain.lua, done_plain.lua and the ceiling
// come from one harness (docs/warrior-path.md).
func BenchmarkScriptCeiling(b *testing.B) {
	const callers = 32
	ceiling := luascript.FromSource(`return redis.call('EXISTS', KEYS[1])`)
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			if err := redistest.Flush(ctx, backend); err != nil {
				b.Fatal(err)
			}
			batcher := luascript.NewBatcher(backend.Client, queues.WarriorPathLeaders, queues.WarriorPathBatch)
			keys := []string{queues.ConfigKey("bench")}
			// Loaded before the count, as the claims' scripts are by the
			// fill's enqueues and the first claims.
			if _, err := batcher.Run(ctx, ceiling, keys); err != nil {
				b.Fatal(err)
			}
			rounds := (b.N + callers - 1) / callers
			b.ResetTimer()
			dump := redistest.CountRedisInstructions(b)
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						if _, err := batcher.Run(ctx, ceiling, keys); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			wall := dump()
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			if wall > 0 {
				b.ReportMetric(wall.Seconds(), "calls-wall-s")
			}
		})
	}
}
