package reaper

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func isNil(err error) bool { return errors.Is(err, redis.Nil) }

// Counts are the reaper's counts: the torrents in each state at the last
// run, and the steps done since the start.
type Counts struct {
	CountedAt time.Time `json:"counted_at"` // the run that counted the states; zero before the first
	// States at CountedAt.
	NeverInitial    int64 `json:"never_initial"`
	NeverFinal      int64 `json:"never_final"`
	UnseededInitial int64 `json:"unseeded_initial"`
	UnseededFinal   int64 `json:"unseeded_final"`
	ClaimWindows    int64 `json:"claim_windows"`   // reseeded, window still open
	RewardsWaiting  int64 `json:"rewards_waiting"` // torrents whose claims wait for their rewards
	// Steps done, in all.
	InitialDone int64 `json:"initial_done"`
	FinalDone   int64 `json:"final_done"`
	Removed     int64 `json:"removed"`
	Invited     int64 `json:"invited"`
	Claims      int64 `json:"claims"`
	Rewards     int64 `json:"rewards"`
	Extensions  int64 `json:"extensions"`
	Notices     int64 `json:"notices"`
}

// stateCounts are the names of the per-state gauges a run replaces.
var stateCounts = []string{"never_initial", "never_final", "unseeded_initial", "unseeded_final", "claim_windows", "rewards_waiting"}

// Counts reads the counts.
func (r *Reaper) Counts(ctx context.Context) (Counts, error) {
	m, err := r.rdb.HGetAll(ctx, btstore.ReaperCountsKey).Result()
	if err != nil {
		return Counts{}, fmt.Errorf("reaper.Counts: %w", err)
	}
	n := func(name string) int64 { v, _ := strconv.ParseInt(m[name], 10, 64); return v }
	c := Counts{
		NeverInitial: n("never_initial"), NeverFinal: n("never_final"),
		UnseededInitial: n("unseeded_initial"), UnseededFinal: n("unseeded_final"),
		ClaimWindows: n("claim_windows"), RewardsWaiting: n("rewards_waiting"),
		InitialDone: n("initial_done"), FinalDone: n("final_done"), Removed: n("removed"), Invited: n("invited"),
		Claims: n("claims"), Rewards: n("rewards"), Extensions: n("extensions"), Notices: n("notices"),
	}
	if ms := n("counted_at"); ms > 0 {
		c.CountedAt = time.UnixMilli(ms).UTC()
	}
	return c, nil
}

// count adds to a step counter; a failure is logged (a count, never a
// step, may be lost).
func (r *Reaper) count(ctx context.Context, name string, by int64) {
	if by == 0 {
		return
	}
	if err := r.rdb.HIncrBy(ctx, btstore.ReaperCountsKey, name, by).Err(); err != nil {
		r.cfg.Logger.Warn("reaper: counting failed", "count", name, "error", err)
	}
}

// storeCounts replaces the per-state gauges with a run's.
func (r *Reaper) storeCounts(ctx context.Context, now time.Time, counts map[string]int64) {
	fields := []any{"counted_at", now.UnixMilli()}
	for _, name := range stateCounts {
		fields = append(fields, name, counts[name])
	}
	if err := r.rdb.HSet(ctx, btstore.ReaperCountsKey, fields...).Err(); err != nil {
		r.cfg.Logger.Warn("reaper: storing the state counts failed", "error", err)
	}
}
