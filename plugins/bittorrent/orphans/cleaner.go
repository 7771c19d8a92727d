package orphans

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var torrentScript = btstore.Script("orphan_torrent.lua", btstore.FedRecord())

// Config configures a Cleaner.
type Config struct {
	// Store is the swarm store's configuration, defaults filled in
	// (swarm.Store.Config): the mode, the open-mode retention, and the
	// intervals that set the shortest window.
	Store  swarm.Config
	Policy Policy
	// FeedDeleted, when set, hears of the user records of a torrent that
	// cleanup deleted with a numbered change (seq > 0), before cleanup
	// reports the torrent gone: swarm.Store.FeedDeletedRecords delivers
	// the rows their writer may not have (the lead's decision 5). With
	// accounting off there is no feed, and it is nil.
	FeedDeleted func(ctx context.Context, hash bittorrent.InfoHash, records []btstore.DeletedUserRecord)
	// Now is the clock (time.Now when nil); tests inject one.
	Now    func() time.Time
	Logger *slog.Logger
}

// Report counts what cleanup read and removed.
type Report struct {
	Scanned          int // keys and entries read by the walks
	Due              int // due entries read (torrents and users recorded as possible orphans)
	Torrents         int // torrent records
	UserRecords      int // user-torrent records
	PeerRecords      int
	Timeouts         int // stray timeout keys (no TTL)
	ReaperStates     int
	SeenSets         int // scoring's per-torrent IP sets
	ScoreKeys        int // scoring's tombstones, histories, tracker lists, trackers' seen sets and pending IPs
	IPMetrics        int // per-torrent unique-IP metric keys (counters, markers) of gone torrents
	UserEntries      int // entries of users' sets (with their versions)
	RegistryEntries  int
	RegistryRestored int // registry entries put back after a registration raced the delete
	ScoreRevisions   int // score index revision entries (and index entries) of gone score records
	PasskeysListed   int // mapped passkeys found missing from their user's listing, listed
	StaleListings    int // listed passkeys found unmapped (a listing raced a RemoveUser), dropped
	UsersPurged      int // removed users whose own keys were deleted (their records counted in UserRecords)
	PurgeKept        int // records of purged users kept because a peer is still counted
	Passes           int // walks that finished a pass
}

// Removed is the number of records of every kind removed.
func (r Report) Removed() int {
	return r.Torrents + r.UserRecords + r.PeerRecords + r.Timeouts + r.ReaperStates + r.SeenSets + r.ScoreKeys + r.IPMetrics +
		r.UserEntries + r.RegistryEntries + r.ScoreRevisions + r.UsersPurged + r.StaleListings
}

// Add adds o's counts to r (a running total of steps).
func (r *Report) Add(o Report) { r.add(o) }

func (r *Report) add(o Report) {
	r.Scanned += o.Scanned
	r.Due += o.Due
	r.Torrents += o.Torrents
	r.UserRecords += o.UserRecords
	r.PeerRecords += o.PeerRecords
	r.Timeouts += o.Timeouts
	r.ReaperStates += o.ReaperStates
	r.SeenSets += o.SeenSets
	r.ScoreKeys += o.ScoreKeys
	r.IPMetrics += o.IPMetrics
	r.UserEntries += o.UserEntries
	r.RegistryEntries += o.RegistryEntries
	r.RegistryRestored += o.RegistryRestored
	r.ScoreRevisions += o.ScoreRevisions
	r.PasskeysListed += o.PasskeysListed
	r.StaleListings += o.StaleListings
	r.UsersPurged += o.UsersPurged
	r.PurgeKept += o.PurgeKept
	r.Passes += o.Passes
}

// Cleaner removes orphaned records. It holds no lock and keeps no state
// but its cursors in Redis, so any number of frontends may run it beside
// live traffic; it is safe for concurrent use.
type Cleaner struct {
	rdb    redis.UniversalClient
	store  *swarm.Store // the user calls (listing, purge); never started
	cfg    Config
	walks  []*walk
	mu     sync.Mutex // serialises this process's ticks (others may run elsewhere)
	logger *slog.Logger
}

// New returns a Cleaner, or an error when the window is refused (see
// CheckWindow) or the bounds are not positive.
func New(rdb redis.UniversalClient, cfg Config) (*Cleaner, error) {
	if rdb == nil {
		return nil, errors.New("orphans: nil Redis client")
	}
	if err := CheckWindow(cfg.Policy.Window, cfg.Store); err != nil {
		return nil, err
	}
	if cfg.Policy.BackstopPeriod == 0 {
		cfg.Policy.BackstopPeriod = DefaultBackstopPeriod
	}
	if cfg.Policy.ScanCount <= 0 || cfg.Policy.MaxKeysPerTick < cfg.Policy.ScanCount {
		return nil, fmt.Errorf("orphans: scan count %d and keys per tick %d must be positive, keys per tick at least the scan count",
			cfg.Policy.ScanCount, cfg.Policy.MaxKeysPerTick)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	store, err := swarm.New(rdb, cfg.Store)
	if err != nil {
		return nil, err
	}
	c := &Cleaner{rdb: rdb, store: store, cfg: cfg, logger: cfg.Logger}
	c.walks = []*walk{
		// every tick: the due sets, what became unreferenced as it happened
		{name: "due", sources: dueShards, page: c.dueTorrentPage},
		{name: "udue", sources: dueShards, page: c.dueUserPage},
		// the backstop: a pass every BackstopPeriod (docs/bittorrent-orphans.md)
		{name: "torrents", sources: c.masters, page: c.torrentPage, backstop: true},
		{name: "users", sources: c.masters, page: c.userPage, backstop: true},
		{name: "registry", sources: single, page: c.registryPage, backstop: true},
		{name: "revs", sources: revShards, page: c.revsPage, backstop: true},
		// also whenever a removed user waits for a pass of it (passkeysNeeded)
		{name: walkPasskeys, sources: c.masters, page: c.passkeyPage, recordStart: true, backstop: true},
		{name: "removed", sources: single, page: c.removedPage},
	}
	return c, nil
}

// Policy returns the cleaner's policy.
func (c *Cleaner) Policy() Policy { return c.cfg.Policy }

func (c *Cleaner) nowMillis() int64 { return c.cfg.Now().UnixMilli() }

func (c *Cleaner) windowMillis() int64 { return c.cfg.Policy.Window.Milliseconds() }

// stale says a timestamp of interest (ms) is older than the window.
func (c *Cleaner) stale(now, ms int64) bool { return now-ms > c.windowMillis() }

// Tick does one bounded step of every walk from where the last tick (on
// any frontend) left it: at most MaxKeysPerTick keys or entries each, and
// never past the end of a pass. It never runs in a request's path: the
// plugin's "orphans" job calls it.
func (c *Cleaner) Tick(ctx context.Context) (Report, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var total Report
	for _, w := range c.walks {
		r, err := c.step(ctx, w, false)
		total.add(r)
		if err != nil {
			return total, fmt.Errorf("orphans: %s: %w", w.name, err)
		}
	}
	return total, nil
}

// Pass runs every walk once over everything, the backstop's included,
// from the start, ignoring the per-tick bound, the backstop's period and
// the stored cursors: for tests, benchmarks and an operator who wants it
// now.
func (c *Cleaner) Pass(ctx context.Context) (Report, error) { return c.pass(ctx, true) }

// DuePass is Pass without the backstop walks (but the passkeys walk
// when a removed user waits for it): what ticks do between two backstop
// passes, unbounded.
func (c *Cleaner) DuePass(ctx context.Context) (Report, error) { return c.pass(ctx, false) }

func (c *Cleaner) pass(ctx context.Context, backstop bool) (Report, error) {
	var total Report
	for _, w := range c.walks {
		if w.backstop && !backstop {
			if w.name != walkPasskeys {
				continue
			}
			if wait, err := c.removedUserWaits(ctx); err != nil || !wait {
				if err != nil {
					return total, err
				}
				continue
			}
		}
		r, err := c.step(ctx, w, true)
		total.add(r)
		if err != nil {
			return total, fmt.Errorf("orphans: %s: %w", w.name, err)
		}
	}
	return total, nil
}

// A walk visits a list of sources (masters, or index shards) with a
// SCAN-style cursor in each; its position is "<source>:<cursor>".
type walk struct {
	name    string
	sources func(ctx context.Context) ([]source, error)
	// page reads one page at cursor of src and removes its orphans; it
	// returns the next cursor (0 at the end) and how many it read.
	page func(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error)
	// recordStart: when a pass finishes, its start time (ms) is stored in
	// btstore.OrphanPassesKey as "<name>:covered", for checks that need a whole pass
	// that began after some moment (the purge of a removed user).
	recordStart bool
	// backstop: a tick begins a pass only BackstopPeriod after the last
	// one ended (or, for the passkeys walk, when a removed user waits
	// for one); a pass under way goes on every tick.
	backstop bool
}

// source is one thing a walk scans: a master (node) or a shard number.
type source struct {
	name  string
	node  redis.Cmdable
	shard int
}

func single(context.Context) ([]source, error) { return []source{{name: "all"}}, nil }

func revShards(context.Context) ([]source, error) {
	out := make([]source, btstore.ScoreIndexShards)
	for i := range out {
		out[i] = source{name: strconv.Itoa(i), shard: i}
	}
	return out, nil
}

// masters lists the masters of a cluster by address, or the one server.
func (c *Cleaner) masters(ctx context.Context) ([]source, error) {
	cluster, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return []source{{name: "all", node: c.rdb}}, nil
	}
	var mu sync.Mutex
	var out []source
	err := cluster.ForEachMaster(ctx, func(_ context.Context, master *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, source{name: master.Options().Addr, node: master})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, err
}

// step advances one walk: a bounded tick from the stored position, or
// (full) a whole pass from the start.
func (c *Cleaner) step(ctx context.Context, w *walk, full bool) (Report, error) {
	var report Report
	sources, err := w.sources(ctx)
	if err != nil || len(sources) == 0 {
		return report, err
	}
	index, cursor, started := 0, uint64(0), int64(0)
	if !full {
		pos, err := c.rdb.HGet(ctx, btstore.OrphanCursorsKey, w.name).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return report, err
		}
		index, cursor, started = parsePosition(pos, sources)
		if w.backstop && index == 0 && cursor == 0 && started > 0 {
			// between passes: started is when the last one ended
			begin, err := c.backstopDue(ctx, w, started)
			if err != nil || !begin {
				return report, err
			}
		}
	}
	if index == 0 && cursor == 0 {
		started = c.nowMillis() // a pass begins
	}
	budget := c.cfg.Policy.MaxKeysPerTick
	for full || report.Scanned < budget {
		if err := ctx.Err(); err != nil {
			return report, err
		}
		next, err := w.page(ctx, sources[index], cursor, &report)
		if err != nil {
			return report, err
		}
		cursor = next
		if cursor != 0 {
			continue
		}
		index++
		if index == len(sources) {
			report.Passes++
			index = 0
			if err := c.rdb.HIncrBy(ctx, btstore.OrphanPassesKey, w.name, 1).Err(); err != nil {
				return report, err
			}
			if w.recordStart && started > 0 {
				if err := c.rdb.HSet(ctx, btstore.OrphanPassesKey, w.name+":covered", started).Err(); err != nil {
					return report, err
				}
			}
			started = c.nowMillis() // the next pass begins here
			break                   // never more than one pass per tick
		}
	}
	if !full {
		pos := sources[index].name + "|" + strconv.FormatUint(cursor, 10) + "|" + strconv.FormatInt(started, 10)
		if err := c.rdb.HSet(ctx, btstore.OrphanCursorsKey, w.name, pos).Err(); err != nil {
			return report, err
		}
	}
	return report, nil
}

// backstopDue says a backstop walk whose last pass ended at ended (ms)
// begins another: its period has run, or (the passkeys walk) a removed
// user older than the window waits for a pass begun after its removal,
// which its purge needs.
func (c *Cleaner) backstopDue(ctx context.Context, w *walk, ended int64) (bool, error) {
	now := c.nowMillis()
	if now-ended >= c.cfg.Policy.BackstopPeriod.Milliseconds() {
		return true, nil
	}
	if w.name != walkPasskeys {
		return false, nil
	}
	return c.removedUserWaits(ctx)
}

// removedUserWaits says a removed user, marked longer than the window
// ago, waits for a pass of the passkeys walk begun after its removal.
func (c *Cleaner) removedUserWaits(ctx context.Context) (bool, error) {
	covered, err := c.rdb.HGet(ctx, btstore.OrphanPassesKey, walkPasskeys+":covered").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	waiting, err := c.rdb.ZCount(ctx, btstore.RemovedUsersKey, strconv.FormatInt(covered, 10),
		strconv.FormatInt(c.nowMillis()-c.windowMillis()-1, 10)).Result()
	return waiting > 0, err
}

// parsePosition reads "<source>|<cursor>|<pass start, ms>" (positions
// stored before the start was kept have none: 0, so such a pass records
// no start); a source that is gone (a resharded cluster) starts over at
// the first.
func parsePosition(pos string, sources []source) (int, uint64, int64) {
	name, rest, ok := strings.Cut(pos, "|")
	if !ok {
		return 0, 0, 0
	}
	cursorText, startText, _ := strings.Cut(rest, "|")
	cursor, err := strconv.ParseUint(cursorText, 10, 64)
	if err != nil {
		return 0, 0, 0
	}
	started, _ := strconv.ParseInt(startText, 10, 64)
	for i, s := range sources {
		if s.name == name {
			return i, cursor, started
		}
	}
	return 0, 0, 0
}

// Passes returns how many passes each walk has finished on every
// frontend (for tests and metrics).
func (c *Cleaner) Passes(ctx context.Context) (map[string]int64, error) {
	all, err := c.rdb.HGetAll(ctx, btstore.OrphanPassesKey).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(all))
	for k, v := range all {
		out[k], _ = strconv.ParseInt(v, 10, 64)
	}
	return out, nil
}

// evalCall is one script invocation in a pipelined batch.
type evalCall struct {
	keys []string
	args []any
	// torrent is the torrent of an orphan_torrent.lua call (torrentCall)
	torrent bittorrent.InfoHash
}

// runPipelined runs many invocations of one script in one pipeline
// (split by node on a cluster), loading the script where a node lacks it.
func (c *Cleaner) runPipelined(ctx context.Context, script *luascript.Script, calls []evalCall) []*redis.Cmd {
	if len(calls) == 0 {
		return nil
	}
	run := make([]luascript.Call, len(calls))
	for i, call := range calls {
		run[i] = luascript.Call{Script: script, Keys: call.keys, Args: call.args}
	}
	return luascript.RunPipelined(ctx, c.rdb, run)
}
