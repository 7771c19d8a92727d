package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// `hoard bench backfeed-flood` measures what a backfeed flood does to
// warriors (docs/warrior-api.md, "Backfeed"): claim+done pairs through the engine, once on
// a quiet Redis and once while grab scripts POST large batches, in
// alternating runs. Redis runs one script at a time, so every millisecond a
// backfeed script holds it is a millisecond every warrior waits; the pair
// latency's p99 during the flood is the figure that shows it.

type floodBenchOptions struct {
	warriors   int
	duration   time.Duration
	runs       int
	posts      int
	postItems  int
	items      int
	redisFsync string
}

func benchFloodCommand() *cobra.Command {
	var o floodBenchOptions
	cmd := &cobra.Command{
		Use:   "backfeed-flood",
		Short: "Warrior claim+done p50/p99 and pairs/s on a quiet Redis vs during a backfeed flood (concurrent 100k-item POSTs)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return benchFlood(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.IntVar(&o.warriors, "warriors", 32, "concurrent claim+done loops")
	f.DurationVar(&o.duration, "duration", 4*time.Second, "length of each quiet run (a flood run lasts as long as its POSTs)")
	f.IntVar(&o.runs, "runs", 3, "quiet and flood runs each; pair latencies are pooled, pairs/s is the median")
	f.IntVar(&o.posts, "posts", 3, "concurrent backfeed POSTs in each flood")
	f.IntVar(&o.postItems, "post-items", server.DefaultBackfeedItems, "new items in each POST (the endpoint takes at most 100,000)")
	f.IntVar(&o.items, "items", 500_000, "items queued for the warriors before the runs (a run that drains them fails)")
	f.StringVar(&o.redisFsync, "redis-fsync", "everysec", "the redis-server's appendfsync, as hoard serve runs it (AOF on, so its rewrites count); empty = AOF off")
	return cmd
}

// floodRun is one flood: the warriors' pairs, and what the flood itself did.
type floodRun struct {
	fsyncRun
	took        time.Duration
	slow        slowCommands
	aofRewrites int64
}

// floodSlowlogMicros is what SLOWLOG records during a run: any command
// longer than the per-script budget's order of magnitude.
const floodSlowlogMicros = 5000

// slowCommands counts the commands SLOWLOG recorded, by whose keys they
// touched: the backfeed project's (bloom_add.lua), the warriors' (claim and
// done), or neither. The quiet runs' count is the machine's own noise: on
// shared cores a command is slow also when redis-server waits for a CPU.
type slowCommands struct {
	count   map[string]int
	longest map[string]time.Duration
}

func (s *slowCommands) add(other slowCommands) {
	if s.count == nil {
		s.count, s.longest = map[string]int{}, map[string]time.Duration{}
	}
	for class, n := range other.count {
		s.count[class] += n
		s.longest[class] = max(s.longest[class], other.longest[class])
	}
}

func (s slowCommands) String() string {
	var parts []string
	for _, class := range []string{"backfeed", "warriors", "other"} {
		if s.count[class] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (longest %s)", class, s.count[class], millis(s.longest[class])))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// resetSlowlog starts recording commands over floodSlowlogMicros afresh.
func resetSlowlog(ctx context.Context, env *benchEnv) error {
	if err := env.rdb.ConfigSet(ctx, "slowlog-log-slower-than", strconv.Itoa(floodSlowlogMicros)).Err(); err != nil {
		return err
	}
	if err := env.rdb.ConfigSet(ctx, "slowlog-max-len", "100000").Err(); err != nil {
		return err
	}
	return env.rdb.Do(ctx, "SLOWLOG", "RESET").Err()
}

// readSlowlog classifies what SLOWLOG recorded since resetSlowlog.
func readSlowlog(ctx context.Context, env *benchEnv, warriorSlug, feedSlug string) (slowCommands, error) {
	entries, err := env.rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return slowCommands{}, err
	}
	slow := slowCommands{count: map[string]int{}, longest: map[string]time.Duration{}}
	for _, entry := range entries {
		args := strings.Join(entry.Args, " ")
		class := "other"
		switch {
		case strings.Contains(args, "{"+feedSlug+"}"):
			class = "backfeed"
		case strings.Contains(args, "{"+warriorSlug+"}"):
			class = "warriors"
		}
		slow.count[class]++
		slow.longest[class] = max(slow.longest[class], entry.Duration)
	}
	return slow, nil
}

func benchFlood(ctx context.Context, o floodBenchOptions) error {
	if o.runs < 1 || o.duration <= 0 || o.posts < 1 || o.postItems < 1 || o.warriors < 1 || o.items < 1 {
		return errors.New("--runs, --duration, --posts, --post-items, --warriors and --items must be positive")
	}
	env, err := startBenchEnv(ctx, benchOptions{redisFsync: o.redisFsync})
	if err != nil {
		return err
	}
	defer env.stop()
	const warriorSlug, feedSlug = "bench-warriors", "bench-flood"
	if err := env.fill(ctx, warriorSlug, o.items); err != nil {
		return err
	}
	secret := "floodsecret_" + env.token[:8]
	if _, err := env.engine.CreateProject(ctx, feedSlug, queues.SettingsPatch{BackfeedSecret: &secret}); err != nil {
		return err
	}
	project, err := env.engine.Project(ctx, feedSlug)
	if err != nil {
		return err
	}
	fmt.Printf("\nbackfeed flood: %d warriors claim+done through the engine, quiet vs while %d grab scripts each POST %d new items at once; Bloom filter of %d items at %g; %d runs each\n",
		o.warriors, o.posts, o.postItems, project.BloomCapacity, project.BloomFPRate, o.runs)

	var quiet []fsyncRun
	var floods []floodRun
	var quietSlow slowCommands
	for run := 0; run < o.runs; run++ {
		if err := resetSlowlog(ctx, env); err != nil {
			return err
		}
		q, err := claimDoneRun(ctx, env, warriorSlug, o.warriors, o.duration)
		if err != nil {
			return fmt.Errorf("quiet run: %w", err)
		}
		quiet = append(quiet, q)
		slow, err := readSlowlog(ctx, env, warriorSlug, feedSlug)
		if err != nil {
			return err
		}
		quietSlow.add(slow)
		fl, err := floodOnce(ctx, env, o, warriorSlug, feedSlug, secret, run)
		if err != nil {
			return fmt.Errorf("flood run: %w", err)
		}
		floods = append(floods, fl)
	}

	printPairs := func(label string, runs []fsyncRun) {
		rates := make([]float64, len(runs))
		var latencies []time.Duration
		for i, r := range runs {
			rates[i] = r.pairsPerSecond
			latencies = append(latencies, r.latencies...)
		}
		slices.Sort(rates)
		slices.Sort(latencies)
		fmt.Printf("  %-6s %7.0f pairs/s   pair latency p50 %s  p99 %s  max %s   (runs: %s)\n", label, rates[len(rates)/2],
			millis(percentile(latencies, 0.50)), millis(percentile(latencies, 0.99)), millis(percentile(latencies, 1)), formatRates(runs))
	}
	printPairs("quiet", quiet)
	pairs := make([]fsyncRun, len(floods))
	var took []string
	var floodSlow slowCommands
	var rewrites int64
	for i, fl := range floods {
		pairs[i] = fl.fsyncRun
		took = append(took, fmt.Sprintf("%.1f s", fl.took.Seconds()))
		floodSlow.add(fl.slow)
		rewrites += fl.aofRewrites
	}
	printPairs("flood", pairs)
	fmt.Printf("  each flood (%d x %d items) took %s; new items/s (median) %.0f; %d AOF rewrites in all\n", o.posts, o.postItems, strings.Join(took, ", "),
		float64(o.posts*o.postItems)/medianDuration(floods).Seconds(), rewrites)
	fmt.Printf("  Redis commands over %d ms (SLOWLOG), by whose keys: quiet runs: %s; floods: %s\n", floodSlowlogMicros/1000, quietSlow, floodSlow)
	return nil
}

func medianDuration(runs []floodRun) time.Duration {
	took := make([]time.Duration, len(runs))
	for i, r := range runs {
		took[i] = r.took
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// floodOnce runs the warriors while o.posts POSTs of o.postItems new items
// each arrive at once, and stops the warriors when the last POST is
// answered.
func floodOnce(ctx context.Context, env *benchEnv, o floodBenchOptions, warriorSlug, feedSlug, secret string, run int) (floodRun, error) {
	rewritesBefore, err := aofRewrites(ctx, env)
	if err != nil {
		return floodRun{}, err
	}
	if err := resetSlowlog(ctx, env); err != nil {
		return floodRun{}, err
	}
	bodies := make([][]byte, o.posts)
	for p := range bodies {
		var body bytes.Buffer
		for i := 0; i < o.postItems; i++ {
			fmt.Fprintf(&body, "url:https://example.org/flood/r%d/p%d/i%07d\x00", run, p, i)
		}
		bodies[p] = body.Bytes()
	}

	warriorCtx, stopWarriors := context.WithCancel(ctx)
	defer stopWarriors()
	type pairsResult struct {
		run fsyncRun
		err error
	}
	warriors := make(chan pairsResult, 1)
	go func() {
		r, err := claimDoneUntil(ctx, warriorCtx, env, warriorSlug, o.warriors)
		warriors <- pairsResult{r, err}
	}()

	url := env.url + "/backfeed/legacy/" + feedSlug + "-" + secret
	client := &http.Client{Timeout: 5 * time.Minute}
	errs := make([]error, o.posts)
	var wg sync.WaitGroup
	start := time.Now()
	for p, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				errs[p] = err
				return
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := client.Do(req)
			if err != nil {
				errs[p] = err
				return
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs[p] = fmt.Errorf("backfeed: HTTP %d: %s", resp.StatusCode, raw)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	stopWarriors()
	pairs := <-warriors
	if err := errors.Join(append(errs, pairs.err)...); err != nil {
		return floodRun{}, err
	}

	result := floodRun{fsyncRun: pairs.run, took: took}
	if result.slow, err = readSlowlog(ctx, env, warriorSlug, feedSlug); err != nil {
		return floodRun{}, err
	}
	rewritesAfter, err := aofRewrites(ctx, env)
	if err != nil {
		return floodRun{}, err
	}
	result.aofRewrites = rewritesAfter - rewritesBefore
	return result, nil
}

// aofRewrites is how many AOF rewrites the redis-server has run (INFO
// persistence's aof_rewrites; 0 with the AOF off).
func aofRewrites(ctx context.Context, env *benchEnv) (int64, error) {
	info, err := env.rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_rewrites:"); ok {
			return strconv.ParseInt(value, 10, 64)
		}
	}
	return 0, nil
}
