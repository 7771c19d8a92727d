package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/queues"
)

// scenario is one chaos run.
type scenario struct {
	load      time.Duration // warriors work (and kills happen) this long
	items     int
	seed      uint64
	warriors  int
	frontends int
	plugin    bool
	cluster   bool // a 3-master Redis Cluster instead of one redis-server
	// supervised: frontend 0 runs hoard's own supervised redis-server (no
	// HOARD_REDIS_URL), the others use its socket; a Redis kill is of
	// that redis-server, which hoard restarts.
	supervised bool
	// fillAOF, with supervised, grows the AOF past this many bytes before
	// the load (fillAOF in aof_test.go).
	fillAOF int64
	// supervisorKillsOnly: every kill is a frontend kill of frontend 0,
	// the hoard supervising Redis, without a stall.
	supervisorKillsOnly bool
	// frontendArgs are added to every frontend's command line.
	frontendArgs []string
	kills        int // SIGKILLs during the load, one at a time
	// frontendKillsOnly: every planned kill is of a frontend.
	frontendKillsOnly bool
	// hoarders: this many warriors (the last ones, multi=10) claim and
	// never finish while the load lasts, so their items expire.
	hoarders int
	// work, when set, replaces the paced work time per claim.
	work time.Duration
	// sabotage, when set, runs once halfway through the load: the
	// negative control uses it to lose data behind hoard's back.
	sabotage func(ctx context.Context, rdb redis.UniversalClient, l *ledger, r *report)
}

// The kinds of kill.
const (
	killFrontend = "frontend"
	killPlugin   = "plugin"
	killRedis    = "redis-server"
)

// killRecord is one SIGKILL and how long its victim took to serve again.
type killRecord struct {
	Kind   string
	Target int // frontend index (its plugin for plugin kills); -1 for Redis
	At     time.Duration
	// Recovery is the time from the kill until a warrior request sent
	// after it succeeded (frontend, Redis), or until the restarted plugin
	// answered an announce on its tracker port again (plugin).
	Recovery time.Duration
	Stalled  bool // a frontend killed during a Redis stall
	// AOFBytes is the AOF's size at the kill (supervised Redis only).
	AOFBytes int64
	// Adopted: a kill of the hoard supervising Redis left the
	// redis-server running and the restarted hoard went on with it (the
	// same pid before the kill and once served again).
	Adopted bool
	// AckedLost is, for a Redis kill, how many acknowledged dones it took.
	AckedLost int
}

// plannedKill is one entry of the seeded schedule.
type plannedKill struct {
	kind   string
	target int
	at     time.Duration
	// stall: a frontend kill lands while Redis is stalled (a busy script)
	// with the frontend's requests queued in it, so Redis runs claims and
	// dones after their frontend died and their replies go nowhere: the
	// "reply lost in a crash" that a kill at a random moment rarely hits.
	stall bool
}

// redisStall is how long Redis sleeps under a stalled frontend kill (the
// issue saw single stalls of 0.7 s); the kill comes stallKillAfter into it,
// once every warrior of the frontend has sent its next request.
const (
	redisStall     = time.Second
	stallKillAfter = 800 * time.Millisecond
)

// killSchedule spreads n kills over the load, one per slot at a random
// moment in the slot's first half (so each recovers before the next);
// the first three are one of each kind in a random order.
func killSchedule(rng *rand.Rand, n, frontends int, load time.Duration, plugin bool) []plannedKill {
	kinds := []string{killFrontend, killRedis}
	if plugin {
		kinds = append(kinds, killPlugin)
	}
	first := slices.Clone(kinds)
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	slot := load * 9 / 10 / time.Duration(max(n, 1))
	plan := make([]plannedKill, n)
	frontendKills := 0
	for i := range plan {
		kind := kinds[rng.IntN(len(kinds))]
		if i < len(first) {
			kind = first[i]
		}
		plan[i] = plannedKill{kind: kind, target: rng.IntN(frontends),
			at: load/20 + time.Duration(i)*slot + time.Duration(rng.Int64N(int64(slot/2)+1))}
		if kind == killFrontend {
			plan[i].stall = frontendKills%2 == 0 // the first, then every other one
			frontendKills++
		}
	}
	return plan
}

// harness is a running scenario: the processes and what they were told.
type harness struct {
	sc        scenario
	redis     *deployment
	frontends []*frontend
	rdb       redis.UniversalClient
	ledger    *ledger
	successes *successes
	start     time.Time
	report    *report
	// countedAcked are acknowledged dones already counted as lost by a
	// Redis kill.
	countedAcked map[string]bool
	kills        []killRecord
	items        []string
}

// runScenario starts everything, runs the load with the kills, drains,
// and returns the verdict. It fails t only for harness errors (a process
// that cannot start): the verdict is the caller's to judge.
func runScenario(t *testing.T, sc scenario) *harness {
	t.Helper()
	bins := sharedBinaries(t)
	ctx := t.Context()
	dir := t.TempDir()
	h := &harness{sc: sc, ledger: newLedger(), successes: &successes{}, report: &report{}, countedAcked: map[string]bool{}}

	var err error
	h.redis, err = startDeployment(ctx, dir, sc.cluster, sc.supervised)
	if h.redis != nil {
		t.Cleanup(h.redis.stop)
	}
	require.NoError(t, err)

	for i := range sc.frontends {
		url := h.redis.url()
		if sc.supervised && i == 0 {
			url = "" // its own redis-server
		}
		f, err := newFrontend(dir, i, bins, url, sc.plugin, sc.frontendArgs...)
		require.NoError(t, err)
		h.frontends = append(h.frontends, f)
	}
	starting := h.frontends
	if sc.supervised {
		// Frontend 0 first: the others need its redis-server.
		t.Cleanup(func() { _ = h.frontends[0].kill() })
		require.NoError(t, h.frontends[0].startAndWait(ctx))
		starting = h.frontends[1:]
	}
	var started sync.WaitGroup
	startErrs := make([]error, len(starting))
	for i, f := range starting {
		t.Cleanup(func() { _ = f.kill() })
		started.Go(func() { startErrs[i] = f.startAndWait(ctx) })
	}
	started.Wait()
	for _, err := range startErrs {
		require.NoError(t, err)
	}
	h.rdb = h.redis.client()
	t.Cleanup(func() { _ = h.rdb.Close() })

	items := make([]string, sc.items)
	for i := range items {
		items[i] = fmt.Sprintf("chaos-item-%07d", i)
	}
	h.items = items
	require.NoError(t, h.createProject(ctx, items))
	before, err := readPlacement(ctx, h.rdb, projectSlug)
	require.NoError(t, err)
	require.Equal(t, sc.items, before.todo, "every item queued before the load")
	if sc.fillAOF > 0 {
		filled, took := fillAOF(ctx, t, h.rdb, sc.fillAOF)
		t.Logf("AOF filled to %d MB (%d bytes) in %s", filled>>20, filled, took.Round(time.Millisecond))
	}

	// Pace the warriors so the load lasts: about 80% of the items done
	// during it, the rest in the drain.
	plans := warriorPlans(sc.warriors, sc.frontends, 0)
	sumMulti := 0
	for _, p := range plans {
		sumMulti += p.multi
	}
	work := time.Duration(float64(sumMulti) * float64(sc.load) / (0.8 * float64(sc.items)))
	if sc.work > 0 {
		work = sc.work
	}
	for i := range min(sc.hoarders, len(plans)) {
		plans[len(plans)-1-i].dieRate = 1
	}
	var draining, stop atomic.Bool
	var running sync.WaitGroup
	h.start = time.Now()
	for i, plan := range plans {
		plan.work = work
		w := &warrior{
			plan: plan, base: h.frontends[plan.frontend].base,
			http:   &http.Client{Timeout: 10 * time.Second},
			rng:    rand.New(rand.NewPCG(sc.seed, uint64(i))),
			ledger: h.ledger, successes: h.successes, draining: &draining, stop: &stop,
		}
		running.Go(w.run)
	}
	t.Cleanup(func() { stop.Store(true); running.Wait() })

	rng := rand.New(rand.NewPCG(sc.seed, 1<<32))
	schedule := killSchedule(rng, sc.kills, sc.frontends, sc.load, sc.plugin)
	for i := range schedule {
		switch {
		case sc.supervisorKillsOnly:
			schedule[i].kind, schedule[i].target, schedule[i].stall = killFrontend, 0, false
		case sc.frontendKillsOnly:
			schedule[i].kind = killFrontend
		case sc.supervised && schedule[i].kind == killFrontend:
			// The kill that matters here: of the hoard supervising Redis.
			schedule[i].target = 0
		}
	}
	// If the test stops early, the monkey stops before the processes are
	// torn down, so it never restarts one after its cleanup.
	monkeyCtx, stopMonkey := context.WithCancel(ctx)
	var monkey sync.WaitGroup
	t.Cleanup(func() { stopMonkey(); monkey.Wait() })
	monkey.Go(func() {
		for _, k := range schedule {
			select {
			case <-monkeyCtx.Done():
				return
			case <-time.After(time.Until(h.start.Add(k.at))):
			}
			if err := h.kill(monkeyCtx, k); err != nil {
				h.report.Problems = append(h.report.Problems, err.Error())
			}
		}
	})
	if sc.sabotage != nil {
		time.Sleep(sc.load / 2)
		sc.sabotage(ctx, h.rdb, h.ledger, h.report)
	}
	time.Sleep(time.Until(h.start.Add(sc.load)))
	monkey.Wait()
	loadEnded := time.Since(h.start)

	// Drain: no more deaths, releases or work time; the warriors claim
	// until nothing waits and nothing is out, which needs the dead
	// warriors' claims to be reclaimed first.
	draining.Store(true)
	engine := queues.NewEngine(h.rdb, queues.Options{})
	drainDeadline := time.Now().Add(90 * time.Second)
	var counts queues.Counts
	for time.Now().Before(drainDeadline) {
		counts, err = engine.Counts(ctx, projectSlug)
		if err == nil && counts.TodoTotal() == 0 && counts.Out == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop.Store(true)
	running.Wait()
	drained := time.Since(h.start) - loadEnded

	require.NoError(t, check(ctx, h.rdb, projectSlug, items, h.ledger.ackedBefore(time.Now().Add(time.Hour)), h.report))
	h.report.Kills = h.kills
	h.summarize(t, loadEnded, drained, work)
	return h
}

// createProject creates the chaos project (reclaim on, short TTL) and
// queues every item through the admin API of the first frontend.
func (h *harness) createProject(ctx context.Context, items []string) error {
	if err := h.admin(ctx, "/api/v1/projects/"+projectSlug,
		map[string]any{"reclaim_enabled": true, "reclaim_ttl": reclaimTTL.String(), "max_claims": maxClaims}, http.StatusCreated); err != nil {
		return err
	}
	for start := 0; start < len(items); start += 50000 {
		batch := items[start:min(start+50000, len(items))]
		if err := h.admin(ctx, "/api/v1/projects/"+projectSlug+"/items",
			map[string]any{"queue": "todo", "items": batch}, http.StatusOK); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) admin(ctx context.Context, path string, body any, want int) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.frontends[0].base+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, reply)
	}
	return nil
}

const recoveryTimeout = 60 * time.Second

// kill performs one planned SIGKILL and waits for recovery.
func (h *harness) kill(ctx context.Context, k plannedKill) error {
	record := killRecord{Kind: k.kind, Target: k.target, At: time.Since(h.start)}
	if h.sc.supervised && k.kind != killPlugin {
		record.AOFBytes = currentAOFSize(ctx, h.rdb)
	}
	killedAt := time.Now()
	switch k.kind {
	case killFrontend:
		f := h.frontends[k.target]
		if k.stall {
			record.Stalled = true
			node, err := h.redis.nodeFor(ctx, queues.ConfigKey(projectSlug))
			if err != nil {
				return err
			}
			stalled := make(chan error, 1)
			go func() {
				c := h.redis.nodeClient(node, 5*time.Second)
				defer c.Close()
				stalled <- stall(ctx, c, redisStall)
			}()
			time.Sleep(stallKillAfter)
			killedAt = time.Now()
			defer func() {
				if err := <-stalled; err != nil {
					h.report.Problems = append(h.report.Problems, "Redis stall: "+err.Error())
				}
			}()
		}
		supervisor := h.sc.supervised && k.target == 0
		redisBefore := 0
		if supervisor {
			redisBefore = h.redis.supervisedPID()
		}
		if err := f.kill(); err != nil {
			return err
		}
		recovered := h.successes.waitFor(k.target, time.Now())
		if err := f.startAndWait(ctx); err != nil {
			return err
		}
		select {
		case at := <-recovered:
			record.Recovery = at.Sub(killedAt)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(recoveryTimeout):
			return fmt.Errorf("frontend %d killed at %s: no warrior request succeeded on it within %s of its restart",
				k.target, record.At.Round(time.Millisecond), recoveryTimeout)
		}
		if supervisor {
			record.Adopted = redisBefore != 0 && h.redis.supervisedPID() == redisBefore
		}
	case killPlugin:
		f := h.frontends[k.target]
		pid := f.pluginPID()
		if pid == 0 {
			return fmt.Errorf("frontend %d has no live plugin to kill at %s", k.target, record.At.Round(time.Millisecond))
		}
		killedAt = time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill plugin %d: %w", pid, err)
		}
		deadline := time.Now().Add(recoveryTimeout)
		for {
			if now := f.pluginPID(); now != 0 && now != pid && announces(f.tracker) {
				record.Recovery = time.Since(killedAt)
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the plugin of frontend %d (pid %d), killed at %s, was not back answering announces on %s within %s",
					k.target, pid, record.At.Round(time.Millisecond), f.tracker, recoveryTimeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	case killRedis:
		// On the cluster: the master holding the project's slot.
		node, err := h.redis.nodeFor(ctx, queues.ConfigKey(projectSlug))
		if err != nil {
			return err
		}
		record.Target = node
		killedAt = time.Now()
		killed, err := h.redis.killNode(node)
		if err != nil {
			return err
		}
		recovered := h.successes.waitFor(-1, time.Now())
		if err := h.redis.restartNode(ctx, node, killed); err != nil {
			return err
		}
		if err := h.redis.waitClusterOK(ctx); err != nil {
			return err
		}
		// At once, before a reclaim can hand a lost done out again.
		lostBefore := len(h.report.AckedLostInWindow) + len(h.report.AckedLostOutside)
		if err := checkAckedAfterRedisKill(ctx, h.rdb, projectSlug, killedAt, h.ledger.ackedBefore(killedAt), h.countedAcked, h.report); err != nil {
			return fmt.Errorf("read done after the Redis restart: %w", err)
		}
		record.AckedLost = len(h.report.AckedLostInWindow) + len(h.report.AckedLostOutside) - lostBefore
		select {
		case at := <-recovered:
			record.Recovery = at.Sub(killedAt)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(recoveryTimeout):
			return fmt.Errorf("redis-server killed at %s: no warrior request succeeded within %s of its restart",
				record.At.Round(time.Millisecond), recoveryTimeout)
		}
	}
	h.kills = append(h.kills, record)
	return nil
}

func (h *harness) summarize(t *testing.T, load, drain, work time.Duration) {
	t.Helper()
	r, l := h.report, h.ledger
	on := "one redis-server"
	if h.sc.cluster {
		on = "a 3-master Redis Cluster"
	}
	if h.sc.supervised {
		on = "frontend 0's supervised redis-server"
	}
	t.Logf("chaos seed %d (HOARD_CHAOS_SEED=%d to replay the schedule): %d warriors on %d frontends on %s, load %s (work ~%s per claim), drain %s",
		h.sc.seed, h.sc.seed, h.sc.warriors, h.sc.frontends, on, load.Round(time.Millisecond), work.Round(time.Millisecond), drain.Round(time.Millisecond))
	t.Logf("warriors: %d claims of %d items, %d dones acknowledged, %d releases, %d failure reports, %d deaths mid-claim, %d dones refused, %d failed requests (%d claims unanswered)",
		l.claims.Load(), l.claimedItems.Load(), l.dones.Load(), l.releases.Load(), l.failReports.Load(), l.deaths.Load(), l.refusals.Load(), l.failures.Load(), l.claimsUnanswered.Load())
	stats, _ := h.rdb.HMGet(t.Context(), queues.StatsKey(projectSlug), "requests_served", "items_served", "items_reclaimed").Result()
	t.Logf("hoard (its Redis stats, which a Redis kill can roll back too): %v claims of %v items served, %v items reclaimed; claims whose reply no warrior read: %v",
		stats[0], stats[1], stats[2], lostReplies(stats[0], l.claims.Load()))
	t.Logf("items %d: done %d, failed %d (max_claims %d; %d of them by expiry alone), todo %d, out (stranded) %d; lost %d, duplicated %d, unknown %d",
		r.Items, r.Done, r.Failed, maxClaims, r.FailedByExpiry, r.Todo, r.Out, len(r.Lost), len(r.Duplicated), len(r.Unknown))
	t.Logf("acknowledged dones lost by Redis kills: %d inside the %s everysec window, %d outside; not done at the end: %d",
		len(r.AckedLostInWindow), everysecWindow, len(r.AckedLostOutside), len(r.AckedNotDoneAtEnd))
	perKind := map[string]int{}
	for _, k := range r.Kills {
		perKind[k.Kind]++
		target := "frontend " + strconv.Itoa(k.Target)
		if k.Kind == killRedis {
			target = "redis"
			if h.sc.cluster {
				target = "master " + strconv.Itoa(k.Target)
			}
		}
		extra := ""
		if k.Stalled {
			extra = fmt.Sprintf(", killed %s into a %s Redis stall", stallKillAfter, redisStall)
		}
		if k.Kind == killRedis {
			extra = fmt.Sprintf(", %d acknowledged dones lost", k.AckedLost)
		}
		if k.AOFBytes > 0 {
			extra += fmt.Sprintf(", AOF %d MB", k.AOFBytes>>20)
		}
		if k.Adopted {
			extra += ", its redis-server adopted"
		}
		t.Logf("  kill %-12s %-10s at %7s: recovered in %s%s", k.Kind, target, k.At.Round(time.Millisecond), k.Recovery.Round(time.Millisecond), extra)
	}
	t.Logf("kills: %d frontend, %d plugin, %d redis-server (%d planned)", perKind[killFrontend], perKind[killPlugin], perKind[killRedis], h.sc.kills)
	for _, kind := range []string{killFrontend, killPlugin, killRedis} {
		var times []time.Duration
		for _, k := range r.Kills {
			if k.Kind == kind {
				times = append(times, k.Recovery)
			}
		}
		if len(times) > 0 {
			slices.Sort(times)
			t.Logf("recovery after a %s kill: median %s, max %s", kind, times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
		}
	}
	if fails := r.failures(); len(fails) > 0 {
		for _, f := range h.frontends {
			t.Logf("%s log tail:\n%s", f.name, f.logTail())
		}
	}
}

// lostReplies is how many claims hoard served that no warrior received
// (replies cut off by a kill), from Redis's count and the warriors'.
func lostReplies(served any, received int64) string {
	text, _ := served.(string)
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return "unknown"
	}
	return strconv.FormatInt(n-received, 10)
}

var (
	binariesOnce sync.Once
	builtBins    binaries
	buildErr     error
	buildDir     string
)

// sharedBinaries builds hoard and the plugin once for the package.
func sharedBinaries(t *testing.T) binaries {
	t.Helper()
	binariesOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "hoard-chaos-bin-")
		if buildErr == nil {
			builtBins, buildErr = buildBinaries(buildDir)
		}
	})
	require.NoError(t, buildErr)
	return builtBins
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// shortRunInParallel runs make test's short scenarios side by side: each
// has its own redis-servers, binaries' processes, ports and directory, and
// most of a run is waiting (the load's fixed length, kills, recoveries), so
// together they take about as long as the longest. make chaos
// (HOARD_CHAOS_DURATION) runs them one at a time, each with the machine
// to itself for minutes.
func shortRunInParallel(t *testing.T) {
	if os.Getenv("HOARD_CHAOS_DURATION") == "" {
		t.Parallel()
	}
}

// chaosSettings reads the run's length, items and seed from the
// environment: the short run of `make test` by default, minutes with
// HOARD_CHAOS_DURATION (make chaos).
func chaosSettings(t *testing.T) (load time.Duration, items int, seed uint64) {
	t.Helper()
	load = 20 * time.Second
	if raw := os.Getenv("HOARD_CHAOS_DURATION"); raw != "" {
		d, err := time.ParseDuration(raw)
		require.NoError(t, err, "HOARD_CHAOS_DURATION")
		require.GreaterOrEqual(t, d, 5*time.Second, "HOARD_CHAOS_DURATION")
		load = d
	}
	items = max(20000, int(load.Seconds()*700))
	if raw := os.Getenv("HOARD_CHAOS_ITEMS"); raw != "" {
		n, err := strconv.Atoi(raw)
		require.NoError(t, err, "HOARD_CHAOS_ITEMS")
		require.Positive(t, n, "HOARD_CHAOS_ITEMS")
		items = n
	}
	seed = uint64(time.Now().UnixNano())
	if raw := os.Getenv("HOARD_CHAOS_SEED"); raw != "" {
		s, err := strconv.ParseUint(raw, 10, 64)
		require.NoError(t, err, "HOARD_CHAOS_SEED")
		seed = s
	}
	return load, items, seed
}

// TestChaos: 32 warriors on 2 frontends sharing one redis-server, each
// frontend with the BitTorrent plugin as its own process; frontends,
// plugins and redis-server are SIGKILLed at seeded random moments and
// restarted. Afterwards every item is in exactly one place, done; no
// acknowledged done is lost outside the everysec window; no claim is
// stranded. 20 s of load by default (part of make test); make chaos runs
// it for minutes.
func TestChaos(t *testing.T) {
	requireTools(t)
	shortRunInParallel(t)
	load, items, seed := chaosSettings(t)
	r := runScenario(t, scenario{
		load: load, items: items, seed: seed, warriors: 32, frontends: 2, plugin: true,
		kills: max(5, int(load/(8*time.Second))),
	}).report
	require.Empty(t, r.failures(), "seed %d", seed)
	require.Equal(t, items, r.Done+r.Failed, "every item done or failed")
	require.Positive(t, r.Failed, "failure reports and max_claims sent items to failed")
	kinds := map[string]bool{}
	for _, k := range r.Kills {
		kinds[k.Kind] = true
	}
	require.Len(t, kinds, 3, "every kind of kill happened: %v", kinds)
}

// TestChaosCluster is TestChaos on a 3-master Redis Cluster, where the
// Redis kill is of the master holding the project's slot (no replica: it
// comes back from its AOF and nodes.conf, and the cluster refuses the
// slot meanwhile). Half of TestChaos's load by default.
func TestChaosCluster(t *testing.T) {
	requireTools(t)
	shortRunInParallel(t)
	load, items, seed := chaosSettings(t)
	load, items = load/2, items/2
	r := runScenario(t, scenario{
		load: load, items: items, seed: seed, warriors: 32, frontends: 2, plugin: true, cluster: true,
		kills: max(5, int(load/(8*time.Second))),
	}).report
	require.Empty(t, r.failures(), "seed %d", seed)
	require.Equal(t, items, r.Done+r.Failed, "every item done or failed")
	require.Positive(t, r.Failed, "failure reports and max_claims sent items to failed")
	kinds := map[string]bool{}
	for _, k := range r.Kills {
		kinds[k.Kind] = true
	}
	require.Len(t, kinds, 3, "every kind of kill happened: %v", kinds)
}

// TestChaosItemsFailByExpiry: items reach max_claims by expiry alone,
// across kill -9 of frontends. Four of sixteen warriors hoard (claim and
// never finish) for the whole load; the queue runs dry within a second
// (short work time), after which every claim is a reclaim (claim.lua
// serves due claims after the fresh items), so hoarded items come back
// and many meet hoarders max_claims (3) times in a row: their third
// expiry (2 s, then 4 s, then 6 s: the TTL grows with each claim) sends
// them to failed at the next claim. Every item must end done or failed,
// once, and some must have failed by expiry. The frontends run on wall
// time (they are real processes), so the expiries take real seconds;
// nothing in the test sleeps to wait for them.
func TestChaosItemsFailByExpiry(t *testing.T) {
	requireTools(t)
	shortRunInParallel(t)
	_, _, seed := chaosSettings(t)
	const items = 600
	r := runScenario(t, scenario{
		load: 16 * time.Second, items: items, seed: seed, warriors: 16, frontends: 2,
		kills: 2, frontendKillsOnly: true, hoarders: 4, work: 50 * time.Millisecond,
	}).report
	require.Empty(t, r.failures(), "seed %d", seed)
	require.Equal(t, items, r.Done+r.Failed, "every item done or failed")
	require.Positive(t, r.FailedByExpiry, "items reached max_claims by expiry")
	require.Len(t, r.Kills, 2)
	for _, k := range r.Kills {
		require.Equal(t, killFrontend, k.Kind)
	}
}

// TestChaosCatchesARedisThatLosesData is the checker's negative control:
// items lost behind hoard's back, an acknowledged done removed from Redis
// as a Redis losing data would, a duplicate and a stranger must each be
// reported, or a green chaos run would prove nothing.
func TestChaosCatchesARedisThatLosesData(t *testing.T) {
	requireTools(t)
	shortRunInParallel(t)
	var poppedTodo, removedDone string
	h := runScenario(t, scenario{
		load: 8 * time.Second, items: 600, seed: 15, warriors: 8, frontends: 1,
		sabotage: func(ctx context.Context, rdb redis.UniversalClient, l *ledger, r *report) {
			var err error
			poppedTodo, err = rdb.LPop(ctx, queues.QueueKey(projectSlug, queues.QueueTodo)).Result()
			require.NoError(t, err)
			// An acknowledged done older than the everysec window,
			// removed as a Redis that lost it would. (On a slow machine the
			// first dones may come late: wait for one, boundedly.)
			var now time.Time
			var old map[string]time.Time
			for range 100 {
				now = time.Now()
				if old = l.ackedBefore(now.Add(-everysecWindow - 100*time.Millisecond)); len(old) > 0 {
					break
				}
				time.Sleep(30 * time.Millisecond)
			}
			require.NotEmpty(t, old, "dones acknowledged more than %s ago", everysecWindow)
			for item := range old {
				removedDone = item
				break
			}
			require.NoError(t, rdb.SRem(ctx, queues.DoneKey(projectSlug), removedDone).Err())
			require.NoError(t, checkAckedAfterRedisKill(ctx, rdb, projectSlug, now, old, map[string]bool{}, r))
		},
	})
	r := h.report
	require.Equal(t, []string{removedDone}, r.AckedLostOutside, "the removed done is caught as lost outside the window")
	require.Empty(t, r.AckedLostInWindow)
	wantLost := []string{poppedTodo, removedDone}
	slices.Sort(wantLost)
	require.Equal(t, wantLost, r.Lost, "both items found nowhere")
	require.Equal(t, []string{removedDone}, r.AckedNotDoneAtEnd)
	require.Equal(t, 598, r.Done+r.Failed)
	require.Zero(t, r.Out)
	require.Len(t, r.failures(), 3, "lost, acknowledged-but-lost and not done at the end: %v", r.failures())
	t.Logf("the checker caught: %v", r.failures())

	// A duplicate and an item nobody queued, added after the run.
	ctx := t.Context()
	doneItem := h.items[len(h.items)-1]
	if doneItem == poppedTodo || doneItem == removedDone {
		doneItem = h.items[len(h.items)-2]
	}
	todoKey := queues.QueueKey(projectSlug, queues.QueueTodo)
	require.NoError(t, h.rdb.RPush(ctx, todoKey, doneItem, "never-queued").Err())
	// And a done item also failed, as a script that failed an item
	// without taking it out of its place would leave it.
	var failedToo string
	for _, item := range h.items {
		if item == doneItem || item == removedDone {
			continue
		}
		if isDone, err := h.rdb.SIsMember(ctx, queues.DoneKey(projectSlug), item).Result(); err == nil && isDone {
			failedToo = item
			break
		}
	}
	require.NotEmpty(t, failedToo, "a done item")
	require.NoError(t, h.rdb.HSet(ctx, queues.FailedKey(projectSlug), failedToo, "{}").Err())
	require.NoError(t, check(ctx, h.rdb, projectSlug, h.items, h.ledger.ackedBefore(time.Now()), r))
	duplicated := []string{doneItem + " in todo,done", failedToo + " in done,failed"}
	slices.Sort(duplicated)
	slices.Sort(r.Duplicated)
	require.Equal(t, duplicated, r.Duplicated)
	require.Equal(t, []string{"never-queued"}, r.Unknown)
	require.Equal(t, 2, r.Todo, "the duplicate and the stranger wait in todo")
}
