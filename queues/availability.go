package queues

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Availability is whether a warrior asking a project now would get work:
// what projects.json's auto_project is chosen by, so idle warriors go
// where there is work.
type Availability struct {
	Paused bool `json:"paused"`
	// Waiting counts the items any warrior may be handed now: every queue
	// but the reserved ones, and a limit group's items only while its rate
	// has room.
	Waiting int64 `json:"waiting"`
	// SpareRate says the project's request limit has room: a request now
	// would not be refused for the rate (always true without a limit).
	SpareRate bool `json:"spare_rate"`
}

// Open reports whether the project has work, is not paused and has rate
// to spare.
func (a Availability) Open() bool { return !a.Paused && a.Waiting > 0 && a.SpareRate }

// Availability reads whether a warrior asking slug now would get work:
// its counts, and the limiters' states (the GCRA times claim.lua keeps),
// without touching them.
func (e *Engine) Availability(ctx context.Context, slug string) (Availability, error) {
	const op = "queues.Availability"
	project, err := e.Project(ctx, slug)
	if err != nil {
		return Availability{}, err
	}
	counts, err := e.Counts(ctx, slug)
	if err != nil {
		return Availability{}, err
	}
	groups := groupStats(ctx, e, slug, project.LimitGroups)
	pipe := e.rdb.Pipeline()
	projectTAT := pipe.Get(ctx, RateKey(slug))
	groupTATs := make([]*redis.StringCmd, len(groups))
	for i, g := range groups {
		groupTATs[i] = pipe.Get(ctx, GroupRateKey(slug, g.Name))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return Availability{}, unavailable(op, err)
	}
	now := float64(e.nowMillis())
	a := Availability{Paused: project.Paused, SpareRate: hasRoom(projectTAT.Val(), now, project.RatePerMinute, project.RateBurst)}
	a.Waiting = counts.TodoTotal() - counts.Reserved
	for i, g := range groups {
		if g.RatePerMinute <= 0 || !hasRoom(groupTATs[i].Val(), now, g.RatePerMinute, g.Burst) {
			a.Waiting -= g.Queued
		}
	}
	a.Waiting = max(0, a.Waiting)
	return a, nil
}

// hasRoom reads a GCRA limiter's stored time the way claim.lua does and
// reports whether at least half its burst (and at least one request) would
// pass now: a limiter running at its cap has no rate to spare for more
// warriors, even if the odd request still gets through. No limit (rate 0)
// always has room.
func hasRoom(stored string, now, ratePerMinute float64, burst int) bool {
	if ratePerMinute <= 0 {
		return true
	}
	period := 60000 / ratePerMinute
	tat, _ := strconv.ParseFloat(stored, 64)
	if tat < now {
		tat = now
	}
	tokens := float64(max(1, burst)) - (tat-now)/period
	return tokens >= max(1, float64(burst)/2)
}
