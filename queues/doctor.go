package queues

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The claim and done scripts do not type-check every key on every call
// (that was most of their cost): the keys are only ever written by this
// package's scripts, which set them with their types. Doctor is the check
// an operator runs on demand (`hoard doctor <slug>`) when something wrote
// a project's keys from outside. A key of the wrong type makes a claim
// refuse (its pops undone, nothing lost) until it is repaired.

// KeyProblem is one key (or hash field) that the scripts cannot use.
type KeyProblem struct {
	Key     string `json:"key"`
	Problem string `json:"problem"`
}

// DoctorReport lists what Doctor checked and what it found.
type DoctorReport struct {
	Project     string       `json:"project"`
	KeysChecked int          `json:"keys_checked"`
	Problems    []KeyProblem `json:"problems"`
}

// Doctor checks the type of every key of a project the warrior path uses
// (its limit groups' sub-queues and the reserved queues included) and that
// every budget field is an integer.
func (e *Engine) Doctor(ctx context.Context, slug string) (DoctorReport, error) {
	const op = "queues.Doctor"
	if _, err := e.Project(ctx, slug); err != nil {
		return DoctorReport{}, err
	}
	want := map[string]string{
		LegacyOutKey(slug): "zset", DeadlinesKey(slug): "zset", ClaimsKey(slug): "hash", DoneKey(slug): "set",
		BudgetKey(slug): "hash", ExtrasKey(slug): "hash", StatsKey(slug): "hash", BlockedKey(slug): "hash",
		ReleasedKey(slug): "hash", RecentDoneKey(slug): "zset", EventsKey(slug): "stream",
		QueueKey(slug, QueueScored): "zset", ReservedSetKey(slug): "set", RedoCancelledKey(slug): "hash",
		QueuedKey(slug): "set", LogKey(slug): "list", DoneArchiveKey(slug): "list",
		FailedKey(slug): "hash", HistoryKey(slug): "hash", BatchesKey(slug): "hash", BatchDeadlinesKey(slug): "zset",
		DownloaderBytesKey(slug): "hash", DownloaderItemsKey(slug): "hash", DownloaderVersionKey(slug): "hash",
		DomainBytesKey(slug): "hash", RateKey(slug): "string", ExpiryCursorKey(slug): "string",
		HourlyKey(slug, e.clock.Now()): "hash", SeriesMinuteKey(slug, e.clock.Now()): "hash",
		SeriesHourKey(slug, e.clock.Now()): "hash", SeriesDownloaderKey(slug, e.clock.Now()): "hash",
	}
	for _, q := range SharedQueues {
		want[QueueKey(slug, q)] = "list"
	}
	state, err := e.limitGroups(ctx, slug, true)
	if err != nil {
		return DoctorReport{}, err
	}
	groups := make([]string, 0, len(state.groups)+len(state.removed))
	for _, g := range state.groups {
		groups = append(groups, g.Name)
	}
	groups = append(groups, state.removed...)
	for _, g := range groups {
		for _, q := range SharedQueues {
			want[GroupQueueKey(slug, q, g)] = "list"
		}
		want[GroupRateKey(slug, g)] = "string"
	}
	reserved, err := e.rdb.SMembers(ctx, ReservedSetKey(slug)).Result()
	if err != nil && err != redis.Nil {
		return DoctorReport{}, unavailable(op, err)
	}
	for _, d := range reserved {
		want[ReservedQueueKey(slug, d)] = "list"
	}
	keys := make([]string, 0, len(want))
	pipe := e.rdb.Pipeline()
	types := make([]*redis.StatusCmd, 0, len(want))
	for key := range want {
		keys = append(keys, key)
		types = append(types, pipe.Type(ctx, key))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return DoctorReport{}, unavailable(op, err)
	}
	report := DoctorReport{Project: slug, KeysChecked: len(keys)}
	for i, key := range keys {
		have := types[i].Val()
		if have != "none" && have != want[key] {
			report.Problems = append(report.Problems, KeyProblem{Key: key, Problem: "is a " + have + ", not a " + want[key]})
		}
	}
	slices.SortFunc(report.Problems, func(a, b KeyProblem) int { return strings.Compare(a.Key, b.Key) })
	if types[slices.Index(keys, BudgetKey(slug))].Val() == "hash" {
		budget, err := e.rdb.HGetAll(ctx, BudgetKey(slug)).Result()
		if err != nil {
			return DoctorReport{}, unavailable(op, err)
		}
		for downloader, v := range budget {
			if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				report.Problems = append(report.Problems, KeyProblem{Key: BudgetKey(slug), Problem: "field " + downloader + " is not an integer"})
			}
		}
	}
	// The counts of the claim batches are HINCRBY'd after a done's first
	// write: one that is not an integer would stop it there.
	if types[slices.Index(keys, BatchesKey(slug))].Val() == "hash" {
		var cursor uint64
		for {
			fields, next, err := e.rdb.HScan(ctx, BatchesKey(slug), cursor, "", 1000).Result()
			if err != nil {
				return DoctorReport{}, unavailable(op, err)
			}
			for i := 0; i+1 < len(fields); i += 2 {
				if strings.HasPrefix(fields[i], "i") {
					continue
				}
				if _, err := strconv.ParseInt(fields[i+1], 10, 64); err != nil {
					report.Problems = append(report.Problems, KeyProblem{Key: BatchesKey(slug), Problem: "field " + fields[i] + " is not an integer"})
				}
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return report, nil
}
