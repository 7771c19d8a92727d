package queues

import (
	"context"
	"encoding/json"
	"errors"
)

// Filter drops the items that match it on every way in (admin add,
// backfeed, import): an item type, a glob or an RE2 expression, in the
// limit groups' syntax and checked by their matcher. Matching happens on
// the frontend, against its cached copy of the list (groupState); the
// scripts refuse a batch sifted by a stale copy (filters_version), as they
// do for limit groups.
type Filter struct {
	Name string `json:"name"`
	// Exactly one of Type, Glob and Regex is set.
	Type  string `json:"type,omitempty"`
	Glob  string `json:"glob,omitempty"`
	Regex string `json:"regex,omitempty"`
}

// MaxFilters caps a project's filters: each is tried on every item queued.
const MaxFilters = 64

func compileFilters(filters []Filter) ([]compiledGroup, error) {
	groups := make([]LimitGroup, len(filters))
	for i, f := range filters {
		groups[i] = LimitGroup{Name: f.Name, Type: f.Type, Glob: f.Glob, Regex: f.Regex}
	}
	return compileMatchers("queues.Filters", "filter", MaxFilters, groups)
}

func decodeFilters(raw string) []Filter {
	var filters []Filter
	if raw != "" {
		_ = json.Unmarshal([]byte(raw), &filters)
	}
	return filters
}

// filtered reports whether an item matches one of the filters.
func (s *groupState) filtered(item string) bool {
	for _, f := range s.filters {
		if f.matches(item) {
			return true
		}
	}
	return false
}

// Filters lists a project's filters.
func (e *Engine) Filters(ctx context.Context, slug string) ([]Filter, error) {
	filters, _, err := e.filtersAt(ctx, slug)
	return filters, err
}

// filtersAt is the project's filters and the filters_version they are.
func (e *Engine) filtersAt(ctx context.Context, slug string) ([]Filter, string, error) {
	const op = "queues.Filters"
	if err := ValidateSlug(slug); err != nil {
		return nil, "", err
	}
	values, err := e.rdb.HMGet(ctx, ConfigKey(slug), "filters", "created_at", "filters_version").Result()
	if err != nil {
		return nil, "", unavailable(op, err)
	}
	if values[1] == nil {
		return nil, "", errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	raw, _ := values[0].(string)
	filters := decodeFilters(raw)
	if filters == nil {
		filters = []Filter{}
	}
	version, _ := values[2].(string)
	if version == "" {
		version = "0"
	}
	return filters, version, nil
}

// SetFilters replaces a project's filters (checked first: a bad one
// changes nothing) and bumps filters_version, so every frontend's enqueue
// is refused until it reads the new list.
func (e *Engine) SetFilters(ctx context.Context, slug string, filters []Filter) error {
	_, err := e.setFilters(ctx, slug, filters, "")
	return err
}

// setFilters writes the list if filters_version is still from (any when
// ""); written is false when it changed in between.
func (e *Engine) setFilters(ctx context.Context, slug string, filters []Filter, from string) (written bool, err error) {
	const op = "queues.SetFilters"
	if err := ValidateSlug(slug); err != nil {
		return false, err
	}
	compiled, err := compileFilters(filters)
	if err != nil {
		return false, err
	}
	stored := make([]Filter, len(compiled))
	for i, c := range compiled {
		stored[i] = Filter{Name: c.Name, Type: c.Type, Glob: c.Glob, Regex: c.Regex}
	}
	raw, _ := json.Marshal(stored)
	n, err := e.runScriptInt(ctx, op, configWriteScript, []string{ConfigKey(slug)}, "filters", from, "filters", string(raw))
	if err != nil {
		return false, err
	}
	switch n {
	case -1:
		return false, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case -2:
		return false, nil
	}
	return true, nil
}

// changeFilters applies change to the list as it is now and writes the
// result only if no one changed the list in between, re-reading and
// trying again otherwise, so concurrent adds and removes all land.
func (e *Engine) changeFilters(ctx context.Context, op, slug string, change func([]Filter) ([]Filter, error)) error {
	for range 100 {
		filters, version, err := e.filtersAt(ctx, slug)
		if err != nil {
			return err
		}
		next, err := change(filters)
		if err != nil {
			return err
		}
		written, err := e.setFilters(ctx, slug, next, version)
		if err != nil || written {
			return err
		}
	}
	return errorf(op, CodeUnavailable, "project %q's filters kept changing; try again", slug)
}

// AddFilter adds one filter to a project's list.
func (e *Engine) AddFilter(ctx context.Context, slug string, f Filter) error {
	return e.changeFilters(ctx, "queues.AddFilter", slug, func(filters []Filter) ([]Filter, error) {
		return append(filters, f), nil
	})
}

// RemoveFilter removes the filter named name.
func (e *Engine) RemoveFilter(ctx context.Context, slug, name string) error {
	const op = "queues.RemoveFilter"
	return e.changeFilters(ctx, op, slug, func(filters []Filter) ([]Filter, error) {
		kept := filters[:0:0]
		for _, f := range filters {
			if f.Name != name {
				kept = append(kept, f)
			}
		}
		if len(kept) == len(filters) {
			return nil, errorf(op, CodeInvalid, "project %q has no filter named %q", slug, name)
		}
		return kept, nil
	})
}

// SiftFilters drops the queued items the project's filters match from
// every queue in Redis: the shared queues and their limit groups'
// sub-queues, the downloaders' reserved queues and the score-ordered
// queue, beside live traffic and without a lock. A list is sifted by
// filter_sift.lua (pops a page, drops the matches, rotates the rest to the
// tail), one pass over its length at the start; the score-ordered queue by
// filter_sift_scored.lua over a ZSCAN. Dropped items are counted in
// items_filtered. Items in offloaded segments are not read here: refill.lua
// drops them when they come back. Moved in the result counts the dropped
// items.
func (e *Engine) SiftFilters(ctx context.Context, slug string) (SiftResult, error) {
	const op = "queues.SiftFilters"
	if _, _, err := e.filtersAt(ctx, slug); err != nil {
		return SiftResult{}, err // a bad slug or no such project
	}
	known, err := e.rdb.SMembers(ctx, GroupsKnownKey(slug)).Result()
	if err != nil {
		return SiftResult{}, unavailable(op, err)
	}
	reserved, err := e.rdb.SMembers(ctx, ReservedSetKey(slug)).Result()
	if err != nil {
		return SiftResult{}, unavailable(op, err)
	}
	var sources []string
	for _, q := range SharedQueues {
		sources = append(sources, QueueKey(slug, q))
		for _, g := range known {
			sources = append(sources, GroupQueueKey(slug, q, g))
		}
	}
	for _, downloader := range reserved {
		sources = append(sources, ReservedQueueKey(slug, downloader))
	}
	var total SiftResult
	for _, source := range sources {
		r, err := e.siftFiltersFrom(ctx, op, slug, source)
		total.Moved += r.Moved
		total.Scanned += r.Scanned
		if err != nil {
			return total, err
		}
	}
	r, err := e.siftFiltersScored(ctx, op, slug)
	total.Moved += r.Moved
	total.Scanned += r.Scanned
	return total, err
}

// siftFiltersScored drops the filtered items of the score-ordered queue.
// ZSCAN returns every item present for the whole scan at least once, so a
// match waiting there from start to end is dropped; one rescored or added
// meanwhile was filtered on its way in.
func (e *Engine) siftFiltersScored(ctx context.Context, op, slug string) (SiftResult, error) {
	var result SiftResult
	state, err := e.limitGroups(ctx, slug, true)
	if err != nil || len(state.filters) == 0 {
		return result, err
	}
	keys := []string{ConfigKey(slug), QueueKey(slug, QueueScored), StatsKey(slug), ExtrasKey(slug)}
	var cursor uint64
	for {
		if err := ctx.Err(); err != nil {
			return result, err
		}
		page, next, err := e.rdb.ZScan(ctx, QueueKey(slug, QueueScored), cursor, "", 1000).Result()
		if err != nil {
			return result, unavailable(op, err)
		}
		var drop []string
		for i := 0; i < len(page); i += 2 { // member, score
			result.Scanned++
			if state.filtered(page[i]) {
				drop = append(drop, page[i])
			}
		}
		for attempt := 0; len(drop) > 0; attempt++ {
			if attempt == 3 {
				return result, unavailable(op, errors.New("the project's filters kept changing"))
			}
			args := []any{state.filtersVersion}
			for _, item := range drop {
				args = append(args, item)
			}
			code, _, err := e.runScriptList(ctx, op, scoredSiftScript, keys, args...)
			if err != nil {
				return result, err
			}
			switch code {
			case codeNoProject:
				return result, errorf(op, CodeProjectNotFound, "no project %q", slug)
			case codeStaleGroups:
				// Decide the page again with the filters as they are now.
				if state, err = e.limitGroups(ctx, slug, true); err != nil {
					return result, err
				}
				kept := drop[:0]
				for _, item := range drop {
					if state.filtered(item) {
						kept = append(kept, item)
					}
				}
				drop = kept
				continue
			}
			result.Moved += int(code) // {dropped}: the count is the status
			drop = nil
		}
		if cursor = next; cursor == 0 {
			return result, nil
		}
	}
}

func (e *Engine) siftFiltersFrom(ctx context.Context, op, slug, source string) (SiftResult, error) {
	const page = 1000
	var result SiftResult
	length, err := e.rdb.LLen(ctx, source).Result()
	if err != nil {
		return result, unavailable(op, err)
	}
	state, err := e.limitGroups(ctx, slug, true)
	if err != nil {
		return result, err
	}
	if len(state.filters) == 0 {
		return result, nil
	}
	keys := []string{ConfigKey(slug), source, QueuedKey(slug), StatsKey(slug), ExtrasKey(slug)}
	for int64(result.Scanned) < length {
		if err := ctx.Err(); err != nil {
			return result, err
		}
		want := min(int64(page), length-int64(result.Scanned))
		items, err := e.rdb.LRange(ctx, source, 0, want-1).Result()
		if err != nil {
			return result, unavailable(op, err)
		}
		if len(items) == 0 {
			return result, nil
		}
		args := []any{state.filtersVersion, len(items)}
		for _, item := range items {
			d := 0
			if state.filtered(item) {
				d = 1
			}
			args = append(args, item, d)
		}
		stale, empty, err := e.applySiftPage(ctx, op, slug, filterSiftScript, keys, args, &result)
		if err != nil || empty {
			return result, err
		}
		if stale {
			if state, err = e.limitGroups(ctx, slug, true); err != nil {
				return result, err
			}
		}
	}
	return result, nil
}
