package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/queues"
)

// The pattern-limit benchmark of issue 3: 90% of todo matches a pattern
// limited to a trickle, 32 warriors request single items. It compares
//   - baseline: an unlimited queue holding only the remainder (the 10%);
//   - hoard: the same remainder beside the 90% routed to a limit group;
//   - random-then-filter: the Archiveteam tracker's way (seed 004), which
//     claims N random items and filters out the limited ones, run here as a
//     Lua script on the same Redis so only the method differs.

const (
	// Every run refills these (9 fills in all), so they are the command's
	// time; the remainder is still 5 times what the baseline's 32 claimers
	// take in a 5 s run (about 4,000 items/s).
	limitBenchLimited   = 900_000
	limitBenchRemainder = 100_000
	limitBenchRate      = 60.0 // limited items per minute
)

type limitFigure struct {
	requests, served, remainder, limited int64
	seconds                              float64
}

func (f limitFigure) irsr() float64 { return float64(f.served) / float64(max(f.requests, 1)) }
func (f limitFigure) remainderPerSecond() float64 {
	return float64(f.remainder) / f.seconds
}

func benchLimits(ctx context.Context, env *benchEnv, o benchOptions) error {
	fmt.Printf("\npattern limits: %d%% of %d items match a group limited to %.0f/min; %d warriors claim one item per request; %d runs of %s\n",
		90, limitBenchLimited+limitBenchRemainder, limitBenchRate, o.warriors, o.runs, o.duration)
	scenarios := []struct {
		name string
		run  func(context.Context, *benchEnv, benchOptions, int) (limitFigure, error)
	}{
		{"baseline (remainder only, no limit)", limitRunBaseline},
		{"hoard (limit group sub-queue)", limitRunHoard},
		{"claim-N-random-then-filter (N=1)", limitRunRandomFilter},
	}
	var baseline limitFigure
	for i, sc := range scenarios {
		var figures []limitFigure
		for run := 0; run < o.runs; run++ {
			if err := env.rdb.FlushAll(ctx).Err(); err != nil {
				return err
			}
			fig, err := sc.run(ctx, env, o, run)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			figures = append(figures, fig)
		}
		med := medianLimit(figures)
		if i == 0 {
			baseline = med
		}
		fmt.Printf("  %-38s IRSR %6.2f%%  remainder %8.0f items/s  limited %5d items  (IRSR runs: %s)\n",
			sc.name, 100*med.irsr(), med.remainderPerSecond(), med.limited, describeIRSR(figures))
		if i > 0 {
			fmt.Printf("  %-38s IRSR %.3f x baseline, remainder throughput %.3f x baseline\n", "",
				med.irsr()/baseline.irsr(), med.remainderPerSecond()/baseline.remainderPerSecond())
		}
	}
	return nil
}

func limitItemName(limited bool, i int) string {
	if limited {
		return fmt.Sprintf("url:https://huge.example/page/%09d", i)
	}
	return fmt.Sprintf("url:https://small.example/page/%09d", i)
}

func fillLimitProject(ctx context.Context, env *benchEnv, slug string, limited, remainder int, groups bool) error {
	if _, err := env.engine.CreateProject(ctx, slug, queues.SettingsPatch{}); err != nil {
		return err
	}
	if groups {
		if _, err := env.engine.SetLimitGroups(ctx, slug, []queues.LimitGroup{
			{Name: "huge", Glob: "url:https://huge.example/*", RatePerMinute: limitBenchRate, Burst: 1},
		}); err != nil {
			return err
		}
	}
	// Interleaved, 9 limited to 1 remainder, as a real queue would be.
	batch := make([]queues.QueueItem, 0, 10000)
	li, ri := 0, 0
	for li < limited || ri < remainder {
		if ri < remainder && (li >= limited || (li+ri)%10 == 9) {
			batch = append(batch, queues.QueueItem{Name: limitItemName(false, ri)})
			ri++
		} else {
			batch = append(batch, queues.QueueItem{Name: limitItemName(true, li)})
			li++
		}
		if len(batch) == cap(batch) {
			if _, err := env.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		_, err := env.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, batch)
		return err
	}
	return nil
}

// claimLoop runs claim from o.warriors goroutines for o.duration and counts
// requests, served requests and items by kind.
func claimLoop(ctx context.Context, o benchOptions, claim func(ctx context.Context, worker int) ([]string, error)) (limitFigure, error) {
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var requests, served, remainder, limited atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.warriors; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				items, err := claim(runCtx, w)
				if err != nil {
					if runCtx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				requests.Add(1)
				if len(items) > 0 {
					served.Add(1)
				}
				for _, it := range items {
					if strings.Contains(it, "huge.example") {
						limited.Add(1)
					} else {
						remainder.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return limitFigure{}, firstErr
	}
	return limitFigure{requests: requests.Load(), served: served.Load(), remainder: remainder.Load(),
		limited: limited.Load(), seconds: time.Since(start).Seconds()}, nil
}

func engineClaim(env *benchEnv, slug string) func(context.Context, int) ([]string, error) {
	return func(ctx context.Context, w int) ([]string, error) {
		res, err := env.engine.Claim(ctx, queues.ClaimRequest{Project: slug, Downloader: fmt.Sprintf("warrior%03d", w), IP: "127.0.0.1", Count: 1})
		if queues.CodeOf(err) == queues.CodeNoItem {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		names := make([]string, len(res.Items))
		for i, it := range res.Items {
			names[i] = it.Name
		}
		return names, nil
	}
}

func limitRunBaseline(ctx context.Context, env *benchEnv, o benchOptions, run int) (limitFigure, error) {
	slug := fmt.Sprintf("limits-base-%d", run)
	if err := fillLimitProject(ctx, env, slug, 0, limitBenchRemainder, false); err != nil {
		return limitFigure{}, err
	}
	return claimLoop(ctx, o, engineClaim(env, slug))
}

func limitRunHoard(ctx context.Context, env *benchEnv, o benchOptions, run int) (limitFigure, error) {
	slug := fmt.Sprintf("limits-hoard-%d", run)
	if err := fillLimitProject(ctx, env, slug, limitBenchLimited, limitBenchRemainder, true); err != nil {
		return limitFigure{}, err
	}
	return claimLoop(ctx, o, engineClaim(env, slug))
}

// randomFilterScript is the claim-N-random-then-filter method: SPOP N
// random items, keep those the pattern limit allows (a GCRA per minute for
// the limited pattern), put the rest back, and record the claims.
var randomFilterScript = luascript.FromSource(`
local now, n, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local picked = redis.call('SPOP', KEYS[1], n)
local out, back = {}, {}
for _, item in ipairs(picked) do
  local limited = string.find(item, 'url:https://huge.example/', 1, true) == 1
  local ok = true
  if limited then
    local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
    if tat < now then tat = now end
    if tat > now then ok = false else redis.call('SET', KEYS[2], tat + period) end
  end
  if ok then out[#out + 1] = item else back[#back + 1] = item end
end
if #back > 0 then redis.call('SADD', KEYS[1], unpack(back)) end
for _, item in ipairs(out) do
  redis.call('ZADD', KEYS[3], now, item)
  redis.call('HSET', KEYS[4], item, '1 ' .. now .. ' ' .. ARGV[4] .. ' 127.0.0.1 -')
end
return out`)

func limitRunRandomFilter(ctx context.Context, env *benchEnv, o benchOptions, run int) (limitFigure, error) {
	tag := fmt.Sprintf("{limits-random-%d}", run)
	set, rate, out, claims := tag+":todo", tag+":rate", tag+":out", tag+":claims"
	batch := make([]any, 0, 10000)
	for i := 0; i < limitBenchLimited+limitBenchRemainder; i++ {
		batch = append(batch, limitItemName(i%10 != 9, i))
		if len(batch) == cap(batch) {
			if err := env.rdb.SAdd(ctx, set, batch...).Err(); err != nil {
				return limitFigure{}, err
			}
			batch = batch[:0]
		}
	}
	period := 60000 / limitBenchRate
	return claimLoop(ctx, o, func(ctx context.Context, w int) ([]string, error) {
		return randomFilterScript.Run(ctx, env.rdb, []string{set, rate, out, claims},
			time.Now().UnixMilli(), 1, period, fmt.Sprintf("warrior%03d", w)).StringSlice()
	})
}

func medianLimit(figs []limitFigure) limitFigure {
	sorted := append([]limitFigure(nil), figs...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[j].irsr() < sorted[i].irsr() {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	return sorted[len(sorted)/2]
}

func describeIRSR(figs []limitFigure) string {
	parts := make([]string, len(figs))
	for i, f := range figs {
		parts[i] = fmt.Sprintf("%.2f%%", 100*f.irsr())
	}
	return strings.Join(parts, " ")
}
