// Package reaper is the BitTorrent plugin's unseeded reaper (seed 000,
// Orpheus's "Unseeded Purges", policies.md §A) for private trackers: a
// registered upload that was never seeded, or lost its last seeder, gets
// an initial notice, a final notice, then is removed, each step at its
// configured gap after the one before.
//
// Everything is computed from stored timestamps (the torrent's created
// and last_action, and the reaper state under the torrent's hash tag,
// btstore.ReaperKey), never from "one run per period", so a reaper paused
// for a month and started again does the next step of each torrent only:
// a step's time counts from when the previous step was really done.
//
// The "reaper" job (Reaper.Tick) finds due steps, bounded per run, and
// queues them as items of the plugin ("notify-initial:<hash>:<epoch>",
// "notify-final:…", "remove:…"); a worker's done applies the step with
// one script (btstore/lua/reaper_step.lua) that re-checks the torrent
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
//
// Claims and rewards (claims.go): an unseeded torrent's initial notice
// invites its snatchers to reseed it; the announce that sees the first
// reseed records the claim in the same script, and others who start
// seeding within the claim window win too. Each run grants the rewards
// recorded since, idempotently. The site hears of all of it through
// events (events.go) handed to a Publisher, before the step they belong
// to is acknowledged, so a crash publishes the same events again.
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

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var (
	stepScript    = btstore.Script("reaper_step.lua")
	extendScript  = btstore.Script("reaper_extend.lua")
	rewardsScript = btstore.Script("reaper_rewards.lua")
)

// Errors, for errors.Is.
var (
	// ErrInvalid: a malformed item name or argument.
	ErrInvalid = errors.New("invalid reaper item")
	// ErrNotFound: the torrent is not registered, or a user has no
	// torrent in the reaper's process.
	ErrNotFound = errors.New("not found")
	// ErrNoNotice: the torrent is not in the reaper's process (no notice
	// went out, or it was removed): there is nothing to extend.
	ErrNoNotice = errors.New("not in the reaper's process")
)

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
// initial notice was planned, or the gen of the state row a final notice
// or removal belongs to (its initial_at, moved by each extension).
type Item struct {
	Step     Step
	InfoHash bittorrent.InfoHash
	Epoch    int64
}

// Name is the item's name in the queue.
func (it Item) Name() string {
	return string(it.Step) + ":" + btstore.HexInfoHash(it.InfoHash) + ":" + strconv.FormatInt(it.Epoch, 10)
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
	// Publisher takes the events to the site; nil drops them (debug log).
	Publisher Publisher
	Logger    *slog.Logger
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
	if cfg.Policy.RewardFactor == 0 {
		cfg.Policy.RewardFactor = DefaultPolicy().RewardFactor
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
	Gen          int64  // the epoch of the row's later steps: initial_at, moved by extensions
	// ClaimUntil is the end of the claim window a reseed opened (no
	// State then); Rewards: claims wait for their rewards.
	ClaimUntil time.Time
	Rewards    bool
}

var stateFields = []string{"state", "notify", "unseeded_date", "initial_at", "final_at", "removed_at", "since", "pending",
	"pending_at", "gen", "claim_until", "rewards"}

func parseState(v []any) (State, int64) {
	text := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(text(i), 10, 64); return n }
	at := func(i int) time.Time {
		if ms := num(i); ms > 0 {
			return time.UnixMilli(ms).UTC()
		}
		return time.Time{}
	}
	s := State{
		State: text(0), Notify: text(1), UnseededDate: at(2), InitialAt: at(3), FinalAt: at(4), RemovedAt: at(5),
		Since: num(6), Pending: text(7), Gen: num(9), ClaimUntil: at(10), Rewards: text(11) != "",
	}
	if s.Gen == 0 && s.State != "" {
		s.Gen = num(3)
	}
	return s, num(8)
}

// State reads a torrent's reaper state.
func (r *Reaper) State(ctx context.Context, hash bittorrent.InfoHash) (State, error) {
	v, err := r.rdb.HMGet(ctx, btstore.ReaperKey(hash), stateFields...).Result()
	if err != nil {
		return State{}, fmt.Errorf("reaper.State: %w", err)
	}
	s, _ := parseState(v)
	return s, nil
}

// due is one step found due, with what orders it and what its notice says.
type due struct {
	item      Item
	uploader  string
	torrentID string
	state     string    // never or unseeded
	at        time.Time // when it became due: oldest first
	removalAt time.Time
}

// scan is what one pass over the registry found.
type scan struct {
	due []due
	// settle are torrents whose claims wait for rewards, or whose claim
	// window is over.
	settle []bittorrent.InfoHash
	counts map[string]int64
}

// Plan finds the steps due now, bounded by the caps: at most MaxPerUser
// per uploader, MaxUsers uploaders and MaxTotal in all, oldest first
// (uploaders ordered by their oldest due step, then by id), so what is
// left out is the newest and a later run takes it: breadth-first, and
// never past MaxTotal. It changes nothing except retrying the registry
// cleanup of a removal whose Unregister failed (Preview changes nothing).
func (r *Reaper) Plan(ctx context.Context) ([]Item, error) {
	found, err := r.scan(ctx, r.cfg.Now(), true)
	if err != nil {
		return nil, err
	}
	capped, _ := r.capped(found.due)
	items := make([]Item, len(capped))
	for i, d := range capped {
		items[i] = d.item
	}
	return items, nil
}

func (r *Reaper) scan(ctx context.Context, now time.Time, retryUnregister bool) (scan, error) {
	// The registry is read with HSCAN, a thousand at a time, so a site
	// with millions of uploads never asks Redis for one huge reply.
	out := scan{counts: map[string]int64{}}
	seen := map[bittorrent.InfoHash]bool{}
	var cursor uint64
	for {
		pairs, next, err := r.rdb.HScan(ctx, btstore.RegistryKey, cursor, "", 1000).Result()
		if err != nil {
			return scan{}, fmt.Errorf("reaper: registry: %w", err)
		}
		hexes := make([]string, 0, len(pairs)/2)
		for i := 0; i+1 < len(pairs); i += 2 {
			hexes = append(hexes, pairs[i])
		}
		// HSCAN may return an entry twice; a torrent is looked at once.
		if err := r.scanBatch(ctx, now, hexes, seen, retryUnregister, &out); err != nil {
			return scan{}, err
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return out, nil
}

// scanBatch reads a batch of registered torrents and their reaper states
// in one pipeline and adds the steps due among them to out.
func (r *Reaper) scanBatch(ctx context.Context, now time.Time, hexes []string, seen map[bittorrent.InfoHash]bool,
	retryUnregister bool, out *scan) error {
	hashes := make([]bittorrent.InfoHash, 0, len(hexes))
	torrents := make([]*redis.SliceCmd, 0, len(hexes))
	states := make([]*redis.SliceCmd, 0, len(hexes))
	pipe := r.rdb.Pipeline()
	for _, h := range hexes {
		hash, err := swarm.ParseInfoHash(h)
		if err != nil || seen[hash] {
			continue
		}
		seen[hash] = true
		hashes = append(hashes, hash)
		torrents = append(torrents, pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "uploader", "created", "last_action", "seeders"))
		states = append(states, pipe.HMGet(ctx, btstore.ReaperKey(hash), stateFields...))
	}
	if len(hashes) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reaper: reading torrents: %w", err)
	}
	for i, hash := range hashes {
		state, pendingAt := parseState(states[i].Val())
		switch {
		case state.Notify == "removed":
			if retryUnregister {
				r.unregister(ctx, hash)
			}
			continue
		case state.State != "" && (state.Notify == "initial" || state.Notify == "final"):
			out.counts[state.State+"_"+state.Notify]++
		}
		if state.State == "" && !state.ClaimUntil.IsZero() && !now.After(state.ClaimUntil) {
			out.counts["claim_windows"]++
		}
		if state.Rewards {
			out.counts["rewards_waiting"]++
		}
		if state.Rewards || (state.State == "" && !state.ClaimUntil.IsZero() && now.After(state.ClaimUntil)) {
			out.settle = append(out.settle, hash)
		}
		if d, ok := r.dueStep(now, hash, torrents[i].Val(), state, pendingAt); ok {
			out.due = append(out.due, d)
		}
	}
	return nil
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
	sched, since, kind := r.cfg.Policy.Unseeded, time.UnixMilli(lastAction), "unseeded"
	if lastAction == 0 {
		sched, since, kind = r.cfg.Policy.Never, time.UnixMilli(num(2)), "never"
	}
	d := due{uploader: text(1), torrentID: text(0), state: kind}
	switch {
	case state.State == "" || state.Since != lastAction:
		d.item = Item{Step: NotifyInitial, InfoHash: hash, Epoch: now.UnixMilli()}
		d.at = since.Add(sched.Grace)
		d.removalAt = now.Add(sched.Final + sched.Removal)
	case state.Notify == "initial":
		d.item = Item{Step: NotifyFinal, InfoHash: hash, Epoch: state.Gen}
		d.at = later(state.UnseededDate, state.InitialAt).Add(sched.Final)
		d.removalAt = later(state.UnseededDate.Add(sched.Final), now).Add(sched.Removal)
	case state.Notify == "final":
		d.item = Item{Step: Remove, InfoHash: hash, Epoch: state.Gen}
		d.at = later(state.UnseededDate.Add(sched.Final), state.FinalAt).Add(sched.Removal)
		d.removalAt = d.at
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

// capped applies the caps; it returns the steps taken and how many due
// steps were left for later runs.
func (r *Reaper) capped(all []due) ([]due, int) {
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
	var taken []due
	for i, user := range users {
		if i >= p.MaxUsers || len(taken) >= p.MaxTotal {
			break
		}
		list := byUser[user]
		take := min(len(list), p.MaxPerUser, p.MaxTotal-len(taken))
		taken = append(taken, list[:take]...)
	}
	return taken, len(all) - len(taken)
}

// Tick is one run: it grants the rewards of the claims recorded since the
// last run, plans the due steps, marks each pending (so later runs do not
// queue it again while the queue holds it; pending_at is the run), hands
// the run's notices to the Publisher grouped per uploader and step, and
// returns the item names to queue. A notice is published before its step
// can be done; if publishing fails the marks are taken back and the
// steps wait for the next run. The counts of each state are stored.
func (r *Reaper) Tick(ctx context.Context) ([]string, error) {
	now := r.cfg.Now()
	found, err := r.scan(ctx, now, true)
	if err != nil {
		return nil, err
	}
	for _, hash := range found.settle {
		if _, err := r.settle(ctx, hash); err != nil {
			return nil, err
		}
	}
	r.storeCounts(ctx, now, found.counts)
	taken, _ := r.capped(found.due)
	names := make([]string, len(taken))
	pipe := r.rdb.Pipeline()
	for i, d := range taken {
		names[i] = d.item.Name()
		pipe.HSet(ctx, btstore.ReaperKey(d.item.InfoHash), "pending", names[i], "pending_at", now.UnixMilli())
	}
	if len(taken) == 0 {
		return names, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reaper: marking pending: %w", err)
	}
	notices := noticeEvents(now, taken)
	if err := r.publish(ctx, notices); err != nil {
		// Unmark: these steps were never queued, so the next run plans
		// them again rather than waiting RequeueAfter.
		undo := r.rdb.Pipeline()
		for _, d := range taken {
			undo.HDel(ctx, btstore.ReaperKey(d.item.InfoHash), "pending", "pending_at")
		}
		if _, uerr := undo.Exec(ctx); uerr != nil {
			r.cfg.Logger.Warn("reaper: unmarking steps after a failed publish; they wait requeue_after", "error", uerr)
		}
		return nil, err
	}
	r.count(ctx, "notices", int64(len(notices)))
	return names, nil
}

// noticeEvents groups a run's notices: one event per uploader and step.
func noticeEvents(run time.Time, taken []due) []Event {
	type group struct {
		step Step
		user string
	}
	grouped := map[group][]NoticeTorrent{}
	var order []group
	for _, d := range taken {
		if d.item.Step == Remove {
			continue
		}
		g := group{d.item.Step, d.uploader}
		if _, ok := grouped[g]; !ok {
			order = append(order, g)
		}
		grouped[g] = append(grouped[g], NoticeTorrent{InfoHash: btstore.HexInfoHash(d.item.InfoHash), TorrentID: d.torrentID,
			State: d.state, RemovalAt: d.removalAt.UTC()})
	}
	events := make([]Event, 0, len(order))
	for _, g := range order {
		events = append(events, newEvent(KindNotice, noticeKey(g.step, g.user, run),
			NoticeBody{User: g.user, Step: g.step.scriptStep(), Run: run.UTC(), Torrents: grouped[g]}))
	}
	return events
}

// Outcome is what applying a step did.
type Outcome struct {
	Done   bool   // the step was done now
	Reason string // "initial", "final", "removed"; or why not: "already", "reseeded", "not due", ...
}

// stepReply is reaper_step.lua's reply.
type stepReply struct {
	code      int64
	reason    string
	gen       string
	run       int64
	torrentID string
	uploader  string
	state     string
	invited   []string
}

// Apply does an item's step (its done): one atomic script that re-checks
// the torrent is still unseeded, in the same spell, at the step before,
// and due. Repeating it changes nothing. A malformed name is ErrInvalid.
// The step's events (invitations, a removal) are published when it was
// done now; Process also publishes them again for a repeated done.
func (r *Reaper) Apply(ctx context.Context, name string) (Outcome, error) {
	return r.apply(ctx, name, false)
}

// Process is a worker's done of an item: Apply, then the step's events
// are published before the worker acknowledges it, also when the step
// was done before (a worker that died between the script and the publish
// left it so), with the same keys. A publish error is returned: the item
// is not acknowledged and is handed out again.
func (r *Reaper) Process(ctx context.Context, name string) (Outcome, error) {
	return r.apply(ctx, name, true)
}

func (r *Reaper) apply(ctx context.Context, name string, republish bool) (Outcome, error) {
	it, err := ParseItem(name)
	if err != nil {
		return Outcome{}, err
	}
	never, unseeded := r.cfg.Policy.Never, r.cfg.Policy.Unseeded
	raw, err := luascript.RunList(ctx, r.rdb, stepScript,
		[]string{btstore.TorrentKey(it.InfoHash), btstore.ReaperKey(it.InfoHash), btstore.ReaperClaimsKey(it.InfoHash), btstore.SnatchersKey(it.InfoHash)},
		r.cfg.Now().UnixMilli(), it.Step.scriptStep(), it.Epoch,
		never.Grace.Milliseconds(), never.Final.Milliseconds(), never.Removal.Milliseconds(),
		unseeded.Grace.Milliseconds(), unseeded.Final.Milliseconds(), unseeded.Removal.Milliseconds())
	if err != nil {
		return Outcome{}, fmt.Errorf("reaper: %s: %w", name, err)
	}
	if len(raw) < 7 {
		return Outcome{}, fmt.Errorf("reaper: %s: reaper_step.lua replied %d elements", name, len(raw))
	}
	text := func(v any) string { s, _ := v.(string); return s }
	rep := stepReply{reason: text(raw[1]), gen: text(raw[2]), torrentID: text(raw[4]), uploader: text(raw[5]), state: text(raw[6])}
	rep.code, _ = raw[0].(int64)
	rep.run, _ = strconv.ParseInt(text(raw[3]), 10, 64)
	for _, u := range raw[7:] {
		rep.invited = append(rep.invited, text(u))
	}
	out := Outcome{Done: rep.code == 1, Reason: rep.reason}
	if rep.code < 0 {
		r.cfg.Logger.Info("reaper: step refused, nothing changed", "item", name, "reason", rep.reason)
	}
	if out.Done || (republish && rep.code == 0) {
		events, err := r.stepEvents(ctx, it, rep)
		if err == nil {
			err = r.publish(ctx, events)
		}
		if err != nil {
			return out, err
		}
	}
	if out.Done {
		switch it.Step {
		case NotifyInitial:
			r.count(ctx, "initial_done", 1)
			r.count(ctx, "invited", int64(len(rep.invited)))
		case NotifyFinal:
			r.count(ctx, "final_done", 1)
		case Remove:
			r.count(ctx, "removed", 1)
			r.cfg.Logger.Info("reaper: removed an unseeded torrent", "info_hash", btstore.HexInfoHash(it.InfoHash), "epoch", it.Epoch)
			r.unregister(ctx, it.InfoHash)
		}
	}
	return out, nil
}

// stepEvents are the events of a step done (or done before): the
// invitations of an initial notice, the removal's message.
func (r *Reaper) stepEvents(ctx context.Context, it Item, rep stepReply) ([]Event, error) {
	run := time.UnixMilli(rep.run).UTC()
	switch it.Step {
	case NotifyInitial:
		if len(rep.invited) == 0 {
			return nil, nil
		}
		return []Event{newEvent(KindInvite, eventKey(KindInvite, it.InfoHash, rep.gen), InviteBody{
			InfoHash: btstore.HexInfoHash(it.InfoHash), TorrentID: rep.torrentID, Uploader: rep.uploader, Users: rep.invited, Run: run,
		})}, nil
	case Remove:
		snatchers, err := r.rdb.SMembers(ctx, btstore.SnatchersKey(it.InfoHash)).Result()
		if err != nil {
			return nil, fmt.Errorf("reaper: snatchers: %w", err)
		}
		snatchers = slices.DeleteFunc(snatchers, func(u string) bool { return u == rep.uploader })
		slices.Sort(snatchers)
		if snatchers == nil {
			snatchers = []string{}
		}
		return []Event{newEvent(KindRemoved, eventKey(KindRemoved, it.InfoHash, rep.gen), RemovedBody{
			InfoHash: btstore.HexInfoHash(it.InfoHash), TorrentID: rep.torrentID, State: rep.state, Uploader: rep.uploader,
			Snatchers: snatchers, Run: run,
		})}, nil
	}
	return nil, nil
}

// unregister drops a removed torrent from the registry and indexes; a
// failure is retried by the next Plan, which sees the removed state.
func (r *Reaper) unregister(ctx context.Context, hash bittorrent.InfoHash) {
	if r.cfg.Unregister == nil {
		return
	}
	if err := r.cfg.Unregister(ctx, hash); err != nil {
		r.cfg.Logger.Warn("reaper: unregistering a removed torrent failed; the next run retries", "info_hash", btstore.HexInfoHash(hash), "error", err)
	}
}
