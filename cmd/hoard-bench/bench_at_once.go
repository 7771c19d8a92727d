package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hoardproject/hoard/internal/btloadgen"
)

// atOnceRuns runs both trackers at the same time, o.atOnce times: each
// takes half of --concurrency for --duration, and then both settle. The
// runs in turn (on, off, off, on, ...) compare two half-minutes of a
// machine whose speed swings by a third from one minute to the next on
// this project's 2-core KVM (one configuration's runs spread from 7.6k
// to 12.5k announces/s in one invocation in s50, 9.4k to 13k in s51); at once, both
// trackers meet the same moments. Each tracker still has its own Redis
// and process, and the two share the machine's cores as they share the
// load: a tracker that costs more CPU an announce answers fewer of its
// half. Returns each run's on and off (targets[0] and targets[1]).
func (o *privateBenchOptions) atOnceRuns(ctx context.Context, mode btloadgen.Mode, targets []*privateTarget) ([][2]announceRun, error) {
	var out [][2]announceRun
	for run := range o.atOnce {
		var both [2]announceRun
		errs := make([]error, len(targets))
		var wg sync.WaitGroup
		for i, t := range targets {
			cfg := o.loadConfig(mode, t.addr(mode), 0, o.duration)
			cfg.Concurrency = o.concurrency / 2
			wg.Go(func() {
				errs[i] = t.sitePolling(ctx, func() (err error) {
					both[i], err = measureAnnounceRun(ctx, cfg, t.announceTarget, t.redis, "")
					return err
				})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("%s at once, run %d: %w", mode, run+1, err)
		}
		for i, t := range targets {
			wg.Go(func() {
				errs[i] = o.settle(ctx, t, &both[i])
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("%s at once, run %d: %w", mode, run+1, err)
		}
		for i, t := range targets {
			r := both[i]
			n := float64(max(r.res.Announces, 1))
			fmt.Printf("  at once %d %-14s %-14s %s; done %s after: %.0f/s with it; per announce plugin %.1f us, redis %.1f us\n",
				run+1, mode, t.name, r.res, r.settled.Round(time.Millisecond), settledRate(r),
				float64(r.peerCPU.Microseconds())/n, float64(r.redisCPU.Microseconds())/n)
		}
		out = append(out, both)
	}
	return out, nil
}

// atOnceRatios is the median over at-once runs of on's rate over off's in
// the same run, and each run's ratio as text.
func atOnceRatios(runs [][2]announceRun, rate func(announceRun) float64) (float64, string) {
	on := make([]announceRun, len(runs))
	off := make([]announceRun, len(runs))
	for i, both := range runs {
		on[i], off[i] = both[0], both[1]
	}
	return pairedRatios(on, off, rate)
}
