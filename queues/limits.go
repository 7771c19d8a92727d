package queues

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// groupState is one frontend's cached copy of a project's limit groups. The
// claim and enqueue scripts compare its version with the config's, so a
// stale copy is caught and refreshed, never silently used.
type groupState struct {
	version string
	groups  []compiledGroup
	// removed are groups no longer configured whose sub-queues may still
	// hold items until a re-route empties them; claims serve them without
	// limit, so nothing is ever stranded.
	removed []string
	// filters drop matching items on the way in; filtersVersion is the
	// config's filters_version they were read at.
	filters        []compiledGroup
	filtersVersion string
}

// groupCache holds groupState per project slug.
type groupCache struct {
	mu     sync.Mutex
	states map[string]*groupState
}

func (e *Engine) limitGroups(ctx context.Context, slug string, refresh bool) (*groupState, error) {
	e.groupCache.mu.Lock()
	state, ok := e.groupCache.states[slug]
	e.groupCache.mu.Unlock()
	if ok && !refresh {
		return state, nil
	}
	pipe := e.rdb.Pipeline()
	config := pipe.HMGet(ctx, ConfigKey(slug), "limit_groups", "limit_groups_version", "created_at", "filters", "filters_version")
	knownCmd := pipe.SMembers(ctx, GroupsKnownKey(slug))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, unavailable("queues.limitGroups", err)
	}
	values := config.Val()
	if values[2] == nil {
		// No such project: nothing to cache (slugs come from clients),
		// and the scripts answer "no such project" themselves.
		return &groupState{version: "0", filtersVersion: "0"}, nil
	}
	raw, _ := values[0].(string)
	version, _ := values[1].(string)
	if version == "" {
		version = "0"
	}
	groups, err := compileGroups(decodeGroups(raw))
	if err != nil {
		// Stored groups were validated when set; a bad copy means damage.
		return nil, unavailable("queues.limitGroups", err)
	}
	rawFilters, _ := values[3].(string)
	filtersVersion, _ := values[4].(string)
	if filtersVersion == "" {
		filtersVersion = "0"
	}
	filters, err := compileFilters(decodeFilters(rawFilters))
	if err != nil {
		return nil, unavailable("queues.limitGroups", err)
	}
	state = &groupState{version: version, groups: groups, filters: filters, filtersVersion: filtersVersion}
	current := map[string]bool{}
	for _, g := range groups {
		current[g.Name] = true
	}
	for _, name := range knownCmd.Val() {
		if !current[name] {
			state.removed = append(state.removed, name)
		}
	}
	e.groupCache.mu.Lock()
	if e.groupCache.states == nil {
		e.groupCache.states = map[string]*groupState{}
	}
	e.groupCache.states[slug] = state
	e.groupCache.mu.Unlock()
	return state, nil
}

// claimKeys builds the claim script's KEYS and the group part of its ARGV.
func claimKeys(project *warriorKeys, slug, downloader, ip, globalBlock string, now time.Time, state *groupState) ([]string, []any) {
	ngroups := len(state.groups) + len(state.removed)
	keys := make([]string, len(project.claim), len(project.claim)+5*ngroups+len(project.claimTail))
	copy(keys, project.claim)
	keys[claimKeyReserved] = ReservedQueueKey(slug, downloader)
	keys[claimKeyDownloaderRate] = DownloaderRateKey(slug, downloader)
	keys[claimKeyIPRate] = IPRateKey(slug, ip)
	keys[claimKeyHourly] = HourlyKey(slug, now)
	args := make([]any, 0, 2+3*(len(state.groups)+len(state.removed)))
	args = append(args, globalBlock, state.version)
	addGroup := func(name, rate string, burst int) {
		for _, q := range SharedQueues {
			keys = append(keys, GroupQueueKey(slug, q, name))
		}
		keys = append(keys, GroupRateKey(slug, name))
		args = append(args, rate, burst, name)
	}
	for _, g := range state.groups {
		addGroup(g.Name, strconv.FormatFloat(g.RatePerMinute, 'f', -1, 64), g.Burst)
	}
	for _, name := range state.removed {
		addGroup(name, "-1", 1)
	}
	return append(keys, project.claimTail...), args
}

// SetLimitGroups replaces a project's limit groups and, when their
// matchers changed, re-routes the items already queued (see Reroute).
func (e *Engine) SetLimitGroups(ctx context.Context, slug string, groups []LimitGroup) (SiftResult, error) {
	rerouteNeeded, err := e.UpdateLimitGroups(ctx, slug, groups)
	if err != nil || !rerouteNeeded {
		return SiftResult{}, err
	}
	return e.Reroute(ctx, slug)
}

// UpdateLimitGroups replaces a project's limit groups and reports whether
// queued items need a re-route (a matcher changed, not only a rate). Claims
// stay correct before the re-route: an item not yet re-routed is served as
// its old routing says, and a removed group's items are served unlimited.
func (e *Engine) UpdateLimitGroups(ctx context.Context, slug string, groups []LimitGroup) (bool, error) {
	const op = "queues.UpdateLimitGroups"
	project, err := e.Project(ctx, slug)
	if err != nil {
		return false, err
	}
	compiled, err := compileGroups(groups)
	if err != nil {
		return false, err
	}
	stored := make([]LimitGroup, len(compiled))
	names := make([]any, len(compiled))
	for i, g := range compiled {
		stored[i], names[i] = g.LimitGroup, g.Name
	}
	raw, _ := json.Marshal(stored)
	if len(names) > 0 {
		if err := e.rdb.SAdd(ctx, GroupsKnownKey(slug), names...).Err(); err != nil {
			return false, unavailable(op, err)
		}
	}
	n, err := e.runScriptInt(ctx, op, configWriteScript, []string{ConfigKey(slug)}, "groups", "limit_groups", string(raw))
	if err != nil {
		return false, err
	}
	if n < 0 {
		return false, errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	return matchers(project.LimitGroups) != matchers(stored), nil
}

// matchers describes what routes items, ignoring rates.
func matchers(groups []LimitGroup) string {
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%q %q %q %q\n", g.Name, g.Type, g.Glob, g.Regex)
	}
	return b.String()
}

// SiftResult counts a re-route or a move.
type SiftResult struct {
	Moved   int `json:"moved"`
	Scanned int `json:"scanned"`
}

// Reroute puts every queued item of the shared queues into the queue its
// limit group (or none) calls for: items matching a group go to that
// group's sub-queue, items of removed or changed groups come back.
func (e *Engine) Reroute(ctx context.Context, slug string) (SiftResult, error) {
	const op = "queues.Reroute"
	known, err := e.rdb.SMembers(ctx, GroupsKnownKey(slug)).Result()
	if err != nil {
		return SiftResult{}, unavailable(op, err)
	}
	var total SiftResult
	for _, q := range SharedQueues {
		sources := []string{QueueKey(slug, q)}
		for _, g := range known {
			sources = append(sources, GroupQueueKey(slug, q, g))
		}
		for _, source := range sources {
			r, err := e.sift(ctx, slug, source, q, nil, -1)
			total.Moved += r.Moved
			total.Scanned += r.Scanned
			if err != nil {
				return total, err
			}
		}
	}
	// Forget removed groups whose sub-queues are now empty, so claims stop
	// carrying their keys.
	state, err := e.limitGroups(ctx, slug, true)
	if err != nil {
		return total, err
	}
	for _, name := range state.removed {
		keys := []string{GroupsKnownKey(slug)}
		for _, q := range SharedQueues {
			keys = append(keys, GroupQueueKey(slug, q, name))
		}
		if _, err := e.runScriptInt(ctx, op, forgetGroupScript, keys, name); err != nil {
			return total, err
		}
	}
	return total, nil
}

// MoveRequest moves items between shared queues: those matching Match (any
// when Match is nil), at most Count (all when Count <= 0).
type MoveRequest struct {
	From  Queue
	To    Queue
	Match *LimitGroup // only Type, Glob or Regex are read
	Count int
}

// Move moves queued items from one shared queue (and its groups'
// sub-queues) to another, keeping each item in the sub-queue its limit
// group calls for.
func (e *Engine) Move(ctx context.Context, slug string, req MoveRequest) (SiftResult, error) {
	sources, to, match, err := e.moveSources(ctx, "queues.Move", slug, req)
	if err != nil {
		return SiftResult{}, err
	}
	limit := req.Count
	if limit <= 0 {
		limit = -1
	}
	var total SiftResult
	for _, source := range sources {
		r, err := e.sift(ctx, slug, source, to, match, limit)
		total.Moved += r.Moved
		total.Scanned += r.Scanned
		if err != nil {
			return total, err
		}
		if limit > 0 {
			limit -= r.Moved
			if limit == 0 {
				break
			}
		}
	}
	return total, nil
}

// moveSources checks a move and returns the lists it takes items from
// (the shared queue and its limit groups' sub-queues), where they go, and
// what they must match (nil: every item).
func (e *Engine) moveSources(ctx context.Context, op, slug string, req MoveRequest) ([]string, Queue, *compiledGroup, error) {
	if _, err := e.Project(ctx, slug); err != nil {
		return nil, "", nil, err
	}
	from, err := ParseQueue(string(req.From))
	if err != nil {
		return nil, "", nil, err
	}
	to, err := ParseQueue(string(req.To))
	if err != nil {
		return nil, "", nil, err
	}
	if from == to {
		return nil, "", nil, errorf(op, CodeInvalid, "from and to are the same queue")
	}
	if req.Count < 0 {
		// 0 (left out) moves every match; a negative count is a mistake,
		// never "everything".
		return nil, "", nil, errorf(op, CodeInvalid, "count %d: must be positive (leave it out to move every matching item)", req.Count)
	}
	var match *compiledGroup
	if req.Match != nil {
		m := *req.Match
		m.Name, m.Burst = "match", 1
		compiled, err := compileGroups([]LimitGroup{m})
		if err != nil {
			return nil, "", nil, err
		}
		match = &compiled[0]
	}
	known, err := e.rdb.SMembers(ctx, GroupsKnownKey(slug)).Result()
	if err != nil {
		return nil, "", nil, unavailable(op, err)
	}
	sources := []string{QueueKey(slug, from)}
	for _, g := range known {
		sources = append(sources, GroupQueueKey(slug, from, g))
	}
	return sources, to, match, nil
}

// movePreviewPage is how many items MovePreview reads per call.
const movePreviewPage = 1000

// MovePreview counts what Move would take with req, changing nothing:
// the items waiting in Redis in req.From and its limit groups'
// sub-queues that match, at most req.Count (Moved), of the items read
// (Scanned). Like Move it leaves offloaded segments alone. Items queued or
// claimed meanwhile make the move differ from its preview.
func (e *Engine) MovePreview(ctx context.Context, slug string, req MoveRequest) (SiftResult, error) {
	const op = "queues.MovePreview"
	sources, _, match, err := e.moveSources(ctx, op, slug, req)
	if err != nil {
		return SiftResult{}, err
	}
	var total SiftResult
	for _, source := range sources {
		for start := int64(0); ; start += movePreviewPage {
			items, err := e.rdb.LRange(ctx, source, start, start+movePreviewPage-1).Result()
			if err != nil {
				return total, unavailable(op, err)
			}
			for _, item := range items {
				total.Scanned++
				if match == nil || match.matches(item) {
					total.Moved++
					if req.Count > 0 && total.Moved == req.Count {
						return total, nil
					}
				}
			}
			if len(items) < movePreviewPage {
				break
			}
		}
	}
	return total, nil
}

// sift walks one queue from its head once, a page per script call. Items
// that match (every item when match is nil) are routed into the shared
// queue dest, into the sub-queue their limit group calls for; the others
// rotate to the tail. It stops after one pass over the queue's length at
// the start, or after limit items moved (limit < 0: no limit). Routing
// decisions carry the groups' version; a change meanwhile restarts the page
// with fresh groups.
func (e *Engine) sift(ctx context.Context, slug, source string, dest Queue, match *compiledGroup, limit int) (SiftResult, error) {
	const op = "queues.sift"
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
	for int64(result.Scanned) < length && (limit < 0 || result.Moved < limit) {
		if err := ctx.Err(); err != nil {
			return result, err
		}
		want := int64(page)
		if rest := length - int64(result.Scanned); rest < want {
			want = rest
		}
		items, err := e.rdb.LRange(ctx, source, 0, want-1).Result()
		if err != nil {
			return result, unavailable(op, err)
		}
		if len(items) == 0 {
			return result, nil
		}
		// Destinations: KEYS[3] is dest itself, KEYS[3+g] dest's sub-queue
		// of group g.
		keys := []string{ConfigKey(slug), source, QueueKey(slug, dest)}
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, dest, g.Name))
		}
		if limit >= 0 {
			// Pop no further than the last item to move, so the items after
			// it keep their place at the head.
			lastMove, would := -1, 0
			for i, item := range items {
				if (match == nil || match.matches(item)) && result.Moved+would < limit {
					lastMove, would = i, would+1
				}
			}
			if lastMove < 0 {
				lastMove = len(items) - 1 // nothing to move here: rotate the page
			}
			items = items[:lastMove+1]
		}
		args := []any{state.version, len(items), "decide"}
		moving := 0
		for _, item := range items {
			d := 0
			if (match == nil || match.matches(item)) && (limit < 0 || result.Moved+moving < limit) {
				d = 1 + groupFor(state.groups, item) + 1 // 1 = dest, 2+g = group g
				moving++
			}
			target := ""
			if d > 0 {
				target = keys[1+d]
			}
			if target == source {
				d = 0 // already where it belongs
				moving--
			}
			args = append(args, item, d)
		}
		stale, empty, err := e.applySiftPage(ctx, op, slug, siftScript, keys, args, &result)
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
