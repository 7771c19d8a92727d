// Package queues is hoard's work-queue engine: projects, items, claims,
// reclaims and completions, kept in Redis. Every item transition is one Lua
// script over keys that share the project's hash tag, so every item is
// always in exactly one place: a todo queue, out, done, failed (failed.go)
// or an offloaded segment.
package queues

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/jsonstring"
	"github.com/hoardproject/hoard/internal/luascript"
)

// Engine runs the work queue against one Redis or Redis Cluster. It is safe
// for concurrent use; it holds no state of its own beyond the client.
type Engine struct {
	rdb redis.UniversalClient
	// warriorPath runs the warrior path's scripts (warriorPathScripts) in
	// shared pipelines: concurrent claims and dones share one write and one
	// read per batch, on hoard's side and Redis's, instead of a write, a
	// read and a pool health check each. Each is still one EVALSHA, atomic on
	// its own; a batch only carries them.
	warriorPath *luascript.Batcher
	// plainBatches coalesces concurrent one-item plain claims and dones
	// of a project into one script call (plainbatch.go).
	plainBatches *plainBatcher
	clock        Clock
	logger       *slog.Logger
	groupCache   groupCache
	globalBlocks globalBlockCache
	// plainConfigs holds what the plain claim needs of each project's
	// settings (plainclaim.go).
	plainConfigs plainConfigCache
	// warriorKeys holds claim.lua's and done.lua's per-project key names
	// (warriorkeys.go).
	warriorKeys warriorKeyCache
	// counters buffers the warrior path's statistics (counters.go).
	counters counterBuffer
	// published holds completions' log entries for live viewers (publish.go).
	published publishBuffer
	// bloomTurns admits bloom_add.lua calls to Redis, bloomScriptsInFlight
	// at a time (backfeed.go).
	bloomTurns chan struct{}
	// donePlainMulti is the script of a plain done of claimBatchMin or
	// more items: donePlainWholeScript, or donePlainScript while a
	// frontend of a build from before claim batches may share the Redis
	// (Options.PreBatchFrontends). Chosen once, here, so a done pays no
	// read for it.
	donePlainMulti *luascript.Script
}

// Options configure an Engine. Zero values take defaults.
type Options struct {
	Clock  Clock
	Logger *slog.Logger
	// PreBatchFrontends says a frontend of a build from before claim
	// batches (main before eb66426) may still run on this Redis. Such a
	// frontend's done, fail or release of a batched item removes its
	// record without counting its batch down, so a multi done may not
	// trust a batch's count (lua/done_plain_whole.lua): with it set, every
	// plain done reads each item's record (done_plain.lua). Unset (the
	// default, `hoard serve --all-frontends-count-batches`), a done that
	// names one whole batch completes it from the batch's record.
	PreBatchFrontends bool
}

// NewEngine returns an Engine over rdb.
func NewEngine(rdb redis.UniversalClient, opts Options) *Engine {
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	donePlainMulti := donePlainWholeScript
	if opts.PreBatchFrontends {
		donePlainMulti = donePlainScript
	}
	return &Engine{rdb: rdb, warriorPath: luascript.NewBatcher(rdb, WarriorPathLeaders, WarriorPathBatch),
		plainBatches: newPlainBatcher(rdb, plainBatchLeaders, plainBatchMax),
		clock:        opts.Clock, logger: opts.Logger, bloomTurns: make(chan struct{}, bloomScriptsInFlight),
		donePlainMulti: donePlainMulti}
}

// At most WarriorPathLeaders batches of the warrior path's scripts are in
// flight, each of at most WarriorPathBatch calls: a few in flight keep
// Redis busy while hoard reads one batch's replies and writes the next.
// (Exported for hoard-bench, whose one-key ceiling is batched alike.)
const (
	WarriorPathLeaders = 4
	WarriorPathBatch   = 64
)

// Redis returns the engine's client, for components that share it.
func (e *Engine) Redis() redis.UniversalClient { return e.rdb }

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

func (e *Engine) nowMillis() int64 { return e.clock.Now().UnixMilli() }

// Project is a project's settings with its creation time.
type Project struct {
	Slug      string    `json:"slug"`
	CreatedAt time.Time `json:"created_at"`
	Settings
}

// CreateProject creates a project with default settings changed by patch.
func (e *Engine) CreateProject(ctx context.Context, slug string, patch SettingsPatch) (Project, error) {
	const op = "queues.CreateProject"
	if err := ValidateSlug(slug); err != nil {
		return Project{}, err
	}
	settings, err := patch.Apply(DefaultSettings())
	if err != nil {
		return Project{}, err
	}
	// The registry comes first: a crash between the two writes leaves a
	// listed slug without config, which reads as "not found", never a
	// project nobody can list.
	if err := e.rdb.SAdd(ctx, ProjectsKey, slug).Err(); err != nil {
		return Project{}, unavailable(op, err)
	}
	now := e.clock.Now()
	args := append([]any{"create", "created_at", strconv.FormatInt(now.UnixMilli(), 10)}, settings.fields()...)
	n, err := e.runScriptInt(ctx, op, configWriteScript, []string{ConfigKey(slug), ClaimsKey(slug), BudgetKey(slug)}, args...)
	if err != nil {
		return Project{}, err
	}
	if n == 0 {
		return Project{}, errorf(op, CodeExists, "project %q already exists", slug)
	}
	e.logger.InfoContext(ctx, "project created", "project", slug)
	return Project{Slug: slug, CreatedAt: time.UnixMilli(now.UnixMilli()), Settings: settings}, nil
}

// UpdateProject changes a project's settings; they apply to the next
// request. A new reclaim TTL also applies to the claims already out.
func (e *Engine) UpdateProject(ctx context.Context, slug string, patch SettingsPatch) (Project, error) {
	const op = "queues.UpdateProject"
	project, err := e.Project(ctx, slug)
	if err != nil {
		return Project{}, err
	}
	settings, err := patch.Apply(project.Settings)
	if err != nil {
		return Project{}, err
	}
	// Only the fields the patch names are written, so concurrent changes
	// of different settings do not undo each other.
	args := append([]any{"update"}, settings.fieldsNamed(patch.fieldNames())...)
	n, err := e.runScriptInt(ctx, op, configWriteScript, []string{ConfigKey(slug), ClaimsKey(slug), BudgetKey(slug)}, args...)
	if err != nil {
		return Project{}, err
	}
	if n < 0 {
		return Project{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	ttlChanged := settings.ReclaimTTL != project.ReclaimTTL
	project.Settings = settings
	if ttlChanged {
		if err := e.rescoreDeadlines(ctx, slug); err != nil {
			return project, err
		}
	}
	return project, nil
}

// rescoreDeadlines rewrites every claim's reclaim deadline from the current
// TTL, a page of claims per script call, so Redis is never blocked for long.
// HSCAN may return an item twice; rescoring is idempotent.
func (e *Engine) rescoreDeadlines(ctx context.Context, slug string) error {
	const op = "queues.rescoreDeadlines"
	var cursor uint64
	for {
		fields, next, err := e.rdb.HScan(ctx, ClaimsKey(slug), cursor, "", 1000).Result()
		if err != nil {
			return unavailable(op, err)
		}
		items := make([]any, 0, len(fields)/2)
		for i := 0; i < len(fields); i += 2 {
			items = append(items, fields[i])
		}
		if len(items) > 0 {
			if _, err := e.runScriptInt(ctx, op, rescoreScript,
				[]string{ConfigKey(slug), DeadlinesKey(slug), ClaimsKey(slug), BatchDeadlinesKey(slug)}, items...); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// Project reads a project's settings.
func (e *Engine) Project(ctx context.Context, slug string) (Project, error) {
	const op = "queues.Project"
	if err := ValidateSlug(slug); err != nil {
		return Project{}, err
	}
	h, err := e.rdb.HGetAll(ctx, ConfigKey(slug)).Result()
	if err != nil {
		return Project{}, unavailable(op, err)
	}
	created, ok := h["created_at"]
	if !ok {
		return Project{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	ms, _ := strconv.ParseInt(created, 10, 64)
	return Project{Slug: slug, CreatedAt: time.UnixMilli(ms), Settings: settingsFromHash(h)}, nil
}

// Projects lists the slugs of every project, sorted.
func (e *Engine) Projects(ctx context.Context) ([]string, error) {
	slugs, err := e.rdb.SMembers(ctx, ProjectsKey).Result()
	if err != nil {
		return nil, unavailable("queues.Projects", err)
	}
	sort.Strings(slugs)
	return slugs, nil
}

// ClaimRequest asks for items for one downloader.
type ClaimRequest struct {
	Project    string
	Downloader string
	IP         string
	Version    string
	Count      int
}

// ClaimedItem is one item handed out.
type ClaimedItem struct {
	Name string
	// Extras is the item's JSON object of extra keys, or nil.
	Extras json.RawMessage
}

// ClaimResult lists the items handed out; Reclaims of them were reclaims.
type ClaimResult struct {
	Items    []ClaimedItem
	Reclaims int
	// ProjectExtra is the project's JSON object of keys sent with every item.
	ProjectExtra json.RawMessage
}

// Claim hands out up to req.Count items in one script. A request for more
// than the project's max_multi is cut to max_multi by the caller reading
// settings; Claim itself caps at MaxMulti.
func (e *Engine) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	const op = "queues.Claim"
	if err := ValidateSlug(req.Project); err != nil {
		return ClaimResult{}, err
	}
	if err := ValidateDownloader(req.Downloader); err != nil {
		return ClaimResult{}, err
	}
	if req.Count < 1 {
		req.Count = 1
	}
	if req.Count > MaxMulti {
		req.Count = MaxMulti
	}
	if len(req.Version) > 64 {
		return ClaimResult{}, errorf(op, CodeInvalid, "version is longer than 64 bytes")
	}
	ip := req.IP
	if ip == "" {
		ip = "-"
	}
	slug := req.Project
	globalBlock, err := e.globalBlocks.lookup(ctx, e, req.Downloader, ip)
	if err != nil {
		return ClaimResult{}, err
	}
	if cfg := e.plainConfigs.get(ctx, e, slug); cfg != nil && cfg.serves(req.Downloader, ip, globalBlock, req.Version) {
		now := e.clock.Now()
		result, code, detail, handled, err := e.claimPlain(ctx, slug, req, ip, cfg, now)
		if err != nil {
			return ClaimResult{}, err
		}
		if handled {
			if code == 1 {
				e.countClaim(ctx, slug, now, code, "", int64(len(result.Items)), 0)
				return result, nil
			}
			// Nothing was popped or written (claim_plain.lua undid it).
			e.logger.Error("claim refused: corrupt project state", "project", slug, "detail", detail)
			return ClaimResult{}, unavailable(op, errors.New("project state is corrupt ("+detail+"); nothing was handed out"))
		}
	}
	var now time.Time
	code, rest, err := e.runWithGroups(ctx, op, slug, claimScript, func(state *groupState) ([]string, []any) {
		now = e.clock.Now()
		keys, groupArgs := claimKeys(e.warriorKeys.get(slug), slug, req.Downloader, ip, globalBlock, now, state)
		return keys, append([]any{now.UnixMilli(), req.Downloader, ip, req.Count, req.Version}, groupArgs...)
	})
	if err != nil {
		return ClaimResult{}, err
	}
	detail := ""
	if len(rest) > 0 {
		detail = replyString(rest[0])
	}
	if code == 1 {
		e.countClaim(ctx, slug, now, code, detail, int64((len(rest)-2)/2), replyInt(rest[0]))
	} else {
		e.countClaim(ctx, slug, now, code, detail, 0, 0)
	}
	switch code {
	case 1:
		result := ClaimResult{Reclaims: int(replyInt(rest[0])), ProjectExtra: json.RawMessage(replyString(rest[1]))}
		for i := 2; i+1 < len(rest); i += 2 {
			item := ClaimedItem{Name: replyString(rest[i])}
			if extras := replyString(rest[i+1]); extras != "" {
				item.Extras = json.RawMessage(extras)
			}
			result.Items = append(result.Items, item)
		}
		return result, nil
	case 0:
		reason := map[string]string{
			"empty":        "no items left for you",
			"budget":       "you have as many items out as your budget allows; finish some first",
			"claims_limit": "the project's claims limit is reached",
			"group_limit":  "the items left are rate-limited; try again soon",
		}[detail]
		if reason == "" {
			reason = "no items left for you"
		}
		return ClaimResult{}, &Error{Op: op, Code: CodeNoItem, Message: reason}
	case codeNoProject:
		return ClaimResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case codeTooOld:
		return ClaimResult{}, errorf(op, CodeVersionTooOld, "script version %q is older than the minimum %q; update your pipeline", req.Version, detail)
	case codeBlocked:
		var entry BlockEntry
		_ = json.Unmarshal([]byte(detail), &entry)
		msg := "you are blocked"
		if entry.Reason != "" {
			msg += ": " + entry.Reason
		}
		return ClaimResult{}, errorf(op, CodeBlocked, "%s", msg)
	case codeRateLimited:
		ms, _ := strconv.ParseInt(detail, 10, 64)
		return ClaimResult{}, &Error{Op: op, Code: CodeRateLimited, Message: "rate limited; slow down", RetryAfter: time.Duration(ms) * time.Millisecond}
	case codePaused:
		return ClaimResult{}, &Error{Op: op, Code: CodeNoItem, Message: "project is paused"}
	case codeStaleGroups:
		return ClaimResult{}, unavailable(op, errors.New("limit groups kept changing during the claim"))
	case codeCorrupt:
		// Nothing was popped or written: the items stay queued until an
		// operator repairs the key the script names.
		e.logger.Error("claim refused: corrupt project state", "project", slug, "detail", detail)
		return ClaimResult{}, unavailable(op, errors.New("project state is corrupt ("+detail+"); nothing was handed out"))
	}
	return ClaimResult{}, unavailable(op, errors.New("claim script returned an unknown code "+strconv.FormatInt(code, 10)))
}

// DoneRequest reports items completed by one downloader.
type DoneRequest struct {
	Project    string
	Downloader string
	Version    string
	UserAgent  string
	Items      []string
	// Bytes maps file groups to byte counts, as seesaw sends it.
	Bytes map[string]int64
	// ID is any JSON the pipeline sends as "id" (seesaw sends a dict).
	ID json.RawMessage
	// Result is the worker's JSON result for the items (a plugin's worker
	// reports what it found), at most MaxResultBytes. It travels in the
	// project's event log entry of the completion, to the plugin owning
	// the items; it is not stored anywhere else.
	Result json.RawMessage
}

// MaxResultBytes bounds a done's Result.
const MaxResultBytes = 16 << 10

// DoneResult says how many items were completed now, and how many had
// been completed before (they count once).
type DoneResult struct {
	New        int `json:"new"`
	Duplicates int `json:"duplicates"`
}

// Limits on a done's report. A group over 1 TiB is not a real upload, and
// the caps keep every counter far from overflowing.
const (
	MaxByteGroups = 32
	MaxGroupBytes = 1 << 40
	MaxIDBytes    = 4096
)

// Done completes items. Every item must be out or already done; otherwise
// nothing changes and the error lists the items that were never handed out.
func (e *Engine) Done(ctx context.Context, req DoneRequest) (DoneResult, error) {
	const op = "queues.Done"
	if err := ValidateSlug(req.Project); err != nil {
		return DoneResult{}, err
	}
	if err := ValidateDownloader(req.Downloader); err != nil {
		return DoneResult{}, err
	}
	if len(req.Items) == 0 {
		return DoneResult{}, errorf(op, CodeInvalid, "no items")
	}
	if len(req.Items) > MaxMulti {
		return DoneResult{}, errorf(op, CodeInvalid, "%d items in one done; the limit is %d", len(req.Items), MaxMulti)
	}
	for _, item := range req.Items {
		if err := ValidateItem(item); err != nil {
			return DoneResult{}, err
		}
	}
	if len(req.Bytes) > MaxByteGroups {
		return DoneResult{}, errorf(op, CodeInvalid, "bytes has %d groups; the limit is %d", len(req.Bytes), MaxByteGroups)
	}
	if len(req.Version) > 64 {
		return DoneResult{}, errorf(op, CodeInvalid, "version is longer than 64 bytes")
	}
	groups := make([]string, 0, len(req.Bytes))
	var total int64
	for group, n := range req.Bytes {
		if group == "" || len(group) > 64 {
			return DoneResult{}, errorf(op, CodeInvalid, "bytes group names must be 1-64 bytes")
		}
		if n < 0 || n > MaxGroupBytes {
			return DoneResult{}, errorf(op, CodeInvalid, "bytes[%q] = %d is out of range (0 to %d)", truncate(group, 64), n, int64(MaxGroupBytes))
		}
		total += n
		groups = append(groups, group)
	}
	sort.Strings(groups)
	if len(req.ID) > MaxIDBytes {
		return DoneResult{}, errorf(op, CodeInvalid, "id is %d bytes; the limit is %d", len(req.ID), MaxIDBytes)
	}

	var result []byte
	if len(req.Result) > 0 {
		if len(req.Result) > MaxResultBytes {
			return DoneResult{}, errorf(op, CodeInvalid, "result is %d bytes; the limit is %d", len(req.Result), MaxResultBytes)
		}
		if !json.Valid(req.Result) {
			return DoneResult{}, errorf(op, CodeInvalid, "result is not valid JSON")
		}
		result = jsonCompact(make([]byte, 0, len(req.Result)), req.Result)
	}

	tail, err := logTail(req.UserAgent, req.ID)
	if err != nil {
		return DoneResult{}, &Error{Op: op, Code: CodeInvalid, Message: "id is not valid JSON", Err: err}
	}
	slug := req.Project
	now := e.clock.Now()
	projectKeys := e.warriorKeys.get(slug)
	// done_plain.lua's ARGV are the downloader and the items: done.lua's
	// without now (the frontend sums the claim-to-done times from the
	// claim times it answers), the log entry's parts (the frontend builds
	// the entry) and the event log's result (a project with an event log
	// is not plain). done.lua's are built only when it runs: boxing them
	// for every done was a third of a plain done's allocations.
	// Each item goes as a pointer into req.Items (go-redis writes a
	// *string as the string): a string put in an interface is a heap copy
	// of its header, so boxing the names was one allocation per item, half
	// of a multi=100 round trip's. (Keys stay strings: go-redis routes a
	// cluster call by its first key's string.)
	plainArgs := make([]any, 0, 1+len(req.Items))
	plainArgs = append(plainArgs, req.Downloader)
	for i := range req.Items {
		plainArgs = append(plainArgs, &req.Items[i])
	}
	// done_plain.lua counts every item it is given, so a list that names
	// an item twice goes to done.lua, which counts it once.
	distinct := len(req.Items) == 1 || itemsDistinct(req.Items)
	code, rest, err := int64(codeNotPlain), []any(nil), error(nil)
	if distinct {
		var reply any
		if len(req.Items) == 1 {
			// Coalesced with other one-item plain dones of the project
			// that arrive together (plainbatch.go); alone, done_plain.lua.
			reply, err = e.plainBatches.do(plainCall{ctx: ctx, slug: slug, done: true,
				downloader: req.Downloader, item: req.Items[0], keys: plainKeys(projectKeys.donePlain, 1)})
			if err != nil {
				err = unavailable(op, err)
			}
		} else {
			script := donePlainScript
			if len(req.Items) >= claimBatchMin {
				script = e.donePlainMulti
			}
			reply, err = e.runScript(ctx, op, script, plainKeys(projectKeys.donePlain, len(req.Items)), plainArgs...)
		}
		if one, ok := reply.(string); ok && err == nil {
			// "<at> <log_length>": the one item, or the one whole batch
			// (done_plain_whole.lua), is new, the reporter's first claim,
			// every item claimed at <at>.
			n := int64(len(req.Items))
			at, logLength, _ := strings.Cut(one, " ")
			e.countDone(ctx, req, now, total, groups, int(n), n*claimToDoneMS(at, now.UnixMilli()), n)
			e.publishLater(ctx, slug, doneLogEntry(req, now, total, tail, distinct), replyLogLength(logLength))
			return DoneResult{New: int(n)}, nil
		}
		if err == nil {
			code, rest, err = scriptListReply(op, reply)
		}
		if err == nil && code == 1 {
			// {log_length, at1, n1, ...}: every item is new, and the
			// reporter's first claim.
			n := len(req.Items)
			if len(rest) < 3 {
				return DoneResult{}, unavailable(op, fmt.Errorf("plain done script replied %d elements, want at least 4", len(rest)+1))
			}
			e.countDone(ctx, req, now, total, groups, n, replyRTTSum(rest[1:], now.UnixMilli()), int64(n))
			e.publishLater(ctx, slug, doneLogEntry(req, now, total, tail, distinct), replyLogLength(rest[0]))
			return DoneResult{New: n}, nil
		}
	}
	if err == nil && code == codeNotPlain {
		args := make([]any, 0, 6+len(req.Items))
		args = append(args, now.UnixMilli(), plainArgs[0], req.Version, total, tail, result)
		args = append(args, plainArgs[1:]...)
		code, rest, err = e.runScriptList(ctx, op, doneScript, projectKeys.done, args...)
	}
	if err != nil {
		return DoneResult{}, err
	}
	switch code {
	case 1:
		result := DoneResult{New: int(replyInt(rest[0])), Duplicates: int(replyInt(rest[1]))}
		if result.New > 0 {
			e.countDone(ctx, req, now, total, groups, result.New, replyRTTSum(rest[2], now.UnixMilli()), replyInt(rest[3]))
			entry := replyString(rest[4])
			if entry == "" {
				entry = doneLogEntry(req, now, total, tail, distinct)
			}
			logLength := DefaultLogLength
			if len(rest) > 5 {
				logLength = replyLogLength(rest[5])
			}
			e.publishLater(ctx, slug, entry, logLength)
		}
		return result, nil
	case codeNoProject:
		return DoneResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case codeNotHandedOut, codeNotClaimant:
		items := make([]string, len(rest))
		for i, v := range rest {
			items[i] = replyString(v)
		}
		if code == codeNotHandedOut {
			return DoneResult{}, &Error{Op: op, Code: CodeNotHandedOut, Items: items,
				Message: "refused: " + strconv.Itoa(len(items)) + " item(s) were never handed out, so nothing was marked done: " + truncate(items[0], 200)}
		}
		return DoneResult{}, &Error{Op: op, Code: CodeNotClaimant, Items: items,
			Message: "refused: " + strconv.Itoa(len(items)) + " item(s) were claimed by other downloaders, not " + req.Downloader + ", so nothing was marked done: " + truncate(items[0], 200)}
	case codeCorrupt:
		e.logger.Error("done refused: corrupt project state", "project", slug, "detail", replyString(rest[0]))
		return DoneResult{}, unavailable(op, errors.New("project state is corrupt ("+replyString(rest[0])+"); nothing was marked done"))
	}
	return DoneResult{}, unavailable(op, errors.New("done script returned an unknown code"))
}

// replyRTTSum reads a done reply's claim-to-done sum (ms): done.lua's
// number, or done_plain.lua's claim times {at1, n1, at2, n2, ...}, each
// run of n items claimed at `at` adding n × (now - at), a negative
// difference (a claim time ahead of this frontend's clock) as 0, as
// done.lua counts it.
func replyRTTSum(v any, nowMS int64) int64 {
	times, ok := v.([]any)
	if !ok {
		return replyInt(v)
	}
	var sum int64
	for i := 0; i+1 < len(times); i += 2 {
		sum += claimToDoneMS(replyString(times[i]), nowMS) * replyInt(times[i+1])
	}
	return sum
}

// claimToDoneMS is now - at for a claim time done_plain.lua answers (ms,
// text), a negative difference (a claim time ahead of this frontend's
// clock) as 0, as done.lua counts it.
func claimToDoneMS(at string, nowMS int64) int64 {
	t, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		// done_plain.lua matched %d+: only digits past int64 get here, a
		// time so far ahead that done.lua counts 0.
		return 0
	}
	return max(nowMS-t, 0)
}

// replyLogLength reads a done reply's log_length: done.lua's number, or
// done_plain.lua's config text, read as done.lua's `tonumber(text or
// '1000') or 1000` reads it ("" is unset).
func replyLogLength(v any) int {
	switch v := v.(type) {
	case int64:
		return int(v)
	case string:
		if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return int(n)
		}
	}
	return DefaultLogLength
}

// seenItems holds itemsDistinct's sets between calls: a set made per
// done was a multi=100 done's largest allocation (~3 kB).
var seenItems = sync.Pool{New: func() any { return make(map[string]struct{}, 128) }}

// itemsDistinct reports whether no item is named twice.
func itemsDistinct(items []string) bool {
	seen := seenItems.Get().(map[string]struct{})
	defer func() {
		clear(seen)
		seenItems.Put(seen)
	}()
	for _, item := range items {
		if _, ok := seen[item]; ok {
			return false
		}
		seen[item] = struct{}{}
	}
	return true
}

// doneLogEntry builds a done's log entry for the common case, every item
// completed now (each once, in order), so the script formats no JSON.
// distinct says the items are known to be named once each.
func doneLogEntry(req DoneRequest, now time.Time, total int64, tail string, distinct bool) string {
	var seen map[string]bool
	if !distinct {
		seen = make(map[string]bool, len(req.Items))
	}
	// A one-item done's entry fits the stack buffer: one allocation
	// (the string) instead of two.
	var buf [256]byte
	b := buf[:0]
	if size := 128 + len(tail) + 32*len(req.Items); size > len(buf) {
		b = make([]byte, 0, size)
	}
	b = append(b, `{"items":[`...)
	first := true
	for _, item := range req.Items {
		if seen != nil {
			if seen[item] {
				continue
			}
			seen[item] = true
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = jsonstring.Append(b, item)
	}
	b = append(b, `],"by":`...)
	b = jsonstring.Append(b, req.Downloader)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, total, 10)
	b = append(b, `,"version":`...)
	b = jsonstring.Append(b, req.Version)
	if tail != "" {
		b = append(b, ',')
		b = append(b, tail...)
	}
	b = append(b, '}')
	return string(b)
}

// logTail builds the log entry members the Go side knows: user agent and id.
// It is built in one buffer: five allocations per done were three
// concatenations and their parts.
func logTail(userAgent string, id json.RawMessage) (string, error) {
	if len(id) > 0 && !json.Valid(id) {
		return "", errors.New("invalid JSON")
	}
	ua := truncate(userAgent, 200)
	b := make([]byte, 0, len(`"ua":"","id":`)+len(ua)+len(ua)/8+len(id))
	b = append(b, `"ua":`...)
	b = jsonstring.Append(b, ua)
	if len(id) > 0 {
		b = append(b, `,"id":`...)
		b = jsonCompact(b, id)
	}
	return string(b), nil
}

// ReleaseResult counts what a release did.
type ReleaseResult struct {
	Released int `json:"released"`
	// NotOut items were not out: never handed out, done, or released before.
	NotOut int `json:"not_out"`
	// Filtered items were out but excluded by the release's filter.
	Filtered int `json:"filtered"`
	// Failed of the released items had been claimed max_claims times:
	// they went to the failed items, not to todo:redo.
	Failed int `json:"failed,omitempty"`
}

func (r *ReleaseResult) add(o ReleaseResult) {
	r.Released += o.Released
	r.Failed += o.Failed
	r.NotOut += o.NotOut
	r.Filtered += o.Filtered
}

// Release puts named items back in todo:redo. With onlyDownloader set, only
// that downloader's claims are released (a warrior giving up its own item).
func (e *Engine) Release(ctx context.Context, slug string, items []string, onlyDownloader string) (ReleaseResult, error) {
	if err := ValidateSlug(slug); err != nil {
		return ReleaseResult{}, err
	}
	for _, item := range items {
		if err := ValidateItem(item); err != nil {
			return ReleaseResult{}, err
		}
	}
	var total ReleaseResult
	for start := 0; start < len(items); start += 1000 {
		batch := items[start:min(start+1000, len(items))]
		r, err := e.release(ctx, slug, batch, onlyDownloader, -1)
		if err != nil {
			return total, err
		}
		total.add(r)
	}
	return total, nil
}

func (e *Engine) release(ctx context.Context, slug string, items []string, onlyDownloader string, cutoffMillis int64) (ReleaseResult, error) {
	const op = "queues.Release"
	cutoff := ""
	if cutoffMillis >= 0 {
		cutoff = strconv.FormatInt(cutoffMillis, 10)
	}
	code, rest, err := e.runWithGroups(ctx, op, slug, releaseScript, func(state *groupState) ([]string, []any) {
		// Released items go back to redo, into their limit group's
		// sub-queue, so a release never lets an item skip its limit.
		keys := []string{ConfigKey(slug), QueueKey(slug, QueueRedo), DeadlinesKey(slug),
			ClaimsKey(slug), BudgetKey(slug), StatsKey(slug), ReleasedKey(slug), FailedKey(slug), HistoryKey(slug)}
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, QueueRedo, g.Name))
		}
		keys = append(keys, BatchesKey(slug), BatchDeadlinesKey(slug), QueuedKey(slug))
		args := make([]any, 0, 4+2*len(items))
		args = append(args, e.nowMillis(), onlyDownloader, cutoff, state.version)
		for _, item := range items {
			args = append(args, item, groupFor(state.groups, item)+1)
		}
		return keys, args
	})
	switch {
	case err != nil:
		return ReleaseResult{}, err
	case code == codeNoProject:
		return ReleaseResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case code < 0:
		return ReleaseResult{}, unavailable(op, fmt.Errorf("release script returned code %d", code))
	}
	return ReleaseResult{Released: int(code), NotOut: int(replyInt(rest[0])), Filtered: int(replyInt(rest[1])), Failed: int(replyInt(rest[2]))}, nil
}

// ReleaseFilter selects claims for ReleaseClaims. The zero filter selects
// every claim.
type ReleaseFilter struct {
	// OlderThan selects claims made at least this long ago (0 = any age).
	OlderThan time.Duration
	// Downloader selects one downloader's claims ("" = anyone's).
	Downloader string
}

// ReleaseClaims releases the claims the filter selects, back to todo:redo.
// It pages through the claims in deadline order (never loading all of
// them), and each page's claims made before the cutoff are released by one
// script that re-checks the filter, so a claim that changes meanwhile is
// never released by mistake.
func (e *Engine) ReleaseClaims(ctx context.Context, slug string, filter ReleaseFilter) (ReleaseResult, error) {
	const op = "queues.ReleaseClaims"
	if err := ValidateSlug(slug); err != nil {
		return ReleaseResult{}, err
	}
	if filter.Downloader != "" {
		if err := ValidateDownloader(filter.Downloader); err != nil {
			return ReleaseResult{}, err
		}
	}
	if filter.OlderThan < 0 {
		return ReleaseResult{}, errorf(op, CodeInvalid, "older_than must not be negative")
	}
	if _, err := e.Project(ctx, slug); err != nil {
		return ReleaseResult{}, err
	}
	// The cutoff is fixed when the release starts, so claims made while it
	// pages (items it released being claimed again, further on in the
	// deadline order) are left alone.
	cutoff := claimCutoff(e.clock.Now(), filter.OlderThan)
	var total ReleaseResult
	var failure error
	err := e.claimPages(ctx, op, slug, ClaimCursor{}, func(page []Claim) bool {
		items := make([]string, 0, len(page))
		for _, c := range page {
			if c.ClaimedAt.UnixMilli() <= cutoff {
				items = append(items, c.Item)
			}
		}
		if len(items) == 0 {
			return true
		}
		r, err := e.release(ctx, slug, items, filter.Downloader, cutoff)
		if err != nil {
			failure = err
			return false
		}
		total.add(ReleaseResult{Released: r.Released, Filtered: r.Filtered, Failed: r.Failed})
		return true
	})
	if failure != nil {
		return total, failure
	}
	return total, err
}

// QueueItem is an item to queue, with optional extra keys.
type QueueItem struct {
	Name   string          `json:"name"`
	Extras json.RawMessage `json:"extras,omitempty"`
	// Score orders the item in QueueScored (highest first); ignored by
	// the FIFO queues.
	Score float64 `json:"score,omitempty"`
}

// Target names the queue items go to: a shared queue, or the reserved
// queue of one downloader.
type Target struct {
	Queue      Queue
	Downloader string
}

// MaxEnqueueBatch caps the items of one Enqueue call.
const MaxEnqueueBatch = 100000

// EnqueueResult reports a batch: items queued, items skipped because they
// were out or done already, items skipped because they were waiting in a
// queue already (or twice in the batch), and the queue's length afterwards.
type EnqueueResult struct {
	Queued        int `json:"queued"`
	Skipped       int `json:"skipped"`
	AlreadyQueued int `json:"already_queued"`
	// Filtered counts the items dropped by the project's filters.
	Filtered int   `json:"filtered"`
	Length   int64 `json:"length"`
}

// Enqueue appends items to a queue. Every item must be valid; callers that
// accept messy input filter it first.
func (e *Engine) Enqueue(ctx context.Context, slug string, target Target, items []QueueItem) (EnqueueResult, error) {
	const op = "queues.Enqueue"
	if err := ValidateSlug(slug); err != nil {
		return EnqueueResult{}, err
	}
	if len(items) > MaxEnqueueBatch {
		return EnqueueResult{}, errorf(op, CodeInvalid, "%d items in one batch; the limit is %d", len(items), MaxEnqueueBatch)
	}
	var queue Queue
	if target.Downloader != "" {
		if err := ValidateDownloader(target.Downloader); err != nil {
			return EnqueueResult{}, err
		}
	} else {
		q, err := ParseQueue(string(target.Queue))
		if err != nil {
			return EnqueueResult{}, err
		}
		queue = q
		if queue == QueueScored {
			return e.enqueueScored(ctx, slug, items)
		}
	}
	var extras []any
	for i, item := range items {
		if err := ValidateNewItem(item.Name); err != nil {
			return EnqueueResult{}, atIndex(err, "item", i)
		}
		if len(item.Extras) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(item.Extras, &obj); err != nil {
				return EnqueueResult{}, errorf(op, CodeInvalid, "extras of %q must be a JSON object", truncate(item.Name, 60))
			}
			if _, ok := obj["item_name"]; ok {
				return EnqueueResult{}, errorf(op, CodeInvalid, "extras of %q may not set item_name", truncate(item.Name, 60))
			}
			extras = append(extras, item.Name, string(jsonCompact(nil, item.Extras)))
		}
	}
	filtered := 0
	code, rest, err := e.runWithGroups(ctx, op, slug, enqueueScript, func(state *groupState) ([]string, []any) {
		// Route: a reserved queue takes everything; otherwise each item
		// goes to the sub-queue of its limit group, or the queue itself.
		keys := []string{ConfigKey(slug), ExtrasKey(slug), StatsKey(slug), ReservedSetKey(slug), ClaimsKey(slug), DoneKey(slug), RecentDoneKey(slug)}
		routed := make([][]any, 1+len(state.groups))
		version := ""
		filtered = 0
		if target.Downloader != "" {
			keys = append(keys, ReservedQueueKey(slug, target.Downloader))
			for _, item := range items {
				if state.filtered(item.Name) {
					filtered++
					continue
				}
				routed[0] = append(routed[0], item.Name)
			}
		} else {
			keys = append(keys, QueueKey(slug, queue))
			for _, g := range state.groups {
				keys = append(keys, GroupQueueKey(slug, queue, g.Name))
			}
			for _, item := range items {
				if state.filtered(item.Name) {
					filtered++
					continue
				}
				g := groupFor(state.groups, item.Name)
				routed[g+1] = append(routed[g+1], item.Name)
			}
			// Always checked, even with no groups: a frontend that cached
			// "no groups" must not keep routing around a new one.
			version = state.version
		}
		args := make([]any, 0, 6+len(extras)+len(items)+len(routed))
		// The filters version is always checked: a frontend that cached
		// "no filters" must not keep queuing what a new one drops.
		args = append(args, target.Downloader, version, state.filtersVersion, filtered, len(extras)/2)
		args = append(args, extras...)
		for i := range keys[7:] {
			args = append(args, len(routed[i]))
			args = append(args, routed[i]...)
		}
		return append(keys, FailedKey(slug), QueuedKey(slug)), args
	})
	switch {
	case err != nil:
		return EnqueueResult{}, err
	case code == codeNoProject:
		return EnqueueResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case code < 0:
		return EnqueueResult{}, unavailable(op, fmt.Errorf("enqueue script returned code %d", code))
	}
	length := replyInt(rest[1])
	if target.Downloader == "" {
		// Report the whole queue: the queue and its groups' sub-queues.
		if length, err = e.queueLength(ctx, slug, queue); err != nil {
			return EnqueueResult{}, err
		}
	}
	return EnqueueResult{Queued: int(code), Skipped: int(replyInt(rest[0])), AlreadyQueued: int(replyInt(rest[2])), Filtered: filtered, Length: length}, nil
}

// queueLength counts a shared queue with its limit groups' sub-queues.
func (e *Engine) queueLength(ctx context.Context, slug string, q Queue) (int64, error) {
	known, err := e.rdb.SMembers(ctx, GroupsKnownKey(slug)).Result()
	if err != nil {
		return 0, unavailable("queues.queueLength", err)
	}
	pipe := e.rdb.Pipeline()
	lens := []*redis.IntCmd{pipe.LLen(ctx, QueueKey(slug, q))}
	for _, g := range known {
		lens = append(lens, pipe.LLen(ctx, GroupQueueKey(slug, q, g)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, unavailable("queues.queueLength", err)
	}
	var n int64
	for _, l := range lens {
		n += l.Val()
	}
	return n, nil
}

// Counts are the sizes of a project's places.
type Counts struct {
	Todo      int64 `json:"todo"`
	Backfeed  int64 `json:"todo:backfeed"`
	Secondary int64 `json:"todo:secondary"`
	Redo      int64 `json:"todo:redo"`
	// Reserved sums the per-downloader reserved queues.
	Reserved int64 `json:"todo:reserved"`
	// Scored is the score-ordered queue.
	Scored int64 `json:"todo:scored"`
	Out    int64 `json:"out"`
	// Done counts every completion: those in the done set, and those
	// counted and discarded (done_mode count or archive).
	Done int64 `json:"done"`
	// Failed counts the failed items (claimed max_claims times without a
	// done, or reported failed), waiting for an operator.
	Failed int64 `json:"failed"`
	// Offloaded is how many of the waiting items above are in segment
	// files on disk rather than in Redis.
	Offloaded int64 `json:"offloaded"`
	// Reclaimable is how many claims are past their reclaim deadline.
	Reclaimable int64 `json:"reclaimable"`
	// OldestClaimAgeSeconds is how long the claim with the earliest reclaim
	// deadline has been out (0 with none): a claim older than the reclaim
	// TTL while reclaiming is off is work nobody will bring back. It is the
	// oldest claim when the claims out were made under one TTL and each
	// for the first time; an item claimed again (a reclaim, a released
	// item) has its deadline TTL x times claimed after its claim, so an
	// older one of those may wait behind it. Read from the head of the
	// deadlines and its claim record, O(log n).
	OldestClaimAgeSeconds float64 `json:"oldest_claim_age_seconds"`

	// offloadedIn splits Offloaded by shared queue, in SharedQueues order.
	offloadedIn [4]int64
}

// OffloadedIn is how many of shared queue q's waiting items are in segment
// files on disk.
func (c Counts) OffloadedIn(q Queue) int64 {
	if i := slices.Index(SharedQueues, q); i >= 0 && i < len(c.offloadedIn) {
		return c.offloadedIn[i]
	}
	return 0
}

// TodoTotal is every item waiting in a queue.
func (c Counts) TodoTotal() int64 {
	return c.Todo + c.Backfeed + c.Secondary + c.Redo + c.Reserved + c.Scored
}

// Counts reads the sizes of every place of a project in one pipeline.
func (e *Engine) Counts(ctx context.Context, slug string) (Counts, error) {
	const op = "queues.Counts"
	if _, err := e.Project(ctx, slug); err != nil {
		return Counts{}, err
	}
	// claim.lua removes a downloader once its reserved queue is empty, so
	// this set is only as large as the reservations still waiting.
	reserved, err := e.rdb.SMembers(ctx, ReservedSetKey(slug)).Result()
	if err != nil {
		return Counts{}, unavailable(op, err)
	}
	known, err := e.rdb.SMembers(ctx, GroupsKnownKey(slug)).Result()
	if err != nil {
		return Counts{}, unavailable(op, err)
	}
	// One transaction, so an offload landing between two reads can't count
	// a segment twice or not at all (every key shares the project's slot).
	pipe := e.rdb.TxPipeline()
	// A shared queue's count includes its limit groups' sub-queues.
	shared := make([][]*redis.IntCmd, len(SharedQueues))
	for i, q := range SharedQueues {
		shared[i] = append(shared[i], pipe.LLen(ctx, QueueKey(slug, q)))
		for _, g := range known {
			shared[i] = append(shared[i], pipe.LLen(ctx, GroupQueueKey(slug, q, g)))
		}
	}
	reservedLens := make([]*redis.IntCmd, len(reserved))
	for i, d := range reserved {
		reservedLens[i] = pipe.LLen(ctx, ReservedQueueKey(slug, d))
	}
	scored := pipe.ZCard(ctx, QueueKey(slug, QueueScored))
	cancelled := pipe.HLen(ctx, RedoCancelledKey(slug))
	out := pipe.ZCard(ctx, DeadlinesKey(slug))
	// Items out in claim batches (BatchesKey) have no entry in deadlines.
	batchedOut := pipe.HGet(ctx, BatchesKey(slug), "out")
	done := pipe.SCard(ctx, DoneKey(slug))
	failed := pipe.HLen(ctx, FailedKey(slug))
	discarded := pipe.HGet(ctx, StatsKey(slug), "done_discarded")
	offloaded := pipe.HGetAll(ctx, OffloadKey(slug))
	nowText := strconv.FormatInt(e.nowMillis(), 10)
	due := pipe.ZCount(ctx, DeadlinesKey(slug), "-inf", nowText)
	first := pipe.ZRangeWithScores(ctx, DeadlinesKey(slug), 0, 0)
	// Due batches are moved to deadlines by the next reclaim or expiry
	// scan; until then their items count here, read from their counts.
	dueBatches := pipe.ZRangeByScore(ctx, BatchDeadlinesKey(slug), &redis.ZRangeBy{Min: "-inf", Max: nowText})
	firstBatch := pipe.ZRangeWithScores(ctx, BatchDeadlinesKey(slug), 0, 0)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Counts{}, unavailable(op, err)
	}
	sum := func(cmds []*redis.IntCmd) int64 {
		var n int64
		for _, c := range cmds {
			n += c.Val()
		}
		return n
	}
	c := Counts{
		Todo: sum(shared[0]), Backfeed: sum(shared[1]), Secondary: sum(shared[2]), Redo: sum(shared[3]),
		Out: out.Val(), Done: done.Val(), Failed: failed.Val(), Reclaimable: due.Val(), Scored: scored.Val(),
	}
	if n, err := strconv.ParseInt(discarded.Val(), 10, 64); err == nil {
		c.Done += n
	}
	if n, err := strconv.ParseInt(batchedOut.Val(), 10, 64); err == nil {
		c.Out += n
	}
	if ids := dueBatches.Val(); len(ids) > 0 {
		n, err := e.batchesLeft(ctx, slug, ids)
		if err != nil {
			return Counts{}, unavailable(op, err)
		}
		c.Reclaimable += n
	}
	// Copies of released items completed since wait in redo until popped.
	c.Redo = max(0, c.Redo-cancelled.Val())
	// The earlier of the head of deadlines and the first claim batch.
	switch heads, batches := first.Val(), firstBatch.Val(); {
	case len(batches) == 1 && (len(heads) == 0 || batches[0].Score < heads[0].Score):
		id, _ := batches[0].Member.(string)
		if c.OldestClaimAgeSeconds, err = e.batchClaimAge(ctx, slug, id); err != nil {
			return Counts{}, unavailable(op, err)
		}
	case len(heads) == 1:
		item, _ := heads[0].Member.(string)
		if c.OldestClaimAgeSeconds, err = e.firstDueClaimAge(ctx, slug, item); err != nil {
			return Counts{}, unavailable(op, err)
		}
	}
	// Offloaded items still wait in their queue.
	for i, q := range SharedQueues {
		n, _ := strconv.ParseInt(offloaded.Val()["q:"+string(q)], 10, 64)
		c.Offloaded += n
		c.offloadedIn[i] = n
		switch i {
		case 0:
			c.Todo += n
		case 1:
			c.Backfeed += n
		case 2:
			c.Secondary += n
		case 3:
			c.Redo += n
		}
	}
	for _, l := range reservedLens {
		c.Reserved += l.Val()
	}
	return c, nil
}

// batchesLeft sums how many items of the claim batches ids are still out
// in them, reading their counts in slices of 1000.
func (e *Engine) batchesLeft(ctx context.Context, slug string, ids []string) (int64, error) {
	var total int64
	for start := 0; start < len(ids); start += 1000 {
		part := ids[start:min(start+1000, len(ids))]
		fields := make([]string, len(part))
		for i, id := range part {
			fields[i] = "n" + id
		}
		counts, err := e.rdb.HMGet(ctx, BatchesKey(slug), fields...).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		for _, v := range counts {
			if s, ok := v.(string); ok {
				if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
					total += n
				}
			}
		}
	}
	return total, nil
}

// batchClaimAge is how long claim batch id has been out, in seconds, from
// the claim record it keeps (0 if it is gone, unreadable or in the future
// of this frontend's clock).
func (e *Engine) batchClaimAge(ctx context.Context, slug, id string) (float64, error) {
	value, err := e.rdb.HGet(ctx, BatchesKey(slug), "i"+id).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	record, _, _ := strings.Cut(value, "\n")
	c, ok := parseClaimRecord("", record)
	if !ok {
		return 0, nil
	}
	if age := e.nowMillis() - c.ClaimedAt.UnixMilli(); age > 0 {
		return float64(age) / 1000, nil
	}
	return 0, nil
}

// firstDueClaimAge is how long item, the head of the deadlines, has been
// out, in seconds, from its claim record (0 if it is gone, unreadable or
// claimed in the future of this frontend's clock).
func (e *Engine) firstDueClaimAge(ctx context.Context, slug, item string) (float64, error) {
	record, err := e.rdb.HGet(ctx, ClaimsKey(slug), item).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	c, ok := parseClaimRecord(item, record)
	if !ok {
		return 0, nil
	}
	if age := e.nowMillis() - c.ClaimedAt.UnixMilli(); age > 0 {
		return float64(age) / 1000, nil
	}
	return 0, nil
}

// BlockEntry records why and by whom a nickname or IP was blocked.
type BlockEntry struct {
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	By     string    `json:"by"`
}

// Block blocks a nickname or IP in one project; its item requests get 403.
func (e *Engine) Block(ctx context.Context, slug, who string, entry BlockEntry) error {
	const op = "queues.Block"
	who, err := validateBlock(op, who, entry)
	if err != nil {
		return err
	}
	if _, err := e.Project(ctx, slug); err != nil {
		return err
	}
	if entry.At.IsZero() {
		entry.At = e.clock.Now().UTC()
	}
	raw, _ := json.Marshal(entry)
	// config_version moves with the block list: every frontend's copy of
	// it (the plain claim's, plainclaim.go) is then found stale.
	_, err = e.runScriptInt(ctx, op, blockWriteScript, []string{ConfigKey(slug), BlockedKey(slug)}, "set", blockKey(who), string(raw))
	return err
}

// Unblock lifts a block; it reports whether there was one.
func (e *Engine) Unblock(ctx context.Context, slug, who string) (bool, error) {
	if err := ValidateSlug(slug); err != nil {
		return false, err
	}
	// The exact spelling too: entries stored before blocks ignored case.
	args := []any{"del"}
	for _, field := range blockFields(who) {
		args = append(args, field)
	}
	n, err := e.runScriptInt(ctx, "queues.Unblock", blockWriteScript, []string{ConfigKey(slug), BlockedKey(slug)}, args...)
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// ScoredResult reports an enqueue into QueueScored.
type ScoredResult struct {
	Queued   int `json:"queued"`
	Rescored int `json:"rescored"`
	Skipped  int `json:"skipped"`
	// Filtered counts the items the project's filters dropped.
	Filtered int   `json:"filtered"`
	Length   int64 `json:"length"`
}

var enqueueScoredScript = loadScript("enqueue_scored.lua")

// enqueueScored puts items in the score-ordered queue; an item waiting
// there already takes the new score. Extras are refused: they belong to
// the FIFO path, which routes them.
func (e *Engine) enqueueScored(ctx context.Context, slug string, items []QueueItem) (EnqueueResult, error) {
	res, err := e.EnqueueScored(ctx, slug, items)
	return EnqueueResult{Queued: res.Queued + res.Rescored, Skipped: res.Skipped, Filtered: res.Filtered, Length: res.Length}, err
}

// EnqueueScored puts items in the project's score-ordered queue
// (QueueScored), served highest score first; an item waiting there already
// takes its new score, and items out, done or failed are skipped.
func (e *Engine) EnqueueScored(ctx context.Context, slug string, items []QueueItem) (ScoredResult, error) {
	const op = "queues.EnqueueScored"
	if err := ValidateSlug(slug); err != nil {
		return ScoredResult{}, err
	}
	if len(items) > MaxEnqueueBatch {
		return ScoredResult{}, errorf(op, CodeInvalid, "%d items in one batch; the limit is %d", len(items), MaxEnqueueBatch)
	}
	for i, item := range items {
		if err := ValidateNewItem(item.Name); err != nil {
			return ScoredResult{}, atIndex(err, "item", i)
		}
		if len(item.Extras) > 0 {
			return ScoredResult{}, errorf(op, CodeInvalid, "items of the scored queue take no extras (%q)", truncate(item.Name, 60))
		}
		if math.IsNaN(item.Score) || math.IsInf(item.Score, 0) {
			return ScoredResult{}, errorf(op, CodeInvalid, "score of %q must be a finite number", truncate(item.Name, 60))
		}
	}
	if len(items) == 0 {
		return ScoredResult{}, nil
	}
	keys := []string{ConfigKey(slug), StatsKey(slug), ClaimsKey(slug), DoneKey(slug), RecentDoneKey(slug), QueueKey(slug, QueueScored),
		FailedKey(slug)}
	filtered := 0
	code, rest, err := e.runWithGroups(ctx, op, slug, enqueueScoredScript, func(state *groupState) ([]string, []any) {
		filtered = 0
		args := make([]any, 0, 2+2*len(items))
		args = append(args, state.filtersVersion, 0)
		for _, item := range items {
			if state.filtered(item.Name) {
				filtered++
				continue
			}
			args = append(args, strconv.FormatFloat(item.Score, 'g', -1, 64), item.Name)
		}
		args[1] = filtered
		return keys, args
	})
	if err != nil {
		return ScoredResult{}, err
	}
	switch code {
	case codeNoProject:
		return ScoredResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case codeCorrupt:
		return ScoredResult{}, unavailable(op, errors.New("corrupt project state: "+replyString(rest[0])))
	}
	return ScoredResult{Queued: int(code), Rescored: int(replyInt(rest[0])), Skipped: int(replyInt(rest[1])), Filtered: filtered, Length: replyInt(rest[2])}, nil
}
