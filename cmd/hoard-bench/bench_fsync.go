package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/queues"
)

// `hoard bench fsync` prices appendfsync always against everysec
// (docs/durability.md): claim+done pairs through the engine, the Redis work one
// warrior's request and done cost, on two supervised redis-servers with the
// AOF on, one per policy, measured in alternating runs so that whatever else
// the machine does falls on both.

type fsyncBenchOptions struct {
	callers  []int
	duration time.Duration
	runs     int
	items    int
	dir      string
}

var fsyncBenchPolicies = []localredis.FsyncPolicy{localredis.FsyncEverySec, localredis.FsyncAlways}

func benchFsyncCommand() *cobra.Command {
	var o fsyncBenchOptions
	cmd := &cobra.Command{
		Use:   "fsync",
		Short: "Claim+done pairs per second with appendfsync everysec vs always, and the ratio of the medians",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return benchFsync(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.callers, "warriors", []int{32, 1}, "concurrent claim+done loops, one figure each (1 shows what a lone warrior waits for)")
	f.DurationVar(&o.duration, "duration", 3*time.Second, "length of each run")
	f.IntVar(&o.runs, "runs", 5, "runs per policy; the median is reported")
	// Every run of every --warriors figure claims from one fill: on a quiet
	// machine 32 warriors take ~35k pairs/s with everysec, ~530k items in 5
	// runs of 3 s, and the lone warrior's runs ~90k more, which 600,000
	// did not cover (make bench at 5e7864e); 1,500,000 leaves twice that.
	f.IntVar(&o.items, "items", 1_500_000, "items queued on each server before the runs (a run that drains them fails)")
	f.StringVar(&o.dir, "dir", "", "directory on the disk to measure (the AOFs go there); default: the system temp dir, which on tmpfs makes fsync free")
	return cmd
}

// fsyncRun is one measured run: pairs per second and each pair's latency.
type fsyncRun struct {
	pairsPerSecond float64
	latencies      []time.Duration
}

func benchFsync(ctx context.Context, o fsyncBenchOptions) error {
	if o.runs < 1 || o.duration <= 0 || o.items < 1 || len(o.callers) == 0 || slices.Min(o.callers) < 1 {
		return errors.New("--runs, --duration, --items and every --warriors must be positive")
	}
	dir := o.dir
	if dir == "" {
		dir = os.TempDir()
	}
	fsName := filesystemName(dir)
	fmt.Printf("\nappendfsync everysec vs always: claim+done pairs through the engine, %d runs of %s per figure, AOF in %s (%s), auto AOF rewrite off\n",
		o.runs, o.duration, dir, fsName)
	if fsName == "tmpfs" {
		fmt.Println("  WARNING: tmpfs has no disk behind it, so fsync costs nothing here; pass --dir on the disk hoard's data dir lives on")
	}
	const slug = "bench-fsync"
	envs := make([]*benchEnv, len(fsyncBenchPolicies))
	for i, policy := range fsyncBenchPolicies {
		env, err := startBenchEnv(ctx, benchOptions{redisFsync: string(policy), tempDir: o.dir, noAOFRewrite: true})
		if err != nil {
			return err
		}
		defer env.stop()
		// The figure is only worth its label if the server runs the policy.
		got, err := env.rdb.ConfigGet(ctx, "appendfsync").Result()
		if err != nil {
			return err
		}
		if got["appendfsync"] != string(policy) {
			return fmt.Errorf("redis-server started for %s runs appendfsync %q", policy, got["appendfsync"])
		}
		if err := env.fill(ctx, slug, o.items); err != nil {
			return err
		}
		envs[i] = env
	}

	for _, callers := range o.callers {
		if err := fsyncFigure(ctx, envs, slug, callers, o); err != nil {
			return err
		}
	}
	return nil
}

// fsyncFigure measures both policies with callers loops and prints them
// with the ratio of their medians.
func fsyncFigure(ctx context.Context, envs []*benchEnv, slug string, callers int, o fsyncBenchOptions) error {
	fmt.Printf("  %d warrior(s):\n", callers)
	runs := make([][]fsyncRun, len(fsyncBenchPolicies))
	for run := 0; run < o.runs; run++ {
		for k := range fsyncBenchPolicies {
			i := (k + run) % len(fsyncBenchPolicies) // alternate which goes first
			result, err := claimDoneRun(ctx, envs[i], slug, callers, o.duration)
			if err != nil {
				return fmt.Errorf("%s: %w", fsyncBenchPolicies[i], err)
			}
			runs[i] = append(runs[i], result)
		}
	}
	medians := make([]float64, len(fsyncBenchPolicies))
	for i, policy := range fsyncBenchPolicies {
		rates := make([]float64, len(runs[i]))
		var latencies []time.Duration
		for j, r := range runs[i] {
			rates[j] = r.pairsPerSecond
			latencies = append(latencies, r.latencies...)
		}
		slices.Sort(rates)
		slices.Sort(latencies)
		medians[i] = rates[len(rates)/2]
		fmt.Printf("    %-9s %8.0f pairs/s   pair latency p50 %s  p99 %s   (runs: %s)\n", policy, medians[i],
			millis(percentile(latencies, 0.50)), millis(percentile(latencies, 0.99)), formatRates(runs[i]))
	}
	fmt.Printf("    always / everysec  %.2f (ratio of the medians)\n", medians[1]/medians[0])
	return nil
}

// claimDoneRun claims one item and reports it done, from callers loops
// for duration.
func claimDoneRun(ctx context.Context, env *benchEnv, slug string, callers int, duration time.Duration) (fsyncRun, error) {
	stop, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	return claimDoneUntil(ctx, stop, env, slug, callers)
}

// claimDoneUntil claims one item and reports it done, from callers loops,
// until stop ends. Every loop finishes the pair it is in and makes at least
// one, under ctx, and the rate is over the time to the last: on a loaded
// machine (or with appendfsync always on a busy disk) a pair can take longer
// than a short run, and cutting it off made a figure of 0 pairs/s, which is
// no measurement at all.
func claimDoneUntil(ctx, stop context.Context, env *benchEnv, slug string, callers int) (fsyncRun, error) {
	var pairs atomic.Int64
	var firstErr error
	var once sync.Once
	latencies := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			downloader := fmt.Sprintf("warrior%03d", w)
			for {
				began := time.Now()
				if err := claimDonePair(ctx, env.engine, slug, downloader); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				latencies[w] = append(latencies[w], time.Since(began))
				pairs.Add(1)
				if stop.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fsyncRun{}, firstErr
	}
	return fsyncRun{pairsPerSecond: float64(pairs.Load()) / time.Since(start).Seconds(), latencies: slices.Concat(latencies...)}, nil
}

func claimDonePair(ctx context.Context, engine *queues.Engine, slug, downloader string) error {
	claim, err := engine.Claim(ctx, queues.ClaimRequest{Project: slug, Downloader: downloader, IP: "127.0.0.1", Count: 1})
	if queues.CodeOf(err) == queues.CodeNoItem {
		return fmt.Errorf("the queued items ran out; raise --items: %w", err)
	}
	if err != nil {
		return err
	}
	_, err = engine.Done(ctx, queues.DoneRequest{Project: slug, Downloader: downloader, Items: []string{claim.Items[0].Name},
		Bytes: map[string]int64{"data": 1000}})
	return err
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func formatRates(runs []fsyncRun) string {
	figs := make([]runFigure, len(runs))
	for i, r := range runs {
		figs[i] = runFigure{roundTrips: r.pairsPerSecond}
	}
	return describeRuns(figs)
}
