package queues

import (
	"context"
	"errors"
	"strconv"

	"github.com/bits-and-blooms/bloom/v3"
)

// BloomParameters gives a filter generation's size in bits (m) and hash
// count (k) for capacity items at false-positive rate fp.
func BloomParameters(capacity int, fp float64) (m, k uint) {
	return bloom.EstimateParameters(uint(capacity), fp)
}

// bloomLocations are an item's k bit locations in a filter of m bits,
// computed with bits-and-blooms/bloom/v3 so every frontend agrees.
func bloomLocations(item string, m, k uint) []uint64 {
	locations := bloom.Locations([]byte(item), k)
	for i := range locations {
		locations[i] %= uint64(m)
	}
	return locations
}

// BackfeedResult counts one backfeed batch.
type BackfeedResult struct {
	Received  int `json:"received"`
	New       int `json:"new"`
	Duplicate int `json:"duplicate"`
	Rejected  int `json:"rejected"`
}

// MaxBloomBatch is the most items one filter script takes; with a
// generation capacity of at least this many, a batch starts at most one
// new generation.
const MaxBloomBatch = 1000

// ErrBadSecret is the cause of a refused backfeed.
var ErrBadSecret = errors.New("wrong backfeed secret")

// Backfeed queues items grab scripts discovered into todo:backfeed (and its
// limit groups' sub-queues), skipping every item the project's Bloom filter
// has seen. secret must match the project's backfeed_secret.
func (e *Engine) Backfeed(ctx context.Context, slug, secret string, items []string) (BackfeedResult, error) {
	if secret == "" {
		return BackfeedResult{}, &Error{Op: "queues.Backfeed", Code: CodeBlocked, Message: "wrong backfeed secret", Err: ErrBadSecret}
	}
	return e.bloomAdd(ctx, slug, secret, QueueBackfeed, items)
}

// EnqueueRegistered queues items like Enqueue, and registers them in the
// Bloom filter, so backfeed never queues them again; items the filter has
// seen are skipped.
func (e *Engine) EnqueueRegistered(ctx context.Context, slug string, q Queue, items []string) (BackfeedResult, error) {
	return e.bloomAdd(ctx, slug, "", q, items)
}

func (e *Engine) bloomAdd(ctx context.Context, slug, secret string, q Queue, items []string) (BackfeedResult, error) {
	const op = "queues.bloomAdd"
	if err := ValidateSlug(slug); err != nil {
		return BackfeedResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	project, err := e.Project(ctx, slug)
	if err != nil {
		return BackfeedResult{}, err
	}
	result := BackfeedResult{Received: len(items)}
	valid := make([]string, 0, len(items))
	for _, item := range items {
		if ValidateItem(item) != nil {
			result.Rejected++
			continue
		}
		valid = append(valid, item)
	}
	m, k := BloomParameters(project.BloomCapacity, project.BloomFPRate)
	meta, err := e.rdb.HMGet(ctx, BloomMetaKey(slug), "m", "k", "gens").Result()
	if err != nil {
		return result, unavailable(op, err)
	}
	gens := 1
	if s, ok := meta[0].(string); ok {
		// An existing filter keeps its shape; settings apply to new projects.
		mm, _ := strconv.ParseUint(s, 10, 64)
		kk, _ := strconv.ParseUint(meta[1].(string), 10, 64)
		m, k = uint(mm), uint(kk)
		gens, _ = strconv.Atoi(meta[2].(string))
	}
	state, err := e.limitGroups(ctx, slug, false)
	if err != nil {
		return result, err
	}
	for start := 0; start < len(valid); {
		batch := valid[start:min(start+MaxBloomBatch, len(valid))]
		keys := []string{ConfigKey(slug), BloomMetaKey(slug), StatsKey(slug), ClaimsKey(slug), DoneKey(slug)}
		for g := 1; g <= gens+1; g++ {
			keys = append(keys, BloomKey(slug, g))
		}
		keys = append(keys, QueueKey(slug, q))
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, q, g.Name))
		}
		args := make([]any, 0, 6+len(batch)*(2+int(k)))
		args = append(args, secret, gens, m, k, project.BloomCapacity, state.version)
		for _, item := range batch {
			args = append(args, item, groupFor(state.groups, item)+2)
			for _, loc := range bloomLocations(item, m, k) {
				args = append(args, loc)
			}
		}
		code, rest, err := e.runScriptList(ctx, op, bloomAddScript, keys, args...)
		if err != nil {
			return result, err
		}
		switch code {
		case -1:
			return result, errorf(op, CodeProjectNotFound, "no project %q", slug)
		case -2:
			return result, &Error{Op: op, Code: CodeBlocked, Message: "wrong backfeed secret, or backfeed is off for this project", Err: ErrBadSecret}
		case -3:
			// Another frontend started a generation: take the filter's shape.
			gens, m, k = int(replyInt(rest[0])), uint(replyInt(rest[1])), uint(replyInt(rest[2]))
			continue
		case -4:
			if state, err = e.limitGroups(ctx, slug, true); err != nil {
				return result, err
			}
			continue
		}
		result.New += int(code)
		result.Duplicate += int(replyInt(rest[0]))
		gens = int(replyInt(rest[1]))
		start += len(batch)
	}
	return result, nil
}
