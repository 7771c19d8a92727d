package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/btloadgen"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The private announce benchmark (issue 28): hoard's tracker in private
// mode, registered torrents and users whose passkeys are in the announce
// URLs, every announce reporting transfer, once with accounting on (credited
// transfer, the ledger, the feed to the site) and once with accounting.off,
// in turn. Each configuration has its own redis-server, so neither sees the
// other's records and each one's Redis CPU is its own.
//
// Each peer stays on one torrent (btloadgen's Sticky), and the warm-up
// announces every peer exactly once (btloadgen's EachPeerOnce), so every
// measured announce is a re-announce with a delta to credit, as a
// tracker's steady state is. The feed runs (both trackers have an outbox
// the site would poll) every --feed-interval, 1s by default.
//
// The pool is large (400,000 peers on 20,000 torrents by default) so that
// a peer re-announces many seconds apart at the rates measured, as a real
// client does (every 30 minutes): the write-behind (1 s) and the feed
// (its interval) then meet each announce on its own. Until s45 the pool
// was 20,000 peers, and at 30,000-48,000 announces/s each peer
// re-announced every 0.4-0.7 s: the write-behind folded 1.5 (on) to 2.4
// (off) announces into one write, more for the faster configuration, so
// the ratio measured that feedback, not what accounting costs. The
// summary prints how far apart a peer's announces were.

// maxWarmupPasses bounds --warmup-passes: each pass announces every peer
// once (400,000 by default, about a minute a tracker and transport).
const maxWarmupPasses = 20

type privateBenchOptions struct {
	modes     []string
	runs      int
	announces int
	duration  time.Duration
	warmup    int
	// warmupPasses is how many times the warm-up announces every peer
	// (with warmup 0): the first pass makes each peer known, each later
	// one a re-announce with transfer, so every record has had a change
	// before the runs (its seq, writer stamp and first ledger entry
	// written), as a running tracker's records have.
	warmupPasses int
	torrents     int
	peers        int
	users        int
	numWant      int
	seeders      float64
	concurrency  int
	seed         uint64
	pipelines    int
	plugin       string
	feed         time.Duration
	// stopFraction: btloadgen's StopFraction, the swarms' churn
	stopFraction float64
	// site: a site reads and acknowledges each outbox (benchSite).
	site bool
	// atOnce: runs in which both trackers take announces at the same
	// time (atOnceRuns).
	atOnce int
	// onAccounting is JSON merged into the accounting-on tracker's
	// "accounting" settings, to tell its parts' costs apart
	onAccounting string
	// cpuProfile names the CPU profile of the measured runs in
	// profileMode, both trackers in this process, each labelled
	cpuProfile  string
	profileMode string
}

// The measured runs: 3 of each configuration, in turn, of 30 s each. Runs
// of 40,000 announces (about 1 s) were bimodal on the quiet 2-core machine
// (one configuration's five runs spread 25.7k-49.8k/s, the paired on/off
// ratios 0.47-1.64): a second is shorter than the machine's slow spells, a
// GC cycle's share and the feed's rounds (1 s apart), so a run's rate said
// which of those it met more than what it costs. 10 s held ten feed rounds
// and averaged the spells out, but the +settle rate paid a fixed wait
// there: with the feed, a run's last rows are delivered at the feed's next
// tick after the write-behind's last write, 0-1 s of waiting (0.45 s in
// s46's runs, 1.46 s settling on against 1.02 s off) that is latency, not
// work a site sustains, and took 4-5% off a 10 s run's on/off ratio. 30 s
// cuts that to under 2%, while deferred work that grows with the run (s44's
// capped feed rounds: 10-12 s of settling after 10 s) still shows whole.
// The order alternates, on off off on on off
// (runOrder), and each on run is paired with the off run beside it, which
// shares its moment's load; the median of those ratios is printed beside
// the ratio of the medians. It is the one to read: in three invocations
// it repeated within 0.04 (docs/bittorrent-site.md, s44), while one slow
// run moves the ratio of medians.
const (
	defaultPrivateRuns            = 3
	defaultPrivateDuration        = 30 * time.Second
	defaultPrivateTorrents        = 20_000
	defaultPrivatePeersPerTorrent = 20
	defaultPrivateUsers           = 5_000
	// One measured announce in 20 is a peer stopping, and its next one a
	// start: a client announcing every 30 minutes whose sessions last
	// some 10 hours, as seedboxes and desktop clients mixed do. Real
	// swarms churn, so a running tracker's Redis always holds records
	// counting down to their expiry (a stopped peer's, PeerRetention
	// long): without churn (until s56) the accounting-off tracker's Redis
	// held no key with a TTL at all, and skipped the expires look-up on
	// every key it touched, which the accounting-on one (its
	// many-addresses keys expire) paid: 2.9k of the 37k instructions an
	// announce between them (callgrind, s56).
	defaultPrivateStopFraction = 0.05
)

// privateBenchClient is the peer_id prefix btloadgen's peers send; private
// mode admits only whitelisted clients.
const privateBenchClient = "-HL0001-"

func benchAnnouncePrivateCommand() *cobra.Command {
	var o privateBenchOptions
	cmd := &cobra.Command{
		Use:   "announce-private",
		Short: "Announces per second from hoard's tracker in private mode with accounting on and off, side by side",
		Long: `Starts two redis-servers and two hoard trackers in private mode (HTTP and
UDP on 127.0.0.1, each a hoard-bittorrent process under a plugin host,
--plugin), one with accounting on and one with accounting.off. Each gets
the same registered torrents, users (passkeys in the announce URL path, BEP 41
URL data over UDP) and whitelisted client. Every announce reports uploaded
and downloaded counters that grow, so accounting credits each one. Per mode,
both are warmed up and then measured in turn, on, off, off, on, … (--runs
each, each --duration long, or --announces). It prints medians, the plugin's
and Redis's CPU per announce, and the ratio on/off. A run's work counts until
it is done: until no write has reached its Redis for 1.2 s (longer than the
trackers' flush), and with accounting on the feed has delivered every row the
run made. Each run has two rates: over the run alone, and over the run plus
that settling (the work it deferred: the write-behind, the feed's rounds),
which is what a site sustains. Each run's line shows its CPU per announce,
Redis's forks (AOF rewrites) and the CPU the other tracker and its Redis
used meanwhile (work overlapping from the run before). --cpuprofile (with --plugin "") profiles the measured runs of
--cpuprofile-mode and their settling; each tracker's goroutines carry the
label tracker=accounting-on or tracker=accounting-off.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchAnnouncePrivate(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.modes, "modes", []string{string(btloadgen.ModeHTTPKeepAlive), string(btloadgen.ModeUDP)},
		"modes to run: http-keepalive, http-close, udp")
	f.IntVar(&o.runs, "runs", defaultPrivateRuns, "measured runs per configuration and mode; medians are reported")
	f.IntVar(&o.atOnce, "at-once", defaultPrivateRuns, "then runs per mode in which both trackers take announces at the same time, --duration long, each half of --concurrency (0: none)")
	f.IntVar(&o.announces, "announces", 0, "announces per measured run (0: no count, --duration ends it); with --duration, the first reached ends a run")
	f.DurationVar(&o.duration, "duration", defaultPrivateDuration, "length of each measured run (0: --announces ends it)")
	f.IntVar(&o.warmup, "warmup", 0, "announces at random peers per configuration and mode before measuring (0: every peer exactly once)")
	f.IntVar(&o.warmupPasses, "warmup-passes", 1, "with --warmup 0: how many times the warm-up announces every peer (2: every record has been credited once before the runs)")
	f.IntVar(&o.torrents, "torrents", defaultPrivateTorrents, "registered torrents the announces spread over")
	f.IntVar(&o.peers, "peers", 0, fmt.Sprintf("simulated peers (0: %d x --torrents)", defaultPrivatePeersPerTorrent))
	f.IntVar(&o.users, "users", defaultPrivateUsers, "registered users; peer p announces with user p mod --users's passkey")
	f.IntVar(&o.numWant, "numwant", btloadgen.DefaultNumWant, "numwant of every announce")
	f.Float64Var(&o.seeders, "seeders", btloadgen.DefaultSeederFraction, "fraction of peers that are seeders")
	f.IntVar(&o.concurrency, "concurrency", btloadgen.DefaultConcurrency, "announces in flight")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the torrents and peers")
	f.IntVar(&o.pipelines, "announce-pipelines", 0, "hoard's shared announce pipelines (0: its default)")
	f.StringVar(&o.plugin, "plugin", defaultPluginBinary(), `hoard-bittorrent binary the trackers run as ("": in this process; the plugin column is then "-")`)
	f.Float64Var(&o.stopFraction, "stop-fraction", defaultPrivateStopFraction, "fraction of measured announces that are a peer stopping (its next one starts it again), for both trackers: the swarms' churn (0: none, as before s56)")
	f.DurationVar(&o.feed, "feed-interval", time.Second, "accounting.feed_interval of both trackers, each with an outbox (0: no outbox, so no feed)")
	f.BoolVar(&o.site, "site", true, "a site reads and acknowledges each tracker's outbox while announces run (false: events pile up in Redis, as before s51)")
	f.StringVar(&o.onAccounting, "on-accounting", "", `JSON object merged into the accounting-on tracker's "accounting" settings, e.g. {"ledger_entries":0} to measure without the ledger`)
	f.StringVar(&o.cpuProfile, "cpuprofile", "", `write a CPU profile of the measured runs in --cpuprofile-mode to this file and print each tracker's top functions (needs --plugin "")`)
	f.StringVar(&o.profileMode, "cpuprofile-mode", string(btloadgen.ModeUDP), "the mode --cpuprofile profiles")
	return cmd
}

func (o *privateBenchOptions) validate() error {
	switch {
	case o.runs < 1 || o.runs > 100:
		return errors.New("--runs must be between 1 and 100")
	case o.announces < 0 || o.announces > maxBenchAnnounces:
		return fmt.Errorf("--announces must be between 0 and %d", maxBenchAnnounces)
	case o.duration < 0 || o.duration > time.Hour:
		return errors.New("--duration must be between 0 and 1h")
	case o.announces == 0 && o.duration == 0:
		return errors.New("--announces and --duration are both 0: nothing would end a run")
	case o.atOnce < 0 || o.atOnce > 100:
		return errors.New("--at-once must be between 0 and 100")
	case o.atOnce > 0 && o.duration == 0:
		return errors.New("--at-once runs end with --duration: give one, or --at-once 0")
	case o.atOnce > 0 && o.concurrency < 2:
		return errors.New("--at-once halves --concurrency between the trackers: give at least 2")
	case o.warmup < 0 || o.warmup > maxBenchAnnounces:
		return fmt.Errorf("--warmup must be between 0 and %d", maxBenchAnnounces)
	case o.warmupPasses < 1 || o.warmupPasses > maxWarmupPasses:
		return fmt.Errorf("--warmup-passes must be between 1 and %d", maxWarmupPasses)
	case o.warmup > 0 && o.warmupPasses != 1:
		return errors.New("--warmup-passes counts passes over every peer: only with --warmup 0")
	case o.torrents < 1 || o.torrents > 100_000:
		return errors.New("--torrents must be between 1 and 100000 (each is registered before the runs)")
	case o.peers < 0 || o.peers > 100*maxBenchTorrents:
		return fmt.Errorf("--peers must be between 0 and %d", 100*maxBenchTorrents)
	case o.users < 1 || o.users > 100_000:
		return errors.New("--users must be between 1 and 100000")
	case o.numWant < 1 || o.numWant > 200:
		return errors.New("--numwant must be between 1 and 200")
	case o.seeders < 0 || o.seeders > 1:
		return errors.New("--seeders must be between 0 and 1")
	case o.pipelines < -1 || o.pipelines > 64:
		return errors.New("--announce-pipelines must be between -1 and 64")
	case o.concurrency < 1 || o.concurrency > maxBenchConcurrency:
		return fmt.Errorf("--concurrency must be between 1 and %d", maxBenchConcurrency)
	case !(o.stopFraction >= 0 && o.stopFraction < 1): // NaN too
		return errors.New("--stop-fraction must be at least 0 and below 1")
	case o.feed < 0 || (o.feed > 0 && o.feed < 100*time.Millisecond) || o.feed > time.Hour:
		return errors.New("--feed-interval must be 0 (no feed) or between 100ms and 1h")
	case o.cpuProfile != "" && o.plugin != "":
		return errors.New(`--cpuprofile profiles this process: run the trackers in it with --plugin ""`)
	case o.cpuProfile != "" && !slices.Contains(o.modes, o.profileMode):
		return fmt.Errorf("--cpuprofile-mode %q is not among --modes", o.profileMode)
	}
	if err := checkAnnounceModes(o.modes); err != nil {
		return err
	}
	if o.onAccounting != "" {
		var extra map[string]any
		if err := json.Unmarshal([]byte(o.onAccounting), &extra); err != nil {
			return fmt.Errorf("--on-accounting: want a JSON object of accounting settings: %w", err)
		}
	}
	if o.peers == 0 {
		o.peers = defaultPrivatePeersPerTorrent * o.torrents
	}
	return nil
}

// privateTarget is one configuration: its tracker and its own Redis.
type privateTarget struct {
	*announceTarget
	accounting bool
	redis      *redis.Client
	redisURL   string
	// site reads and acknowledges the outbox (nil without a feed, or
	// with --site=false).
	site *benchSite
}

// sitePolling runs fn with the site polling t's outbox, then stops it.
// The site is paused while a run settles (its acknowledgements are writes
// the settling would wait for, and they are the site's work, not what
// the tracker deferred); afterSettle catches it up.
func (t *privateTarget) sitePolling(ctx context.Context, fn func() error) error {
	if t.site == nil {
		return fn()
	}
	t.site.start(ctx)
	err := fn()
	return errors.Join(err, t.site.stopPolling())
}

// afterSettle reads and acknowledges what the feed delivered while the
// run settled (settle calls it), so the next run starts with nothing
// left for the site.
func (t *privateTarget) afterSettle(ctx context.Context) error {
	if t.site == nil {
		return nil
	}
	return t.site.drain(ctx)
}

// privatePasskey is user i's passkey (32 characters, as a site makes them).
func privatePasskey(i int) string { return fmt.Sprintf("benchpasskey%020d", i) }

func privateUserID(i int) string { return fmt.Sprintf("u%d", i) }

// settings are a configuration's plugin settings. With the feed, both
// have an outbox (no webhook: a site would poll it), so the only
// difference is accounting.
func (o *privateBenchOptions) settings(accounting bool) json.RawMessage {
	acct := map[string]any{}
	if accounting && o.onAccounting != "" {
		_ = json.Unmarshal([]byte(o.onAccounting), &acct) // checked by validate
	}
	acct["off"] = !accounting
	raw := map[string]any{"mode": "private", "http": "127.0.0.1:0", "udp4": "127.0.0.1:0", "udp6": "",
		"announce_pipelines": o.pipelines,
		"limits":             map[string]any{"announce_rate": -1, "max_peers_per_torrent": -1},
		"accounting":         acct}
	if o.feed > 0 {
		acct["feed_interval"] = o.feed.String()
		raw["outbox"] = map[string]any{}
	}
	out, _ := json.Marshal(raw)
	return out
}

// withPrivateStore runs fn on the store of a tracker in this process over
// redisURL (listening on loopback ports of its own, which nothing uses),
// then closes that tracker: the bench registers and reads through it.
func withPrivateStore(ctx context.Context, redisURL string, settings json.RawMessage, fn func(*btplugin.Tracker) error) error {
	p, err := btplugin.New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	tr := p.(*btplugin.Tracker)
	defer func() { _ = tr.Close(context.Background()) }()
	if err := tr.Configure(ctx, plugins.Config{Name: "bittorrent", RedisURL: redisURL, Settings: settings}); err != nil {
		return err
	}
	return fn(tr)
}

// registerPrivateLoad registers the load's torrents, users and client.
func (o *privateBenchOptions) registerPrivateLoad(ctx context.Context, tr *btplugin.Tracker) error {
	store := tr.Store()
	if err := store.AddClient(ctx, privateBenchClient, "hoard-loadgen"); err != nil {
		return err
	}
	for i := range o.users {
		if err := store.AddUser(ctx, privatePasskey(i), privateUserID(i)); err != nil {
			return err
		}
	}
	for i, h := range btloadgen.InfoHashes(o.seed, o.torrents) {
		if err := store.RegisterTorrent(ctx, bittorrent.InfoHash(h), fmt.Sprintf("t%d", i)); err != nil {
			return err
		}
	}
	return nil
}

func (o *privateBenchOptions) loadConfig(mode btloadgen.Mode, target string, announces int, duration time.Duration) btloadgen.Config {
	seeders := o.seeders
	if seeders == 0 {
		seeders = -1
	}
	paths := make([]string, o.users)
	for i := range paths {
		paths[i] = "/" + privatePasskey(i) + "/announce"
	}
	return btloadgen.Config{
		Mode: mode, Target: target, Torrents: o.torrents, Peers: o.peers, Seed: o.seed,
		NumWant: o.numWant, SeederFraction: seeders, Concurrency: o.concurrency, Announces: announces, Duration: duration,
		Paths: paths, Transfer: true, Sticky: true, StopFraction: o.stopFraction,
	}
}

func benchAnnouncePrivate(ctx context.Context, o privateBenchOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hoard-bench-announce-private-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var targets []*privateTarget
	for _, accounting := range []bool{true, false} {
		name := "accounting-on"
		if !accounting {
			name = "accounting-off"
		}
		rs, infoClient, stopRedis, err := startBenchRedis(ctx, filepath.Join(dir, name), quiet)
		if err != nil {
			return err
		}
		defer stopRedis()
		settings := o.settings(accounting)
		started := time.Now()
		if err := withPrivateStore(ctx, rs.URL(), settings, func(tr *btplugin.Tracker) error {
			return o.registerPrivateLoad(ctx, tr)
		}); err != nil {
			return fmt.Errorf("%s: registering the load: %w", name, err)
		}
		fmt.Printf("%s: redis-server %s; registered %d torrents, %d users, client %q in %s\n",
			name, rs.URL(), o.torrents, o.users, privateBenchClient, time.Since(started).Round(time.Millisecond))
		t, stop, err := o.startTracker(ctx, name, rs.URL(), settings, quiet)
		if err != nil {
			return err
		}
		defer stop()
		target := &privateTarget{announceTarget: t, accounting: accounting, redis: infoClient, redisURL: rs.URL()}
		if o.feed > 0 && o.site {
			if target.site, err = newBenchSite(infoClient); err != nil {
				return err
			}
		}
		targets = append(targets, target)
	}
	where := "in this process"
	if o.plugin != "" {
		where = "each a process " + o.plugin
	}
	fmt.Printf("bench announce-private: trackers %s; GOMAXPROCS=%d; load average %s\n", where, runtime.GOMAXPROCS(0), loadAverage())
	warmup := "every peer announcing once"
	if o.warmupPasses > 1 {
		warmup = fmt.Sprintf("every peer announcing %d times (each record credited before the runs)", o.warmupPasses)
	}
	if o.warmup > 0 {
		warmup = fmt.Sprintf("%d announces at random peers", o.warmup)
	}
	fmt.Printf("load: %d torrents, %d peers (each on one torrent) over %d users' passkeys, every announce reports transfer, numwant %d, %.0f%% seeders, %d in flight; per configuration and mode a warm-up of %s, then %d runs of %s (on, off, off, on, ...), each settled before the next\n",
		o.torrents, o.peers, o.users, o.numWant, 100*o.seeders, o.concurrency, warmup, o.runs, o.runLength())
	if o.stopFraction > 0 {
		fmt.Printf("churn: %.1f%% of the measured announces are a peer stopping, its next one a start (--stop-fraction)\n", 100*o.stopFraction)
	} else {
		fmt.Println("churn: none, every measured announce a plain re-announce (--stop-fraction 0)")
	}
	switch {
	case o.feed > 0 && o.site:
		fmt.Printf("feed: both trackers have an outbox; accounting.feed_interval %s; the site reads and acknowledges each outbox every %s while announces run, and once more after each run settled\n", o.feed, siteInterval)
	case o.feed > 0:
		fmt.Printf("feed: both trackers have an outbox; accounting.feed_interval %s; nothing reads the outbox (--site=false)\n", o.feed)
	default:
		fmt.Println("feed: off (no outbox)")
	}
	if o.onAccounting != "" {
		fmt.Printf("accounting-on's accounting settings also: %s\n", o.onAccounting)
	}
	if o.atOnce > 0 {
		fmt.Printf("then per mode %d runs of %s with both trackers at once, %d in flight each, settled together (\"on/off at once\": on's rate over off's in the same run)\n",
			o.atOnce, o.duration, o.concurrency/2)
	}

	type modeFigures struct {
		mode btloadgen.Mode
		runs [][]announceRun
		// atOnce: each at-once run's on and off (atOnceRuns)
		atOnce [][2]announceRun
		// commands per target: INFO commandstats over the measured runs
		commands  []commandStats
		announces []int64
	}
	var all []modeFigures
	var profileParts []string
	for _, m := range o.modes {
		mode := btloadgen.Mode(m)
		fig := modeFigures{mode: mode, runs: make([][]announceRun, len(targets)),
			commands: []commandStats{{}, {}}, announces: make([]int64, len(targets))}
		for _, t := range targets {
			cfg := o.loadConfig(mode, t.addr(mode), o.warmup, 0)
			cfg.EachPeerOnce = o.warmup == 0
			for pass := range o.warmupPasses {
				var res btloadgen.Result
				err := t.sitePolling(ctx, func() (err error) {
					res, err = btloadgen.Run(ctx, cfg)
					return err
				})
				if err != nil {
					return err
				}
				if res.Announces == 0 {
					return fmt.Errorf("%s %s warm-up: no announce succeeded (%s)", t.name, mode, res.FirstError)
				}
				if err := o.settle(ctx, t, &announceRun{}); err != nil {
					return fmt.Errorf("%s %s warm-up: %w", t.name, mode, err)
				}
				fmt.Printf("  warm-up %-14s %-14s pass %d: %s\n", mode, t.name, pass+1, res)
			}
		}
		for run := range o.runs {
			for _, i := range runOrder(run, len(targets)) {
				t := targets[i]
				before, err := redisCommandStats(ctx, t.redis)
				if err != nil {
					return err
				}
				forksBefore, err := redisForks(ctx, t.redis)
				if err != nil {
					return err
				}
				var stopProfile func()
				if o.cpuProfile != "" && string(mode) == o.profileMode {
					part := fmt.Sprintf("%s.%s.run%d", o.cpuProfile, t.name, run+1)
					if stopProfile, err = startCPUProfile(part); err != nil {
						return err
					}
					profileParts = append(profileParts, part)
				}
				other := targets[1-i]
				otherBefore, err := other.cpu(ctx)
				if err != nil {
					return err
				}
				var r announceRun
				err = t.sitePolling(ctx, func() (err error) {
					r, err = measureAnnounceRun(ctx, o.loadConfig(mode, t.addr(mode), o.announces, o.duration), t.announceTarget, t.redis, "")
					return err
				})
				// The other tracker should be idle now: its last run
				// settled. What it did meanwhile (a flush, a feed round, a
				// GC cycle left over) took the machine from this run.
				var otherDuring time.Duration
				if err == nil {
					var otherAfter time.Duration
					if otherAfter, err = other.cpu(ctx); err == nil {
						otherDuring = otherAfter - otherBefore
					}
				}
				if err == nil {
					err = o.settle(ctx, t, &r)
				}
				if stopProfile != nil {
					stopProfile()
				}
				if err != nil {
					return fmt.Errorf("%s %s run %d: %w", t.name, mode, run+1, err)
				}
				after, err := redisCommandStats(ctx, t.redis)
				if err != nil {
					return err
				}
				forksAfter, err := redisForks(ctx, t.redis)
				if err != nil {
					return err
				}
				fig.commands[i].add(before, after)
				fig.announces[i] += r.res.Announces
				n := float64(max(r.res.Announces, 1))
				fmt.Printf("  run %d   %-14s %-14s %s; done %s after (CPU %s): %.0f/s with it; per announce plugin %.1f us, redis %.1f us; redis forks %d; %s meanwhile %dms CPU\n",
					run+1, mode, t.name, r.res, r.settled.Round(time.Millisecond), r.settleCPU.Round(time.Millisecond), settledRate(r),
					float64(r.peerCPU.Microseconds())/n, float64(r.redisCPU.Microseconds())/n, forksAfter-forksBefore,
					other.name, otherDuring.Milliseconds())
				fig.runs[i] = append(fig.runs[i], r)
			}
		}
		if fig.atOnce, err = o.atOnceRuns(ctx, mode, targets); err != nil {
			return err
		}
		all = append(all, fig)
	}

	fmt.Printf("\nmedians of %d runs of %s (%d in flight). CPU columns are microseconds per answered announce, counted until the run's work was done:\n", o.runs, o.runLength(), o.concurrency)
	fmt.Println("announce/s = over the run alone; +settle/s = over the run and its settling (until its deferred work, the write-behind and the feed, was done): issue 28's figure, what a site sustains")
	fmt.Println("loadgen = this process, plugin = the tracker's hoard-bittorrent process, redis = its redis-server (script = inside FCALL)")
	fmt.Printf("%-15s %-15s %10s %10s %-26s %8s %8s %6s %7s %7s %7s %7s\n",
		"mode", "accounting", "announce/s", "+settle/s", "(runs, +settle)", "p50", "p99", "errors", "loadgen", "plugin", "redis", "script")
	for _, fig := range all {
		var rates, withSettle [2]float64
		for i, t := range targets {
			s := summarizeAnnounceRuns(fig.runs[i])
			rates[i] = s.rate
			settled, settledTexts := settledRates(fig.runs[i])
			withSettle[i] = settled
			pluginCPU := "-"
			if t.processCPU != nil {
				pluginCPU = fmt.Sprintf("%.1f", s.peerCPU)
			}
			fmt.Printf("%-15s %-15s %10.0f %10.0f %-26s %8s %8s %6d %7.1f %7s %7.1f %7.1f\n",
				fig.mode, t.name, s.rate, settled, "("+settledTexts+")", millis(s.p50), millis(s.p99), s.errors,
				s.selfCPU, pluginCPU, s.redisCPU, s.scriptTime)
		}
		fmt.Printf("%-15s %-15s %10.2f %10.2f\n", fig.mode, "on/off", rates[0]/rates[1], withSettle[0]/withSettle[1])
		ratio, each := pairedRatios(fig.runs[0], fig.runs[1], func(r announceRun) float64 { return r.res.AnnouncesPerSec })
		settledRatio, settledEach := pairedRatios(fig.runs[0], fig.runs[1], settledRate)
		fmt.Printf("%-15s %-15s %10.2f %10.2f (run: %s; +settle: %s)\n", fig.mode, "on/off paired", ratio, settledRatio, each, settledEach)
		if len(fig.atOnce) > 0 {
			ratio, each := atOnceRatios(fig.atOnce, func(r announceRun) float64 { return r.res.AnnouncesPerSec })
			settledRatio, settledEach := atOnceRatios(fig.atOnce, settledRate)
			fmt.Printf("%-15s %-15s %10.2f %10.2f (run: %s; +settle: %s)\n", fig.mode, "on/off at once", ratio, settledRatio, each, settledEach)
		}
		// How far apart one peer's announces were (the pool over the
		// rate): below the write-behind's second or the feed interval,
		// announces of a peer were folded into one write, and the ratio
		// says more about that than about accounting (see the top).
		fmt.Printf("%-15s %-15s a peer re-announced every %.1fs (on) and %.1fs (off) on average (--peers / announce/s)\n",
			fig.mode, "", float64(o.peers)/max(rates[0], 1), float64(o.peers)/max(rates[1], 1))
	}
	fmt.Println("\nRedis commands per announce over the measured runs (INFO commandstats; a script's commands count on their own lines and inside fcall's time), the 10 whose time differs most:")
	fmt.Printf("%-15s %-22s %9s %9s %9s %9s\n", "mode", "command", "on calls", "off calls", "on us", "off us")
	for _, fig := range all {
		for _, d := range compareCommands(fig.commands[0], fig.announces[0], fig.commands[1], fig.announces[1], 10) {
			fmt.Printf("%-15s %-22s %9.3f %9.3f %9.2f %9.2f\n", fig.mode, d.name, d.callsA, d.callsB, d.microsA, d.microsB)
		}
	}
	// The configurations did what they say: user 0's totals, read once
	// the trackers have flushed them (each flushes within a second).
	for _, t := range targets {
		if err := o.reportCredit(ctx, t); err != nil {
			return err
		}
	}
	fmt.Printf("load average at the end: %s\n", loadAverage())
	if len(profileParts) > 0 {
		fmt.Printf("note: the %s runs ran under the CPU profiler, which slows them\n", o.profileMode)
		views := []profileView{{"where the samples went, by tracker (no label: runtime, GC, netpoll) and side (loadgen: the generator)", []string{"-tags"}}}
		for _, t := range targets {
			views = append(views,
				profileView{t.name + "'s goroutines, flat", []string{"-top", "-nodecount=30", "-tagfocus=tracker=" + t.name}},
				profileView{t.name + "'s goroutines, cumulative", []string{"-top", "-cum", "-nodecount=50", "-tagfocus=tracker=" + t.name}})
		}
		reportProfile(ctx, o.cpuProfile, profileParts, "the "+o.profileMode+" runs and their settling (this process: both trackers and the load generator)", views)
	}
	return nil
}

// startCPUProfile profiles this process into path until the returned
// stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	file, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		_ = file.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = file.Close() }, nil
}

// runLength says what ends a measured run.
func (o *privateBenchOptions) runLength() string {
	switch {
	case o.duration == 0:
		return fmt.Sprintf("%d announces", o.announces)
	case o.announces == 0:
		return o.duration.String()
	}
	return fmt.Sprintf("%s or %d announces", o.duration, o.announces)
}

// settledRate is run r's announces per second over the run and its
// settling: the work a run defers (the write-behind's drain, the feed's
// rounds after its last announce) is work a tracker under steady load
// does while answering the next announces, so it is charged to the run
// that caused it. It includes waiting for the flush and feed tickers
// (1 s each), which a longer run dilutes.
func settledRate(r announceRun) float64 {
	elapsed := r.res.Elapsed + r.settled
	if elapsed <= 0 {
		return 0
	}
	return float64(r.res.Announces) / elapsed.Seconds()
}

// settledRates is the median of runs' settledRate and each one as text.
func settledRates(runs []announceRun) (float64, string) {
	rates := make([]float64, 0, len(runs))
	texts := make([]string, 0, len(runs))
	for _, r := range runs {
		rates = append(rates, settledRate(r))
		texts = append(texts, fmt.Sprintf("%.0f", settledRate(r)))
	}
	if len(rates) == 0 {
		return 0, ""
	}
	return medianOf(rates), strings.Join(texts, " ")
}

// cpu is the CPU t's tracker process and its redis-server have used so
// far (the tracker's part only when it is a process of its own).
func (t *privateTarget) cpu(ctx context.Context) (time.Duration, error) {
	total, err := redisCPU(ctx, t.redis)
	if err != nil {
		return 0, err
	}
	if t.processCPU != nil {
		plugin, err := t.processCPU()
		if err != nil {
			return 0, err
		}
		total += plugin
	}
	return total, nil
}

// pairedRatios is the median of the ratios of rate for each on run and
// the off run after it, and the ratios as text.
func pairedRatios(on, off []announceRun, rate func(announceRun) float64) (float64, string) {
	ratios := make([]float64, 0, len(on))
	texts := make([]string, 0, len(on))
	for i := range min(len(on), len(off)) {
		r := rate(on[i]) / rate(off[i])
		ratios = append(ratios, r)
		texts = append(texts, fmt.Sprintf("%.2f", r))
	}
	if len(ratios) == 0 {
		return 0, ""
	}
	return medianOf(ratios), strings.Join(texts, " ")
}

// quietWindow is how long a tracker's Redis must take no write for the
// run's work to count as done: longer than the trackers' flush interval
// (1 s) and the write-behind queue's (swarm.DefaultWriteBehind, 1 s), so a flush or a drain
// still to come would have written within it.
const quietWindow = 1200 * time.Millisecond

// settleLimit bounds the wait for a run's work to be done.
const settleLimit = time.Minute

// settle waits until what run r left to do is done, and adds the CPU it
// took to r. Done is observed, not assumed: no write reached the
// tracker's Redis for quietWindow (INFO persistence's
// rdb_changes_since_last_save stood still: the write-behind queue, the
// flush and the feed round had nothing left to write), and with the feed,
// its index is empty (every row the run made delivered). A fixed sleep
// either cut a slow tracker's work short (it then landed in the next run,
// its own or the other tracker's) or padded a fast one's. At most
// settleLimit.
func (o *privateBenchOptions) settle(ctx context.Context, t *privateTarget, r *announceRun) error {
	var waiting func(context.Context) (int64, error)
	if o.feed > 0 && t.accounting {
		waiting = func(ctx context.Context) (int64, error) { return feedIndexed(ctx, t.redis) }
	}
	if err := settleRun(ctx, t.redis, t.processCPU, waiting, r); err != nil {
		return err
	}
	return t.afterSettle(ctx)
}

// settleRun is settle for any tracker on rdb: waiting, when not nil,
// counts work still queued that Redis's writes do not show.
func settleRun(ctx context.Context, rdb *redis.Client, processCPU func() (time.Duration, error),
	waiting func(context.Context) (int64, error), r *announceRun) error {
	redisBefore, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	scriptBefore, err := redisScriptTime(ctx, rdb)
	if err != nil {
		return err
	}
	var pluginBefore time.Duration
	if processCPU != nil {
		if pluginBefore, err = processCPU(); err != nil {
			return err
		}
	}
	start := time.Now()
	changes, err := redisChanges(ctx, rdb)
	if err != nil {
		return err
	}
	quietSince := time.Now()
	for {
		// Polled: the trackers run their flushes on their own wall-clock
		// intervals, and Redis says nothing when they are done.
		time.Sleep(100 * time.Millisecond)
		now, err := redisChanges(ctx, rdb)
		if err != nil {
			return err
		}
		if now != changes {
			changes, quietSince = now, time.Now()
		}
		queued := int64(0)
		if waiting != nil {
			if queued, err = waiting(ctx); err != nil {
				return err
			}
		}
		if queued == 0 && time.Since(quietSince) >= quietWindow {
			break
		}
		if time.Since(start) > settleLimit {
			return fmt.Errorf("not settled %s after the run: %d still waiting (the feed's index), last write %s ago",
				settleLimit, queued, time.Since(quietSince).Round(time.Millisecond))
		}
	}
	// The quiet window itself is idle time, not the run's work.
	r.settled = quietSince.Sub(start)
	redisAfter, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	r.redisCPU += redisAfter - redisBefore
	r.settleCPU += redisAfter - redisBefore
	scriptAfter, err := redisScriptTime(ctx, rdb)
	if err != nil {
		return err
	}
	r.scriptTime += scriptAfter - scriptBefore
	if processCPU != nil {
		pluginAfter, err := processCPU()
		if err != nil {
			return err
		}
		r.peerCPU += pluginAfter - pluginBefore
		r.settleCPU += pluginAfter - pluginBefore
	}
	return nil
}

// runOrder is the order the configurations run in for measured run
// number run: on first in even runs, off first in odd ones (A B B A A B
// ...), so a drift across the invocation (the machine's load, the
// records still growing) weighs on both alike instead of always on the
// one that runs second.
func runOrder(run, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if run%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

// redisChanges is INFO persistence's rdb_changes_since_last_save: it
// grows with every write Redis applies.
func redisChanges(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO persistence: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), "rdb_changes_since_last_save:"); ok {
			return strconv.ParseInt(value, 10, 64)
		}
	}
	return 0, errors.New("redis INFO persistence: no rdb_changes_since_last_save")
}

// feedIndexed is how many torrents the feed's index shards hold: the
// members scored above the shards' keeper (btstore.FeedIndexKeeper).
func feedIndexed(ctx context.Context, rdb *redis.Client) (int64, error) {
	waiting := int64(0)
	above := "(" + strconv.Itoa(btstore.FeedIndexKeeperScore)
	for shard := range btstore.FeedShards {
		n, err := rdb.ZCount(ctx, btstore.FeedIndexKey(shard), above, "+inf").Result()
		if err != nil {
			return 0, err
		}
		waiting += n
	}
	return waiting, nil
}

// reportCredit prints user 0's raw and credited totals on t's Redis, and
// fails when they contradict the configuration (on: credited as raw, every
// torrent being normal; off: nothing credited).
func (o *privateBenchOptions) reportCredit(ctx context.Context, t *privateTarget) error {
	user := privateUserID(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var u struct{ up, down, upCredited, downCredited, fed int64 }
		err := withPrivateStore(ctx, t.redisURL, o.settings(t.accounting), func(tr *btplugin.Tracker) error {
			s, err := tr.Store().User(ctx, user)
			u.up, u.down, u.upCredited, u.downCredited = s.Uploaded, s.Downloaded, s.UpCredited, s.DownCredited
			if err != nil || tr.Outbox() == nil {
				return err
			}
			c, err := tr.Outbox().Counts(ctx)
			u.fed = c.Appended
			return err
		})
		if err != nil {
			return err
		}
		// The feed appends only with accounting on.
		feedOK := o.feed == 0 || t.accounting == (u.fed > 0)
		ok := u.up > 0 && (t.accounting == (u.upCredited > 0)) && feedOK
		if ok || time.Now().After(deadline) {
			acked := "nothing read it"
			if t.site != nil {
				acked = fmt.Sprintf("the site acknowledged %d", t.site.acknowledged())
			}
			fmt.Printf("%s: user %s uploaded %d, downloaded %d bytes; credited %d up, %d down; outbox events appended %d, %s\n",
				t.name, user, u.up, u.down, u.upCredited, u.downCredited, u.fed, acked)
			if !ok {
				return fmt.Errorf("%s: user %s's totals or the outbox do not show the configuration", t.name, user)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond) // the trackers' flush interval is wall-clock time
	}
}

// startTracker runs a private tracker with settings, out of this process
// when o.plugin names the binary.
func (o *privateBenchOptions) startTracker(ctx context.Context, name, redisURL string, settings json.RawMessage, logger *slog.Logger) (*announceTarget, func(), error) {
	if o.plugin != "" {
		return startExternalBenchTracker(ctx, name, o.plugin, redisURL, settings, logger)
	}
	p, err := btplugin.New(ctx, logger)
	if err != nil {
		return nil, nil, err
	}
	tr := p.(*btplugin.Tracker)
	stop := func() { _ = tr.Close(context.Background()) }
	// The label passes to every goroutine the tracker starts, so a
	// profile tells the two trackers apart (--cpuprofile).
	pprof.Do(ctx, pprof.Labels("tracker", name), func(ctx context.Context) {
		err = tr.Configure(ctx, plugins.Config{Name: "bittorrent", RedisURL: redisURL, Settings: settings})
	})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("hoard tracker: %w", err)
	}
	desc, err := tr.Describe(ctx)
	if err != nil {
		stop()
		return nil, nil, err
	}
	t := &announceTarget{name: name, hoard: true, tracker: tr}
	if err := t.setListeners(desc.Listeners); err != nil {
		stop()
		return nil, nil, err
	}
	return t, stop, nil
}
