package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// The load generators behind `make bench`. They only ever target loopback
// servers they start themselves (or a --url the operator names), run for a
// bounded time over a bounded item supply, and stop by themselves.

type benchOptions struct {
	warriors   int
	duration   time.Duration
	runs       int
	multis     []int
	keepAlive  bool
	cpuProfile string
	// redisFsync, when set, runs the bench's redis-server with the AOF on
	// and this appendfsync, as `hoard serve` runs it; empty: AOF off.
	redisFsync string
	// tempDir holds the bench's redis-server data; empty: the system's.
	tempDir string
	// noAOFRewrite keeps Redis from rewriting its AOF during a run, so a
	// figure measures the fsync policy and not when a rewrite happened.
	noAOFRewrite bool
}

func benchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{Use: "bench", Short: "Load generators (hoard starts its own redis-server and server on loopback)"}
	// each runs its benchmarks in a fresh loopback environment.
	each := func(run func(ctx context.Context, env *benchEnv) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			env, err := startBenchEnv(cmd.Context(), o)
			if err != nil {
				return err
			}
			defer env.stop()
			return run(cmd.Context(), env)
		}
	}
	all := &cobra.Command{
		Use:   "all",
		Short: "Warrior round trips, the claim script against Redis's script-call ceiling, and pattern limits",
		Args:  cobra.NoArgs,
		RunE: each(func(ctx context.Context, env *benchEnv) error {
			if err := benchWarriors(ctx, env, o); err != nil {
				return err
			}
			if err := benchScript(ctx, env, o); err != nil {
				return err
			}
			if err := benchLimits(ctx, env, o); err != nil {
				return err
			}
			return benchBackfeed(ctx, env, o)
		}),
	}
	warriors := &cobra.Command{
		Use:   "warriors",
		Short: "Request+done round trips per second from concurrent warriors over HTTP",
		Args:  cobra.NoArgs,
		RunE:  each(func(ctx context.Context, env *benchEnv) error { return benchWarriors(ctx, env, o) }),
	}
	script := &cobra.Command{
		Use:   "script",
		Short: "Claim script calls per second, against Redis's own script-call (FCALL) ceiling",
		Args:  cobra.NoArgs,
		RunE:  each(func(ctx context.Context, env *benchEnv) error { return benchScript(ctx, env, o) }),
	}
	limits := &cobra.Command{
		Use:   "limits",
		Short: "Item request serve rate with 90% of todo pattern-limited, vs an unlimited queue and vs claim-N-random-then-filter",
		Args:  cobra.NoArgs,
		RunE:  each(func(ctx context.Context, env *benchEnv) error { return benchLimits(ctx, env, o) }),
	}
	backfeed := &cobra.Command{
		Use:   "backfeed",
		Short: "Backfeed ingest in items per second over HTTP, and Redis bytes per queued item",
		Args:  cobra.NoArgs,
		RunE:  each(func(ctx context.Context, env *benchEnv) error { return benchBackfeed(ctx, env, o) }),
	}
	for _, c := range []*cobra.Command{all, warriors, script, limits, backfeed} {
		f := c.Flags()
		f.IntVar(&o.warriors, "warriors", 32, "concurrent warriors (or script callers)")
		f.DurationVar(&o.duration, "duration", 5*time.Second, "length of each run")
		f.IntVar(&o.runs, "runs", 3, "runs per figure; the median is reported")
		f.IntSliceVar(&o.multis, "multi", []int{1, 100}, "items per request (multi=N)")
		f.BoolVar(&o.keepAlive, "keep-alive", false, "reuse connections (seesaw's Tornado client sends Connection: close)")
		f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server and load generator share this process)")
		f.StringVar(&o.redisFsync, "redis-fsync", "everysec", "run redis-server with the AOF on and this appendfsync (everysec, always, no); everysec is hoard serve's default; empty = AOF off")
		cmd.AddCommand(c)
	}
	cmd.AddCommand(benchViewersCommand(), benchOffloadCommand(), benchFsyncCommand(), benchFloodCommand())
	cmd.AddCommand(benchAnnounceCommand(), benchAnnouncePrivateCommand(), benchIPMetricsCommand())
	cmd.AddCommand(benchOutsideCommand(), benchLoadCommand())
	return cmd
}

// benchEnv is a throwaway redis-server and hoard server on loopback.
type benchEnv struct {
	dir     string
	redis   *localredis.Server
	rdb     redis.UniversalClient
	engine  *queues.Engine
	srv     *server.Server
	url     string
	token   string
	profile *os.File
}

func startBenchEnv(ctx context.Context, o benchOptions) (*benchEnv, error) {
	redisConfig := localredis.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if o.redisFsync != "" {
		policy, err := localredis.ParseFsyncPolicy(o.redisFsync)
		if err != nil {
			return nil, fmt.Errorf("--redis-fsync: %w", err)
		}
		redisConfig.AppendOnly, redisConfig.AppendFsync = true, policy
	}
	if o.noAOFRewrite {
		redisConfig.ExtraArgs = append(redisConfig.ExtraArgs, "--auto-aof-rewrite-percentage", "0")
	}
	dir, err := os.MkdirTemp(o.tempDir, "hoard-bench-")
	if err != nil {
		return nil, err
	}
	redisConfig.DataDir = dir
	env := &benchEnv{dir: dir}
	quiet := redisConfig.Logger
	env.redis = localredis.New(redisConfig)
	if err := env.redis.Start(ctx); err != nil {
		env.stop()
		return nil, err
	}
	opts, err := redis.ParseURL(env.redis.URL())
	if err != nil {
		env.stop()
		return nil, err
	}
	opts.PoolSize = 128
	// go-redis's 3 s read timeout is a production client's; here a
	// FLUSHALL of a million items between runs took longer on a loaded
	// 2-core machine and failed the whole command (i/o timeout).
	opts.ReadTimeout = 30 * time.Second
	env.rdb = redis.NewClient(opts)
	env.engine = queues.NewEngine(env.rdb, queues.Options{Logger: quiet})
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	env.token = hex.EncodeToString(token)
	env.srv, err = server.New(server.Config{Listen: "127.0.0.1:0", AdminToken: env.token, Logger: quiet}, env.engine)
	if err != nil {
		env.stop()
		return nil, err
	}
	if err := env.srv.Start(ctx); err != nil {
		env.stop()
		return nil, err
	}
	env.url = "http://" + env.srv.Addr()
	if o.cpuProfile != "" {
		file, err := os.Create(o.cpuProfile)
		if err != nil {
			env.stop()
			return nil, err
		}
		if err := pprof.StartCPUProfile(file); err != nil {
			env.stop()
			return nil, err
		}
		env.profile = file
	}
	aof := "AOF off"
	if redisConfig.AppendOnly {
		aof = "AOF on, appendfsync " + string(redisConfig.AppendFsync)
	}
	fmt.Printf("bench: redis-server %s (%s), hoard at %s, GOMAXPROCS=%d\n", env.redis.URL(), aof, env.url, runtime.GOMAXPROCS(0))
	return env, nil
}

func (env *benchEnv) stop() {
	if env.profile != nil {
		pprof.StopCPUProfile()
		_ = env.profile.Close()
	}
	if env.srv != nil {
		_ = env.srv.Stop()
	}
	if env.rdb != nil {
		_ = env.rdb.Close()
	}
	if env.redis != nil {
		_ = env.redis.Stop()
	}
	_ = os.RemoveAll(env.dir)
}

// fill creates a project holding n items.
func (env *benchEnv) fill(ctx context.Context, slug string, n int) error {
	maxMulti := queues.MaxMulti
	if _, err := env.engine.CreateProject(ctx, slug, queues.SettingsPatch{MaxMulti: &maxMulti}); err != nil {
		return err
	}
	batch := make([]queues.QueueItem, 0, 10000)
	for i := 0; i < n; i++ {
		batch = append(batch, queues.QueueItem{Name: fmt.Sprintf("%s/item/%09d", slug, i)})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := env.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// runFigure is one measured run.
type runFigure struct {
	roundTrips, items float64 // per second
	calls             float64 // in all
	// commands is INFO commandstats over the run, when measured.
	commands commandStats
	// forks is how many times Redis forked (an AOF rewrite) during the
	// run: a fork makes the next write to each shared page fault.
	forks int64
	// selfMicros is this process's CPU per call (the load generator and,
	// in `bench`, the engine), when measured: a rate this process's CPU
	// bounds is not Redis's.
	selfMicros float64
}

func benchWarriors(ctx context.Context, env *benchEnv, o benchOptions) error {
	conn := "Connection: close, like seesaw"
	if o.keepAlive {
		conn = "keep-alive"
	}
	fmt.Printf("\nwarrior round trips (POST request + POST done) over HTTP, %d warriors, %s, %d runs of %s\n", o.warriors, conn, o.runs, o.duration)
	for _, multi := range o.multis {
		var figures []runFigure
		for run := 0; run < o.runs; run++ {
			slug := fmt.Sprintf("bench-m%d-r%d", multi, run)
			// Enough items that the queue never drains within a run.
			supply := multi * 40000
			// 1M at multi=100: 3.5 times what 5 s took at 563 round trips/s.
			if supply > 1_000_000 {
				supply = 1_000_000
			}
			if err := env.fill(ctx, slug, supply); err != nil {
				return err
			}
			fig, err := warriorRun(ctx, env.url, slug, multi, o)
			if err != nil {
				return err
			}
			figures = append(figures, fig)
		}
		med := medianFigure(figures)
		fmt.Printf("  multi=%-4d %9.0f round trips/s  %10.0f items/s   (runs: %s)\n", multi, med.roundTrips, med.items, describeRuns(figures))
	}
	return nil
}

func warriorRun(ctx context.Context, baseURL, slug string, multi int, o benchOptions) (runFigure, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: o.warriors, DisableKeepAlives: !o.keepAlive}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	defer transport.CloseIdleConnections()
	requestURL := baseURL + "/" + slug + "/request"
	if multi > 1 {
		requestURL = fmt.Sprintf("%s/%s/multi=%d//request", baseURL, slug, multi)
	}
	doneURL := baseURL + "/" + slug + "/done"
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var roundTrips, items atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.warriors; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			downloader := fmt.Sprintf("warrior%03d", w)
			reqBody := []byte(`{"downloader":"` + downloader + `","api_version":"2","version":"20260101.01"}`)
			for runCtx.Err() == nil {
				n, err := warriorRoundTrip(runCtx, client, requestURL, doneURL, downloader, reqBody)
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
					}
					return
				}
				roundTrips.Add(1)
				items.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if firstErr != nil {
		return runFigure{}, firstErr
	}
	return runFigure{roundTrips: float64(roundTrips.Load()) / elapsed, items: float64(items.Load()) / elapsed}, nil
}

func warriorRoundTrip(ctx context.Context, client *http.Client, requestURL, doneURL, downloader string, reqBody []byte) (int, error) {
	body, status, err := post(ctx, client, requestURL, reqBody)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("request: HTTP %d: %s", status, body)
	}
	var got struct {
		ItemName string `json:"item_name"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return 0, fmt.Errorf("request reply: %w", err)
	}
	done, _ := json.Marshal(map[string]any{
		"downloader": downloader, "version": "20260101.01", "item": got.ItemName,
		"bytes": map[string]int{"data": 1000}, "id": map[string]string{"pipeline_hash": "bench"},
	})
	body, status, err = post(ctx, client, doneURL, done)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK || strings.TrimSpace(string(body)) != "OK" {
		return 0, fmt.Errorf("done: HTTP %d: %s", status, body)
	}
	return strings.Count(got.ItemName, "\x00") + 1, nil
}

func post(ctx context.Context, client *http.Client, url string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ArchiveTeam Warrior/0.10.3 Standalone hoard-bench")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return raw, resp.StatusCode, err
}

// ceilingScript is the cheapest script that still touches a key in the
// project's slot, run as hoard runs its scripts (luascript: a one-key
// FCALL; EVALSHA on a server without functions): Redis's own ceiling for
// a script call on this machine.
var ceilingScript = luascript.FromSource(`return redis.call('EXISTS', KEYS[1])`)

func benchScript(ctx context.Context, env *benchEnv, o benchOptions) error {
	fmt.Printf("\none-item claims and dones (engine.Claim, engine.Done: the plain scripts, concurrent ones of the project coalesced into one script call) vs Redis's script-call ceiling (a one-key FCALL), all batched as the engine batches them, after an AOF rewrite of the fill and %d claims unmeasured, and another before the dones, %d callers, %d runs of %s; %s\n", warmUpClaims, o.warriors, o.runs, o.duration, machineLine())
	var claims, dones, ceiling []runFigure
	for run := 0; run < o.runs; run++ {
		slug := fmt.Sprintf("bench-script-r%d", run)
		if err := env.fill(ctx, slug, 1_500_000); err != nil {
			return err
		}
		if err := env.rewriteAOF(ctx); err != nil {
			return err
		}
		if err := warmAfterRewrite(ctx, env, slug, o.warriors); err != nil {
			return err
		}
		// Each caller keeps what it claimed, for the done calls after.
		// Its name and its done's bytes are made once, here, not on
		// every call: a warrior's request arrives with them, so their
		// making is the load generator's CPU, not the script's, and the
		// ceiling's calls make nothing.
		claimed := make([][]string, o.warriors)
		names := make([]string, o.warriors)
		for w := range names {
			names[w] = fmt.Sprintf("caller%03d", w)
		}
		bytes := map[string]int64{"data": 1000}
		claim, err := redisCPURate(ctx, env, o, func(ctx context.Context, w int) error {
			r, err := env.engine.Claim(ctx, queues.ClaimRequest{Project: slug, Downloader: names[w], IP: "127.0.0.1", Count: 1})
			for _, item := range r.Items {
				claimed[w] = append(claimed[w], item.Name)
			}
			return err
		})
		if err != nil {
			return err
		}
		// The claims' AOF would make Redis (or hoard's replay-time watcher)
		// rewrite it during the done phase, which then pays the fork:
		// rewrite it now, before the phase.
		if err := env.rewriteAOF(ctx); err != nil {
			return err
		}
		done, err := redisCPURate(ctx, env, o, func(ctx context.Context, w int) error {
			if len(claimed[w]) == 0 {
				return errCallerDone
			}
			_, err := env.engine.Done(ctx, queues.DoneRequest{Project: slug, Downloader: names[w], Version: "20260101.01",
				UserAgent: "hoard-bench", Items: claimed[w][:1:1], Bytes: bytes})
			claimed[w] = claimed[w][1:]
			return err
		})
		if err != nil {
			return err
		}
		key := queues.ConfigKey(slug)
		// Batched as the engine batches claim.lua and done.lua, so the
		// ratio compares the scripts' cost, not pipelining.
		batcher := luascript.NewBatcher(env.rdb, queues.WarriorPathLeaders, queues.WarriorPathBatch)
		ceil, err := redisCPURate(ctx, env, o, func(ctx context.Context, _ int) error {
			_, err := batcher.Run(ctx, ceilingScript, []string{key})
			return err
		})
		if err != nil {
			return err
		}
		claims = append(claims, claim)
		dones = append(dones, done)
		ceiling = append(ceiling, ceil)
	}
	mc, md, mx := medianFigure(claims), medianFigure(dones), medianFigure(ceiling)
	// A claim or done is one engine.Claim or engine.Done of one item; the
	// engine sends concurrent ones of a project as one script call
	// (queues/plainbatch.go), so claims/s and script calls/s differ, and
	// so do Redis's CPU per claim and per script call: both are printed,
	// so that a coalesced call is not read as a cheaper script.
	fmt.Printf("  claims (multi=1)     %9.0f claims/s  (runs: %s)   ratio %.2f   %s\n", mc.roundTrips, describeRuns(claims), mc.roundTrips/mx.roundTrips, describeScriptCalls(mc, "claim"))
	fmt.Printf("  dones (1 item)       %9.0f dones/s   (runs: %s)   ratio %.2f   %s\n", md.roundTrips, describeRuns(dones), md.roundTrips/mx.roundTrips, describeScriptCalls(md, "done"))
	fmt.Printf("  FCALL ceiling        %9.0f calls/s   (runs: %s)                 Redis CPU %.1f us/call\n", mx.roundTrips, describeRuns(ceiling), mx.items)
	fmt.Printf("  ratio: claims/s (dones/s) over the ceiling's calls/s; script calls: every FCALL (EVALSHA, EVAL) INFO commandstats counted during the phase, the counters' flushes included\n")
	fmt.Printf("  %s\n", describeCPURatios(mc, md, mx))
	for _, phase := range []struct {
		name string
		fig  runFigure
	}{{"claim", mc}, {"done", md}, {"ceiling", mx}} {
		fmt.Printf("  %-8s per call (median run): this process's CPU %.1f us; Redis forks during it %d; INFO commandstats: %s\n", phase.name, phase.fig.selfMicros, phase.fig.forks, describeCommandsPerCall(phase.fig))
	}
	return nil
}

// describeScriptCalls says how many script calls a phase's calls (claims
// or dones) made, per second and per call, and Redis's CPU per call and
// per script call.
func describeScriptCalls(fig runFigure, unit string) string {
	scripts := float64(fig.commands.scripts().calls)
	if scripts <= 0 || fig.calls <= 0 || fig.roundTrips <= 0 {
		return fmt.Sprintf("Redis CPU %.1f us/%s", fig.items, unit)
	}
	perCall := scripts / fig.calls
	return fmt.Sprintf("script calls %.0f/s (%.3f per %s)   Redis CPU %.1f us/%s, %.1f us/script call",
		fig.roundTrips*perCall, perCall, unit, fig.items, unit, fig.items/perCall)
}

// describeCPURatios puts the printed ratios (calls/s) beside the ratios of
// CPU per call, the ceiling's over the script's: by Redis's alone, and by
// Redis's and this process's together. A phase whose Redis is busy nearly
// all the time is bound by Redis; the ceiling, whose Redis CPU per call is
// a fraction of this process's, is bound by this process (the engine and
// go-redis), so its calls/s ratio reads near the second and above the
// first (docs/warrior-path.md, "What each write of a plain call costs").
func describeCPURatios(claim, done, ceiling runFigure) string {
	ratio := func(ceil, script float64) string {
		if ceil <= 0 || script <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", ceil/script)
	}
	return fmt.Sprintf("CPU per call, the ceiling's over the script's: by Redis's claim %s, done %s; by Redis's and this process's claim %s, done %s",
		ratio(ceiling.items, claim.items), ratio(ceiling.items, done.items),
		ratio(ceiling.items+ceiling.selfMicros, claim.items+claim.selfMicros), ratio(ceiling.items+ceiling.selfMicros, done.items+done.selfMicros))
}

// describeCommandsPerCall names the commands of a phase by the Redis time
// they took per call of the phase (a command a script calls counts on its
// own line and inside fcall's), with their calls per call, so a phase
// whose scripts fell back to the general script (fcall above 1 per call)
// or whose time went outside its script (the log's lpush, the counters'
// flush) shows it.
func describeCommandsPerCall(fig runFigure) string {
	calls := max(fig.calls, 1)
	names := make([]string, 0, len(fig.commands))
	for name := range fig.commands {
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := fig.commands[names[i]], fig.commands[names[j]]
		if a.usec != b.usec {
			return a.usec > b.usec
		}
		return names[i] < names[j]
	})
	parts := make([]string, 0, 8)
	for _, name := range names[:min(len(names), 8)] {
		c := fig.commands[name]
		parts = append(parts, fmt.Sprintf("%s %.2f us (%.3f calls)", name, float64(c.usec)/calls, float64(c.calls)/calls))
	}
	return strings.Join(parts, ", ")
}

// rewriteAOF rewrites the AOF now, if it is on, and waits for the rewrite
// to end. The fill's million and a half writes make Redis (or hoard's
// replay-time watcher) rewrite the AOF soon after; a rewrite's fork makes
// the parent's next writes copy-on-write page faults, counted in its CPU,
// so the phase it overlapped paid for the fill (claim.lua's Redis CPU per
// call was ~45 us beside a rewrite, ~20 us without the AOF). Done here, it
// is over before any phase is measured.
func (env *benchEnv) rewriteAOF(ctx context.Context) error {
	info, err := env.rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "aof_enabled:1") {
		return nil
	}
	if err := env.rdb.Do(ctx, "BGREWRITEAOF").Err(); err != nil && !strings.Contains(err.Error(), "in progress") {
		return fmt.Errorf("BGREWRITEAOF: %w", err)
	}
	for {
		info, err := env.rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// warmUpClaims is how many claims run, unmeasured, between the fill's AOF
// rewrite and the claim phase: enough that nearly every page of the queued
// index's bucket table (2^21 slots, 4,096 pages, for the fill's 1.5M
// items) is written once.
const warmUpClaims = 32_000

// warmAfterRewrite claims warmUpClaims items of slug and leaves them out
// (reporting them done too wrote enough AOF that a rewrite landed in the
// claim phase).
// A rewrite forks: after its child exits, the parent's first write to each
// page it shared still takes a page fault. Only claims write at random
// into the fill's large structures (SREM from the queued index, a 1.5M
// member hash table), so a claim phase right after the rewrite paid about
// one fault per claim: redis-server alone, 20,000 SREMs of a 1.5M member
// set right after a BGREWRITEAOF took 18,799 minor faults and 42 us of CPU
// each, the next 20,000 2,409 faults and 10 us (load 18). That cost is the
// rewrite's, paid once per page per rewrite, not each claim's.
func warmAfterRewrite(ctx context.Context, env *benchEnv, slug string, callers int) error {
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < warmUpClaims && errs[w] == nil; i += callers {
				_, errs[w] = env.engine.Claim(ctx, queues.ClaimRequest{Project: slug, Downloader: fmt.Sprintf("warmup%03d", w), IP: "127.0.0.1", Count: 1})
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// redisCPURate is callRate with Redis's CPU per call (in the figure's
// items field, which a call rate does not need).
func redisCPURate(ctx context.Context, env *benchEnv, o benchOptions, fn func(ctx context.Context, worker int) error) (runFigure, error) {
	client, ok := env.rdb.(*redis.Client)
	if !ok {
		return callRate(ctx, o, fn)
	}
	statsBefore, err := redisCommandStats(ctx, client)
	if err != nil {
		return runFigure{}, err
	}
	before, err := redisCPU(ctx, client)
	if err != nil {
		return runFigure{}, err
	}
	forksBefore, err := redisForks(ctx, client)
	if err != nil {
		return runFigure{}, err
	}
	self := selfCPU()
	fig, err := callRate(ctx, o, fn)
	if err != nil {
		return fig, err
	}
	fig.selfMicros = float64((selfCPU() - self).Microseconds()) / max(fig.calls, 1)
	after, err := redisCPU(ctx, client)
	if err != nil {
		return fig, err
	}
	statsAfter, err := redisCommandStats(ctx, client)
	if err != nil {
		return fig, err
	}
	forksAfter, err := redisForks(ctx, client)
	if err != nil {
		return fig, err
	}
	fig.forks = forksAfter - forksBefore
	fig.items = float64((after - before).Microseconds()) / max(fig.calls, 1)
	fig.commands = commandStats{}
	fig.commands.add(statsBefore, statsAfter)
	return fig, nil
}

// redisForks is INFO stats' total_forks.
func redisForks(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO stats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), "total_forks:"); ok {
			return strconv.ParseInt(value, 10, 64)
		}
	}
	return 0, errors.New("redis INFO stats: no total_forks")
}

// errCallerDone ends one caller of callRate without an error: it has
// nothing left to do.
var errCallerDone = errors.New("caller done")

// callRate runs fn from o.warriors goroutines for o.duration.
func callRate(ctx context.Context, o benchOptions, fn func(ctx context.Context, worker int) error) (runFigure, error) {
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var calls atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.warriors; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if err := fn(runCtx, w); err != nil {
					if errors.Is(err, errCallerDone) {
						return
					}
					if runCtx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						once.Do(func() { firstErr = err })
					}
					return
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return runFigure{}, firstErr
	}
	rate := float64(calls.Load()) / time.Since(start).Seconds()
	return runFigure{roundTrips: rate, items: rate, calls: float64(calls.Load())}, nil
}

func medianFigure(figs []runFigure) runFigure {
	sorted := append([]runFigure(nil), figs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].roundTrips < sorted[j].roundTrips })
	return sorted[len(sorted)/2]
}

func describeRuns(figs []runFigure) string {
	parts := make([]string, len(figs))
	for i, f := range figs {
		parts[i] = fmt.Sprintf("%.0f", f.roundTrips)
	}
	return strings.Join(parts, " ")
}
