package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
)

type offloadBenchOptions struct {
	items        int
	bytesItems   int
	memoryCap    int64
	above        int
	segment      int
	claimers     int
	enqueuers    int
	skipScaleRun bool
}

func benchOffloadCommand() *cobra.Command {
	var o offloadBenchOptions
	cmd := &cobra.Command{
		Use:   "offload",
		Short: "Redis bytes per queued item with and without offload, and a scale run that queues --items under a used_memory cap while claims are served",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := startBenchEnv(cmd.Context(), benchOptions{})
			if err != nil {
				return err
			}
			defer env.stop()
			if err := benchOffloadBytes(cmd.Context(), env, o); err != nil {
				return err
			}
			if o.skipScaleRun {
				return nil
			}
			return benchOffloadScale(cmd.Context(), env, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.items, "items", 3_000_000, "items the scale run queues (100000000 for the issue's scale)")
	f.IntVar(&o.bytesItems, "bytes-items", 2_000_000, "items queued to measure bytes per item (a tenth stay in Redis with offload)")
	f.Int64Var(&o.memoryCap, "memory-cap", 512<<20, "Redis maxmemory (noeviction) for the scale run, in bytes: a write past it fails the run")
	f.IntVar(&o.above, "offload-above", 1_000_000, "the project's offload_above")
	f.IntVar(&o.segment, "offload-segment", 100_000, "the project's offload_segment")
	f.IntVar(&o.claimers, "claimers", 4, "concurrent claim+done loops (multi=100) during the scale run")
	f.IntVar(&o.enqueuers, "enqueuers", 2, "concurrent enqueue loops (batches of 10,000)")
	f.BoolVar(&o.skipScaleRun, "bytes-only", false, "measure bytes per item only")
	return cmd
}

func benchItemName(i int) string { return fmt.Sprintf("https://example.org/user/%09d", i) }

func usedMemory(ctx context.Context, env *benchEnv) (int64, error) {
	info, err := env.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}

func dirBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

func enqueueRange(ctx context.Context, env *benchEnv, slug string, from, to int) error {
	batch := make([]queues.QueueItem, 0, 10_000)
	for i := from; i < to; i++ {
		batch = append(batch, queues.QueueItem{Name: benchItemName(i)})
		if len(batch) == cap(batch) || i == to-1 {
			if _, err := env.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// benchOffloadBytes queues the same items into a project without offload
// and one with it, and reports Redis's used_memory growth per item.
func benchOffloadBytes(ctx context.Context, env *benchEnv, o offloadBenchOptions) error {
	n := o.bytesItems
	fmt.Printf("\nRedis bytes per queued item: %d items of ~33-char URLs, used_memory growth / items\n", n)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := filepath.Join(env.dir, "offload-bytes")
	offloader := &queues.Offloader{Engine: env.engine, Dir: dir, Node: "bench", Logger: quiet}
	for _, offload := range []bool{false, true} {
		if err := env.rdb.FlushAll(ctx).Err(); err != nil {
			return err
		}
		slug := "bytes-plain"
		patch := queues.SettingsPatch{}
		// A tenth of the items stay in Redis, the rest go to disk.
		above := max(n/10, 2*o.segment)
		if offload {
			slug = "bytes-offload"
			patch = queues.SettingsPatch{OffloadAbove: &above, OffloadSegment: &o.segment}
		}
		if _, err := env.engine.CreateProject(ctx, slug, patch); err != nil {
			return err
		}
		before, err := usedMemory(ctx, env)
		if err != nil {
			return err
		}
		if err := enqueueRange(ctx, env, slug, 0, n); err != nil {
			return err
		}
		if offload {
			if err := offloader.RunOnce(ctx); err != nil {
				return err
			}
		}
		after, err := usedMemory(ctx, env)
		if err != nil {
			return err
		}
		counts, err := env.engine.Counts(ctx, slug)
		if err != nil {
			return err
		}
		if counts.Todo != int64(n) {
			return fmt.Errorf("%s counts %d waiting items, want %d", slug, counts.Todo, n)
		}
		perItem := float64(after-before) / float64(n)
		if offload {
			disk := dirBytes(dir)
			fmt.Printf("  with offload (offload_above %d): %6.1f B of Redis per item (%d of %d items on disk, %.1f B per offloaded item in gzip segments)\n",
				above, perItem, counts.Offloaded, n, float64(disk)/float64(max(counts.Offloaded, 1)))
		} else {
			fmt.Printf("  without offload:                   %6.1f B of Redis per item\n", perItem)
		}
	}
	return env.rdb.FlushAll(ctx).Err()
}

// claimStallThreshold is the gap between served claims reported as a stall.
const claimStallThreshold = time.Second

// claimStalls tracks the gaps between claims that got items, across every
// claimer.
type claimStalls struct {
	mu         sync.Mutex
	last       time.Time     // the latest served claim (or the start)
	longest    time.Duration // the longest gap
	longestEnd time.Duration // when it ended, from the start
	count      int           // gaps of claimStallThreshold or more
}

func (s *claimStalls) served(now, start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !now.After(s.last) {
		return
	}
	gap := now.Sub(s.last)
	s.last = now
	if gap >= claimStallThreshold {
		s.count++
	}
	if gap > s.longest {
		s.longest, s.longestEnd = gap, now.Sub(start)
	}
}

// benchOffloadScale queues o.items items while claim+done loops run,
// under a Redis maxmemory cap with noeviction: a write that would pass the
// cap fails, and so fails the run.
func benchOffloadScale(ctx context.Context, env *benchEnv, o offloadBenchOptions) error {
	fmt.Printf("\nscale run: %d items queued by %d enqueuers (batches of 10,000) under maxmemory %d MiB (noeviction), offload_above %d, %d claim+done loops (multi=100), done_mode count\n",
		o.items, o.enqueuers, o.memoryCap>>20, o.above, o.claimers)
	if err := env.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(o.memoryCap, 10)).Err(); err != nil {
		return err
	}
	if err := env.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return err
	}
	defer env.rdb.ConfigSet(context.WithoutCancel(ctx), "maxmemory", "0")
	const slug = "scale"
	maxMulti := 100
	doneMode := queues.DoneCount
	if _, err := env.engine.CreateProject(ctx, slug, queues.SettingsPatch{
		OffloadAbove: &o.above, OffloadSegment: &o.segment, DoneMode: &doneMode, MaxMulti: &maxMulti,
	}); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := filepath.Join(env.dir, "offload-scale")
	offloader := &queues.Offloader{Engine: env.engine, Dir: dir, Node: "bench", Interval: 50 * time.Millisecond, Logger: quiet}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := offloader.Start(runCtx); err != nil {
		return err
	}
	defer offloader.Stop()

	var peak atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // used_memory sampler
		defer wg.Done()
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			if used, err := usedMemory(runCtx, env); err == nil && used > peak.Load() {
				peak.Store(used)
			}
			select {
			case <-runCtx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	var claimed, empty atomic.Int64
	var latMu sync.Mutex
	var latencies []time.Duration
	start := time.Now()
	stalls := &claimStalls{last: start}
	claimErr := make(chan error, o.claimers)
	for c := range o.claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := "bench" + strconv.Itoa(c)
			var mine []time.Duration
			defer func() {
				latMu.Lock()
				latencies = append(latencies, mine...)
				latMu.Unlock()
			}()
			for runCtx.Err() == nil {
				began := time.Now()
				res, err := env.engine.Claim(runCtx, queues.ClaimRequest{Project: slug, Downloader: who, IP: "127.0.0.1", Count: 100})
				if queues.CodeOf(err) == queues.CodeNoItem {
					// Counted: "served throughout" must be shown, not assumed.
					empty.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err != nil {
					if runCtx.Err() == nil {
						claimErr <- err
					}
					return
				}
				now := time.Now()
				mine = append(mine, now.Sub(began))
				stalls.served(now, start)
				names := make([]string, len(res.Items))
				for i, it := range res.Items {
					names[i] = it.Name
				}
				if _, err := env.engine.Done(runCtx, queues.DoneRequest{Project: slug, Downloader: who, Items: names}); err != nil {
					if runCtx.Err() == nil {
						claimErr <- err
					}
					return
				}
				claimed.Add(int64(len(names)))
			}
		}()
	}

	var queued atomic.Int64
	progressDone := make(chan struct{})
	go func() {
		ticker := time.NewTicker(10 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-ticker.C:
				fmt.Printf("  ... %d queued, %d claimed, peak used_memory %.1f MiB, %s\n",
					queued.Load(), claimed.Load(), float64(peak.Load())/(1<<20), time.Since(start).Round(time.Second))
			}
		}
	}()
	enqueueErr := make(chan error, o.enqueuers)
	var enq sync.WaitGroup
	per := (o.items + o.enqueuers - 1) / o.enqueuers
	for e := range o.enqueuers {
		enq.Add(1)
		go func() {
			defer enq.Done()
			for from := e * per; from < min((e+1)*per, o.items); from += 100_000 {
				to := min(from+100_000, (e+1)*per, o.items)
				if err := enqueueRange(runCtx, env, slug, from, to); err != nil {
					enqueueErr <- err
					return
				}
				queued.Add(int64(to - from))
			}
		}()
	}
	enq.Wait()
	elapsed := time.Since(start)
	stalls.served(time.Now(), start) // a stall running to the end counts too
	close(progressDone)
	cancel()
	wg.Wait()
	offloader.Stop()
	select {
	case err := <-enqueueErr:
		return fmt.Errorf("enqueue failed (a write past maxmemory fails here): %w", err)
	case err := <-claimErr:
		return fmt.Errorf("claim failed: %w", err)
	default:
	}
	counts, err := env.engine.Counts(ctx, slug)
	if err != nil {
		return err
	}
	if got := counts.TodoTotal() + counts.Out + counts.Done; got != int64(o.items) {
		return fmt.Errorf("items counted %d (waiting %d, out %d, done %d), want %d", got, counts.TodoTotal(), counts.Out, counts.Done, o.items)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	fmt.Printf("  queued %d items in %s (%.0f items/s); peak used_memory %.1f MiB of the %d MiB cap\n",
		o.items, elapsed.Round(time.Second), float64(o.items)/elapsed.Seconds(), float64(peak.Load())/(1<<20), o.memoryCap>>20)
	fmt.Printf("  claims served: %d items in %d claims, claim latency p50 %s p99 %s\n",
		claimed.Load(), len(latencies), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond))
	fmt.Printf("  empty replies (no item): %d of %d claim requests; longest time without a served claim %s (ending %s into the run); %d stalls of %s or more\n",
		empty.Load(), empty.Load()+int64(len(latencies)), stalls.longest.Round(time.Millisecond), stalls.longestEnd.Round(time.Second),
		stalls.count, claimStallThreshold)
	fmt.Printf("  at the end: %d waiting (%d on disk in %.0f MiB of segments), %d out, %d done; all %d accounted for\n",
		counts.TodoTotal(), counts.Offloaded, float64(dirBytes(dir))/(1<<20), counts.Out, counts.Done, o.items)
	return nil
}
