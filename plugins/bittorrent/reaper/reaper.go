// Package reaper is the BitTorrent plugin's unseeded reaper (seed 000,
// Orpheus's "Unseeded Purges", policies.md §A) for private trackers: a
// registered upload that was never seeded, or lost its last seeder, gets
// an initial notice, a final notice, then is removed, each step at its
// configured gap after the one before.
//
// Everything is computed from stored timestamps (the torrent's created
// and last_action, and the reaper state under the torrent's hash tag,
// swarm.ReaperKey), never from "one run per period", so a reaper paused
// for a month and started again does the next step of each torrent only:
// a step's time counts from when the previous step was really done.
//
// The "reaper" job (Reaper.Tick) finds due steps, bounded per run, and
// queues them as items of the plugin ("notify-initial:<hash>:<epoch>",
// "notify-final:…", "remove:…"); a worker's done applies the step with
// one script (lua/bittorrent/reaper_step.lua) that re-checks the torrent
// is still unseeded since the spell began (its last_action, stored in the
// state as since). The epoch makes each item name unique where it must
// be, because the queue skips names it has seen done: for an initial
// notice it is when the step was planned, for the final notice and the
// removal the initial_at of the state row they belong to, so a row
// deleted (truncation, a reseed) and created again is a new generation
// whose steps are queued afresh and whose old steps do nothing. A
// seeder's announce deletes the state at once.
//
// Deleting the state (truncation) only restarts the process at the
// initial notice: the removal needs both notices recorded in it.
package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	luabt "github.com/hoardproject/hoard/lua/bittorrent"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var stepScript = luascript.Load(luabt.Files, "reaper_step.lua")

// ErrInvalid: a malformed item name.
var ErrInvalid = errors.New("invalid reaper item")

// Step is one of the three steps of a torrent's process.
type Step string

// The steps, in order; each is the prefix of its item names.
const (
	NotifyInitial Step = "notify-initial"
	NotifyFinal   Step = "notify-final"
	Remove        Step = "remove"
)

// scriptStep is the step's name in reaper_step.lua.
func (s Step) scriptStep() string {
	switch s {
	case NotifyInitial:
		return "initial"
	case NotifyFinal:
		return "final"
	default:
		return "remove"
	}
}

// Item is one queued step: the torrent, and its epoch (ms): when an
// initial notice was planned, or the initial_at of the state row a final
// notice or removal belongs to.
type Item struct {
	Step     Step
	InfoHash bittorrent.InfoHash
	Epoch    int64
}

// Name is the item's name in the queue.
func (it Item) Name() string {
	return string(it.Step) + ":" + swarm.HexInfoHash(it.InfoHash) + ":" + strconv.FormatInt(it.Epoch, 10)
}

// ParseItem reads an item name back.
func ParseItem(name string) (Item, error) {
	parts := strings.Split(name, ":")
	if len(parts) != 3 {
		return Item{}, fmt.Errorf("%w %q: want <step>:<infohash>:<epoch>", ErrInvalid, name)
	}
	it := Item{Step: Step(parts[0])}
	switch it.Step {
	case NotifyInitial, NotifyFinal, Remove:
	default:
		return Item{}, fmt.Errorf("%w %q: unknown step %q", ErrInvalid, name, parts[0])
	}
	hash, err := swarm.ParseInfoHash(parts[1])
	if err != nil {
		return Item{}, fmt.Errorf("%w %q: %v", ErrInvalid, name, err)
	}
	it.InfoHash = hash
	if it.Epoch, err = strconv.ParseInt(parts[2], 10, 64); err != nil || it.Epoch < 0 {
		return Item{}, fmt.Errorf("%w %q: epoch %q is not a time in ms", ErrInvalid, name, parts[2])
	}
	return it, nil
}

// Config configures a Reaper.
type Config struct {
	Policy Policy
	// Now is the clock (time.Now when nil); tests inject one.
	Now func() time.Time
	// Unregister drops a removed torrent from the registry and indexes
	// (swarm.Store.UnregisterTorrent); the step script has already made
	// announces refuse it.
	Unregister func(ctx context.Context, hash bittorrent.InfoHash) error
	Logger     *slog.Logger
}

// Reaper plans and applies the steps.
type Reaper struct {
	rdb redis.UniversalClient
	cfg Config
}

// New returns a reaper on rdb.
func New(rdb redis.UniversalClient, cfg Config) *Reaper {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Reaper{rdb: rdb, cfg: cfg}
}

// Policy is the reaper's policy.
func (r *Reaper) Policy() Policy { return r.cfg.Policy }

// State is a torrent's reaper state as stored.
type State struct {
	State        string // "never", "unseeded", "" when there is none
	Notify       string // "initial", "final", "removed"
	UnseededDate time.Time
	InitialAt    time.Time
	FinalAt      time.Time
	RemovedAt    time.Time
	Since        int64  // the last_action (ms) the spell began from, 0: never seeded
	Pending      string // the item queued last, not done yet
}

var stateFields = []string{"state", "notify", "unseeded_date", "initial_at", "final_at", "removed_at", "since", "pending", "pending_at"}

func parseState(v []any) (State, int64) {
	text := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(text(i), 10, 64); return n }
	at := func(i int) time.Time {
		if ms := num(i); ms > 0 {
			return time.UnixMilli(ms).UTC()
		}
		return time.Time{}
	}
	return State{
		State: text(0), Notify: text(1), UnseededDate: at(2), InitialAt: at(3), FinalAt: at(4), RemovedAt: at(5),
		Since: num(6), Pending: text(7),
	}, num(8)
}

// State reads a torrent's reaper state.
func (r *Reaper) State(ctx context.Context, hash bittorrent.InfoHash) (State, error) {
	v, err := r.rdb.HMGet(ctx, swarm.ReaperKey(hash), stateFields...).Result()
	if err != nil {
		return State{}, fmt.Errorf("reaper.State: %w", err)
	}
	s, _ := parseState(v)
	return s, nil
}

// due is one step found due, with what orders it.
type due struct {
	item     Item
	uploader string
	at       time.Time // when it became due: oldest first
}

// Plan finds the steps due now, bounded by the caps: at most MaxPerUser
// per uploader, MaxUsers uploaders and MaxTotal in all, oldest first
// (uploaders ordered by their oldest due step, then by id), so what is
// left out is the newest and a later run takes it: breadth-first, and
// never past MaxTotal. It changes nothing except retrying the registry
// cleanup of a removal whose Unregister failed.
func (r *Reaper) Plan(ctx context.Context) ([]Item, error) {
	now := r.cfg.Now()
	all, err := r.findDue(ctx, now)
	if err != nil {
		return nil, err
	}
	return r.capped(all), nil
}

func (r *Reaper) findDue(ctx context.Context, now time.Time) ([]due, error) {
	// The registry is read with HSCAN, a thousand at a time, so a site
	// with millions of uploads never asks Redis for one huge reply.
	var found []due
	var cursor uint64
	for {
		pairs, next, err := r.rdb.HScan(ctx, swarm.RegistryKey, cursor, "", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("reaper: registry: %w", err)
		}
		hexes := make([]string, 0, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			hexes = append(hexes, pairs[i])
		}
		batch, err := r.dueIn(ctx, now, hexes)
		if err != nil {
			return nil, err
		}
		found = append(found, batch...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	// HSCAN may return an entry twice; a torrent is planned once.
	seen := make(map[bittorrent.InfoHash]bool, len(found))
	unique := found[:0]
	for _, d := range found {
		if !seen[d.item.InfoHash] {
			seen[d.item.InfoHash] = true
			unique = append(unique, d)
		}
	}
	return unique, nil
}

// dueIn reads a batch of registered torrents and their reaper states in
// one pipeline and returns the steps due among them.
func (r *Reaper) dueIn(ctx context.Context, now time.Time, hexes []string) ([]due, error) {
	hashes := make([]bittorrent.InfoHash, 0, len(hexes))
	torrents := make([]*redis.SliceCmd, 0, len(hexes))
	states := make([]*redis.SliceCmd, 0, len(hexes))
	pipe := r.rdb.Pipeline()
	for _, h := range hexes {
		hash, err := swarm.ParseInfoHash(h)
		if err != nil {
			continue
		}
		hashes = append(hashes, hash)
		torrents = append(torrents, pipe.HMGet(ctx, swarm.TorrentKey(hash), "id", "uploader", "created", "last_action", "seeders"))
		states = append(states, pipe.HMGet(ctx, swarm.ReaperKey(hash), stateFields...))
	}
	if len(hashes) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reaper: reading torrents: %w", err)
	}
	var found []due
	for i, hash := range hashes {
		state, pendingAt := parseState(states[i].Val())
		if state.Notify == "removed" {
			r.unregister(ctx, hash)
			continue
		}
		if d, ok := r.dueStep(now, hash, torrents[i].Val(), state, pendingAt); ok {
			found = append(found, d)
		}
	}
	return found, nil
}

// dueStep is the torrent's next step if it is due now. The thresholds
// are strict (Orpheus's `<`) and the same as reaper_step.lua's.
func (r *Reaper) dueStep(now time.Time, hash bittorrent.InfoHash, t []any, state State, pendingAt int64) (due, bool) {
	text := func(i int) string { s, _ := t[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(text(i), 10, 64); return n }
	if text(0) == "" || num(4) > 0 {
		return due{}, false // unregistered, or seeded now
	}
	if state.Pending != "" && now.Sub(time.UnixMilli(pendingAt)) < r.cfg.Policy.RequeueAfter {
		return due{}, false // queued; the queue hands it out until done
	}
	lastAction := num(3)
	sched, since := r.cfg.Policy.Unseeded, time.UnixMilli(lastAction)
	if lastAction == 0 {
		sched, since = r.cfg.Policy.Never, time.UnixMilli(num(2))
	}
	d := due{uploader: text(1)}
	generation := state.InitialAt.UnixMilli()
	switch {
	case state.State == "" || state.Since != lastAction:
		d.item = Item{Step: NotifyInitial, InfoHash: hash, Epoch: now.UnixMilli()}
		d.at = since.Add(sched.Grace)
	case state.Notify == "initial":
		d.item = Item{Step: NotifyFinal, InfoHash: hash, Epoch: generation}
		d.at = later(state.UnseededDate, state.InitialAt).Add(sched.Final)
	case state.Notify == "final":
		d.item = Item{Step: Remove, InfoHash: hash, Epoch: generation}
		d.at = later(state.UnseededDate.Add(sched.Final), state.FinalAt).Add(sched.Removal)
	default:
		return due{}, false
	}
	return d, now.After(d.at)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (r *Reaper) capped(all []due) []Item {
	p := r.cfg.Policy
	byUser := map[string][]due{}
	for _, d := range all {
		byUser[d.uploader] = append(byUser[d.uploader], d)
	}
	older := func(a, b due) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.item.Name(), b.item.Name())
	}
	users := make([]string, 0, len(byUser))
	for user, list := range byUser {
		slices.SortFunc(list, older)
		users = append(users, user)
	}
	slices.SortFunc(users, func(a, b string) int {
		return cmp.Or(older(byUser[a][0], byUser[b][0]), strings.Compare(a, b))
	})
	var items []Item
	for i, user := range users {
		if i >= p.MaxUsers || len(items) >= p.MaxTotal {
			break
		}
		list := byUser[user]
		take := min(len(list), p.MaxPerUser, p.MaxTotal-len(items))
		for _, d := range list[:take] {
			items = append(items, d.item)
		}
	}
	return items
}

// Tick plans the run and marks each planned step pending (so the next
// runs do not queue it again while the queue holds it), and returns the
// item names to queue.
func (r *Reaper) Tick(ctx context.Context) ([]string, error) {
	items, err := r.Plan(ctx)
	if err != nil {
		return nil, err
	}
	now := r.cfg.Now().UnixMilli()
	names := make([]string, len(items))
	pipe := r.rdb.Pipeline()
	for i, it := range items {
		names[i] = it.Name()
		pipe.HSet(ctx, swarm.ReaperKey(it.InfoHash), "pending", names[i], "pending_at", now)
	}
	if len(items) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("reaper: marking pending: %w", err)
		}
	}
	return names, nil
}

// Outcome is what applying a step did.
type Outcome struct {
	Done   bool   // the step was done now
	Reason string // "initial", "final", "removed"; or why not: "already", "reseeded", "not due", ...
}

// Apply does an item's step (its done): one atomic script that re-checks
// the torrent is still unseeded, in the same spell, at the step before,
// and due. Repeating it changes nothing. A malformed name is ErrInvalid.
func (r *Reaper) Apply(ctx context.Context, name string) (Outcome, error) {
	it, err := ParseItem(name)
	if err != nil {
		return Outcome{}, err
	}
	never, unseeded := r.cfg.Policy.Never, r.cfg.Policy.Unseeded
	reply, err := luascript.RunList(ctx, r.rdb, stepScript,
		[]string{swarm.TorrentKey(it.InfoHash), swarm.ReaperKey(it.InfoHash)},
		r.cfg.Now().UnixMilli(), it.Step.scriptStep(), it.Epoch,
		never.Grace.Milliseconds(), never.Final.Milliseconds(), never.Removal.Milliseconds(),
		unseeded.Grace.Milliseconds(), unseeded.Final.Milliseconds(), unseeded.Removal.Milliseconds())
	if err != nil {
		return Outcome{}, fmt.Errorf("reaper: %s: %w", name, err)
	}
	code, _ := reply[0].(int64)
	reason, _ := reply[1].(string)
	out := Outcome{Done: code == 1, Reason: reason}
	if code < 0 {
		r.cfg.Logger.Info("reaper: step refused, nothing changed", "item", name, "reason", reason)
	}
	if out.Done && it.Step == Remove {
		r.cfg.Logger.Info("reaper: removed an unseeded torrent", "info_hash", swarm.HexInfoHash(it.InfoHash), "epoch", it.Epoch)
		r.unregister(ctx, it.InfoHash)
	}
	return out, nil
}

// unregister drops a removed torrent from the registry and indexes; a
// failure is retried by the next Plan, which sees the removed state.
func (r *Reaper) unregister(ctx context.Context, hash bittorrent.InfoHash) {
	if r.cfg.Unregister == nil {
		return
	}
	if err := r.cfg.Unregister(ctx, hash); err != nil {
		r.cfg.Logger.Warn("reaper: unregistering a removed torrent failed; the next run retries", "info_hash", swarm.HexInfoHash(hash), "error", err)
	}
}
