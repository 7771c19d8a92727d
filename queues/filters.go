package queues

import (
	"context"
	"encoding/json"
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
	const op = "queues.Filters"
	if err := ValidateSlug(slug); err != nil {
		return nil, err
	}
	values, err := e.rdb.HMGet(ctx, ConfigKey(slug), "filters", "created_at").Result()
	if err != nil {
		return nil, unavailable(op, err)
	}
	if values[1] == nil {
		return nil, errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	raw, _ := values[0].(string)
	filters := decodeFilters(raw)
	if filters == nil {
		filters = []Filter{}
	}
	return filters, nil
}

// SetFilters replaces a project's filters (checked first: a bad one
// changes nothing) and bumps filters_version, so every frontend's enqueue
// is refused until it reads the new list.
func (e *Engine) SetFilters(ctx context.Context, slug string, filters []Filter) error {
	const op = "queues.SetFilters"
	if err := ValidateSlug(slug); err != nil {
		return err
	}
	compiled, err := compileFilters(filters)
	if err != nil {
		return err
	}
	stored := make([]Filter, len(compiled))
	for i, c := range compiled {
		stored[i] = Filter{Name: c.Name, Type: c.Type, Glob: c.Glob, Regex: c.Regex}
	}
	raw, _ := json.Marshal(stored)
	n, err := e.runScriptInt(ctx, op, configWriteScript, []string{ConfigKey(slug)}, "filters", "filters", string(raw))
	if err != nil {
		return err
	}
	if n < 0 {
		return errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	return nil
}

// AddFilter adds one filter to a project's list.
func (e *Engine) AddFilter(ctx context.Context, slug string, f Filter) error {
	filters, err := e.Filters(ctx, slug)
	if err != nil {
		return err
	}
	return e.SetFilters(ctx, slug, append(filters, f))
}

// RemoveFilter removes the filter named name.
func (e *Engine) RemoveFilter(ctx context.Context, slug, name string) error {
	const op = "queues.RemoveFilter"
	filters, err := e.Filters(ctx, slug)
	if err != nil {
		return err
	}
	kept := filters[:0:0]
	for _, f := range filters {
		if f.Name != name {
			kept = append(kept, f)
		}
	}
	if len(kept) == len(filters) {
		return errorf(op, CodeInvalid, "project %q has no filter named %q", slug, name)
	}
	return e.SetFilters(ctx, slug, kept)
}
