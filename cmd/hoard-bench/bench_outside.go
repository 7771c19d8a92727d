package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/queues"
)

// `hoard-bench warrior-path` measures the warrior path as an outside client
// sees it: `hoard serve` (a built binary) over a redis-server at hoard's
// default durability (AOF, appendfsync everysec), driven by `hoard-bench
// load` in its own process. With --vs it alternates two builds (A B A B),
// each on a fresh redis-server, and prints the ratios: on a shared machine
// only side-by-side figures mean anything.

type outsideOptions struct {
	hoard, vs     string
	runs          int
	duration      time.Duration
	warriors      int
	scenarios     []string
	supply        int
	multiSupply   int
	backfeedSends int
	backfeedKind  string
	fsync         string
	dir           string
	cpuProfile    string
	client        string
}

func benchOutsideCommand() *cobra.Command {
	var o outsideOptions
	cmd := &cobra.Command{
		Use:   "warrior-path",
		Short: "Warrior round trips, multi=100 and backfeed against `hoard serve` (AOF everysec) from a load generator in its own process; --vs alternates with another build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.runs < 1 || o.duration <= 0 || o.warriors < 1 {
				return errors.New("--runs, --duration and --warriors must be positive")
			}
			if o.client != clientRaw && o.client != clientNetHTTP {
				return fmt.Errorf("--client %q: %s or %s", o.client, clientRaw, clientNetHTTP)
			}
			return benchOutside(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.hoard, "hoard", "bin/hoard", "the hoard binary to measure (A)")
	f.StringVar(&o.vs, "vs", "", "a second hoard binary (B, e.g. the build before a change), run alternately with A")
	f.IntVar(&o.runs, "runs", 3, "runs per figure and build; medians are reported")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "length of each run")
	f.IntVar(&o.warriors, "warriors", 32, "concurrent warriors")
	f.StringSliceVar(&o.scenarios, "scenarios", []string{"keepalive", "close", "multi100", "backfeed"},
		"what to measure: keepalive, close (a new connection per request, as seesaw), multi100, backfeed (with a warrior load beside it)")
	f.IntVar(&o.supply, "supply", 200_000, "items queued for a multi=1 run (a run ends early if they run out)")
	f.IntVar(&o.multiSupply, "multi-supply", 1_000_000, "items queued for a multi=100 run")
	f.IntVar(&o.backfeedSends, "backfeed-senders", 8, "concurrent backfeed senders (batches of 1,000 items)")
	f.StringVar(&o.backfeedKind, "backfeed-kind", queues.BloomKindBlocked, "the backfeed project's bloom_kind, blocked or sets, for A and B alike (a build from before sets ignores the setting and starts blocked generations)")
	f.StringVar(&o.fsync, "redis-fsync", string(localredis.DefaultFsyncPolicy), "the redis-server's appendfsync (hoard serve's default)")
	f.StringVar(&o.dir, "dir", "", "where the runs' data directories go (default: the system's temp dir)")
	f.StringVar(&o.client, "client", clientRaw, "the load generator's warrior client (hoard-bench load --client): "+clientRaw+" or "+clientNetHTTP+"; the same for A and B")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write hoard serve's CPU profile of each measured run (from its admin-guarded /debug/pprof) to <this>-<scenario>-<A|B>-<run>.pprof, and the load generator's to <this>-<scenario>-<A|B>-<run>-loadgen.pprof")
	return cmd
}

// machineLine names the machine and its load, printed with every figure.
func machineLine() string {
	model := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("machine: %d CPUs (nproc), %s, %s, load average %s", runtime.NumCPU(), model, runtime.GOOS+"/"+runtime.GOARCH, loadAverage())
}

func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// outsideFigure is one measured run of one build.
type outsideFigure struct {
	report        loadReport
	quiet         loadReport // backfeed: the warrior load alone, before
	warriors      loadReport // backfeed: the warrior load beside it
	redisCommands float64    // per round trip (per item for backfeed)
	redisMicros   float64    // Redis CPU per round trip (per item for backfeed)
	hoardMicros   float64    // hoard CPU per round trip (per item for backfeed)
	redisReads    float64    // Redis's reads of client input per round trip: how many writes (pipelines) reached it
	loadMicros    float64    // the load generator's own CPU per round trip (per item for backfeed)
	// backfeed: what the warrior load alone cost per round trip in the
	// quiet run, so that the backfeed's own share of the run beside can be
	// told from the warriors' (the warriors' load generator runs flat out,
	// so the figures per new item above count them too)
	quietRedisMicros, quietHoardMicros float64
	load1                              string
	topCommands                        string
}

func (f outsideFigure) rate() float64 {
	if f.report.Seconds == 0 {
		return 0
	}
	return float64(f.report.RoundTrips) / f.report.Seconds
}

// warriorShare charges the warriors beside a backfeed perRT (a figure per
// warrior round trip measured in the quiet run) for each of their round
// trips, per new item: an estimate, since a warrior beside the backfeed
// may cost more than a quiet one (Redis's replies batch less).
func (f outsideFigure) warriorShare(perRT float64) float64 {
	return perRT * float64(f.warriors.RoundTrips) / float64(max(f.report.Items, 1))
}

func (f outsideFigure) itemRate() float64 {
	if f.report.Seconds == 0 {
		return 0
	}
	return float64(f.report.Items) / f.report.Seconds
}

func benchOutside(ctx context.Context, o outsideOptions) error {
	builds := []string{o.hoard}
	if o.vs != "" {
		builds = append(builds, o.vs)
	}
	for _, b := range builds {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("hoard binary: %w (make build builds bin/hoard)", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("hoard serve --redis-url <a fresh redis-server, AOF on, appendfsync %s> per run; load from `hoard-bench load --client %s` in its own process; %d runs of %s per build; %d items queued per run (multi=100: %d); scenarios %s",
		o.fsync, o.client, o.runs, o.duration, o.supply, o.multiSupply, strings.Join(o.scenarios, ", "))
	if o.vs != "" {
		fmt.Printf(", alternating A=%s B=%s", o.hoard, o.vs)
	}
	fmt.Println()
	for _, scenario := range o.scenarios {
		figures := make([][]outsideFigure, len(builds))
		for run := 0; run < o.runs; run++ {
			for b, bin := range builds {
				profile := ""
				if o.cpuProfile != "" {
					profile = fmt.Sprintf("%s-%s-%c-%d.pprof", o.cpuProfile, scenario, 'A'+b, run+1)
				}
				fig, err := outsideRun(ctx, o, self, bin, scenario, run, profile)
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", scenario, bin, run+1, err)
				}
				figures[b] = append(figures[b], fig)
			}
		}
		printOutside(o, scenario, builds, figures)
	}
	return nil
}

func printOutside(o outsideOptions, scenario string, builds []string, figures [][]outsideFigure) {
	switch scenario {
	case "keepalive":
		fmt.Printf("\nwarrior round trips (request + done), multi=1, %d warriors, keep-alive\n", o.warriors)
	case "close":
		fmt.Printf("\nwarrior round trips (request + done), multi=1, %d warriors, a new connection per request (Connection: close, as seesaw)\n", o.warriors)
	case "multi100":
		fmt.Printf("\nwarrior round trips, multi=100, %d warriors, keep-alive\n", o.warriors)
	case "backfeed":
		fmt.Printf("\nbackfeed: %d senders POST batches of 1,000 new items (Connection: close, as LuaSocket) to a project of bloom_kind %s, beside %d keep-alive warriors (multi=1); per-item figures are per new item; the \"own\" ones charge the warriors beside at their quiet run's cost per round trip (an estimate: beside the backfeed a warrior costs hoard more)\n", o.backfeedSends, o.backfeedKind, o.warriors)
	}
	type stat struct {
		name string
		get  func(outsideFigure) float64
		f    string
	}
	stats := []stat{
		{"round trips/s", outsideFigure.rate, "%.0f"},
		{"items/s", outsideFigure.itemRate, "%.0f"},
		{"p99 ms", func(f outsideFigure) float64 { return f.report.P99Millis }, "%.1f"},
		{"Redis commands/rt", func(f outsideFigure) float64 { return f.redisCommands }, "%.1f"},
		{"Redis CPU us/rt", func(f outsideFigure) float64 { return f.redisMicros }, "%.1f"},
		{"hoard CPU us/rt", func(f outsideFigure) float64 { return f.hoardMicros }, "%.1f"},
		{"Redis reads/rt", func(f outsideFigure) float64 { return f.redisReads }, "%.2f"},
		{"load generator CPU us/rt", func(f outsideFigure) float64 { return f.loadMicros }, "%.1f"},
	}
	if scenario == "backfeed" {
		stats = []stat{
			{"new items/s", outsideFigure.itemRate, "%.0f"},
			{"batch p99 ms", func(f outsideFigure) float64 { return f.report.P99Millis }, "%.1f"},
			{"warrior p99 quiet ms", func(f outsideFigure) float64 { return f.quiet.P99Millis }, "%.1f"},
			{"warrior p99 beside ms", func(f outsideFigure) float64 { return f.warriors.P99Millis }, "%.1f"},
			{"warrior p99 ratio", func(f outsideFigure) float64 { return f.warriors.P99Millis / max(f.quiet.P99Millis, 0.001) }, "%.2f"},
			{"warrior round trips/s beside", func(f outsideFigure) float64 { return float64(f.warriors.RoundTrips) / max(f.warriors.Seconds, 0.001) }, "%.0f"},
			{"Redis commands/item", func(f outsideFigure) float64 { return f.redisCommands }, "%.2f"},
			{"Redis CPU us/item", func(f outsideFigure) float64 { return f.redisMicros }, "%.2f"},
			{"hoard CPU us/item", func(f outsideFigure) float64 { return f.hoardMicros }, "%.2f"},
			{"Redis CPU us/item, own", func(f outsideFigure) float64 { return f.redisMicros - f.warriorShare(f.quietRedisMicros) }, "%.2f"},
			{"hoard CPU us/item, own", func(f outsideFigure) float64 { return f.hoardMicros - f.warriorShare(f.quietHoardMicros) }, "%.2f"},
			{"senders' CPU us/item", func(f outsideFigure) float64 { return f.loadMicros }, "%.2f"},
		}
	}
	label := func(b int) string {
		return string(rune('A'+b)) + " " + filepath.Base(filepath.Dir(builds[b])) + "/" + filepath.Base(builds[b])
	}
	medians := make([][]float64, len(builds))
	for _, s := range stats {
		fmt.Printf("  %-30s", s.name)
		for b := range builds {
			vals := make([]float64, len(figures[b]))
			for i, f := range figures[b] {
				vals[i] = s.get(f)
			}
			m := median(vals)
			medians[b] = append(medians[b], m)
			runs := make([]string, len(vals))
			for i, v := range vals {
				runs[i] = fmt.Sprintf(s.f, v)
			}
			fmt.Printf("  %s: "+s.f+" (%s)", label(b)[:1], m, strings.Join(runs, " "))
		}
		if len(builds) == 2 && medians[1][len(medians[1])-1] != 0 {
			fmt.Printf("  A/B %.2f", medians[0][len(medians[0])-1]/medians[1][len(medians[1])-1])
		}
		fmt.Println()
	}
	for b := range builds {
		loads := make([]string, len(figures[b]))
		for i, f := range figures[b] {
			loads[i] = f.load1
		}
		fmt.Printf("  %s: 1-min load at each run's end: %s; busiest Redis commands (last run): %s\n", label(b), strings.Join(loads, " "), figures[b][len(figures[b])-1].topCommands)
	}
}

func median(vals []float64) float64 {
	s := slices.Clone(vals)
	slices.Sort(s)
	return s[len(s)/2]
}

// outsideRun starts a redis-server and bin's `hoard serve`, queues items,
// runs the scenario's load in a subprocess and reads both servers' CPU
// and Redis's command counts around it.
func outsideRun(ctx context.Context, o outsideOptions, self, bin, scenario string, run int, profile string) (outsideFigure, error) {
	dir, err := os.MkdirTemp(o.dir, "hoard-bench-outside-")
	if err != nil {
		return outsideFigure{}, err
	}
	defer os.RemoveAll(dir)
	policy, err := localredis.ParseFsyncPolicy(o.fsync)
	if err != nil {
		return outsideFigure{}, fmt.Errorf("--redis-fsync: %w", err)
	}
	rs := localredis.New(localredis.Config{DataDir: filepath.Join(dir, "redis"), AppendOnly: true, AppendFsync: policy,
		Logger: slog.New(slog.DiscardHandler)})
	if err := rs.Start(ctx); err != nil {
		return outsideFigure{}, err
	}
	defer rs.Stop()
	opts, err := redis.ParseURL(rs.URL())
	if err != nil {
		return outsideFigure{}, err
	}
	// As startBenchEnv's: go-redis's 3 s read timeout failed a fill's
	// Enqueue of 10,000 items at a 1-minute load of 22.
	opts.ReadTimeout = 30 * time.Second
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	engine := queues.NewEngine(rdb, queues.Options{Logger: slog.New(slog.DiscardHandler)})

	addr, err := freeAddr()
	if err != nil {
		return outsideFigure{}, err
	}
	projectsFile := filepath.Join(dir, "projects.json")
	if err := os.WriteFile(projectsFile, []byte(`{"projects":[]}`), 0o600); err != nil {
		return outsideFigure{}, err
	}
	adminToken := "bench-token-" + strconv.Itoa(run)
	serve := exec.CommandContext(ctx, bin, "serve", "--redis-url", rs.URL(), "--listen", addr,
		"--admin-token", adminToken, "--data-dir", filepath.Join(dir, "hoard"),
		"--projects-file", projectsFile, "--log-level", "warn")
	// Its log goes to a file, shown when it fails to come up: a run's end
	// cancels requests in flight, which it logs, and that is not news.
	serveLog, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return outsideFigure{}, err
	}
	defer serveLog.Close()
	serve.Stdout, serve.Stderr = serveLog, serveLog
	if err := serve.Start(); err != nil {
		return outsideFigure{}, err
	}
	defer func() {
		_ = serve.Process.Signal(os.Interrupt)
		waited := make(chan struct{})
		go func() { _ = serve.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(15 * time.Second):
			_ = serve.Process.Kill()
			<-waited
		}
	}()
	url := "http://" + addr
	if err := waitHealthy(ctx, url); err != nil {
		logged, _ := os.ReadFile(serveLog.Name())
		return outsideFigure{}, fmt.Errorf("%w; its log:\n%s", err, logged)
	}

	slug := "bench"
	loadArgs := []string{"load", "--url", url, "--project", slug, "--duration", o.duration.String(), "--warriors", strconv.Itoa(o.warriors), "--client", o.client}
	var beside []string
	switch scenario {
	case "keepalive", "close":
		if err := fillProject(ctx, engine, slug, o.supply); err != nil {
			return outsideFigure{}, err
		}
		if scenario == "keepalive" {
			loadArgs = append(loadArgs, "--keep-alive")
		}
	case "multi100":
		if err := fillProject(ctx, engine, slug, o.multiSupply); err != nil {
			return outsideFigure{}, err
		}
		loadArgs = append(loadArgs, "--keep-alive", "--multi", "100")
	case "backfeed":
		if err := fillProject(ctx, engine, "warriors", o.supply); err != nil {
			return outsideFigure{}, err
		}
		secret := "benchsecret"
		if _, err := engine.CreateProject(ctx, slug, queues.SettingsPatch{BackfeedSecret: &secret, BloomKind: &o.backfeedKind}); err != nil {
			return outsideFigure{}, err
		}
		loadArgs = []string{"load", "--url", url, "--project", slug, "--mode", "backfeed", "--secret", secret,
			"--multi", "1000", "--duration", o.duration.String(), "--warriors", strconv.Itoa(o.backfeedSends), "--tag", "r" + strconv.Itoa(run)}
		beside = []string{"load", "--url", url, "--project", "warriors", "--duration", o.duration.String(),
			"--warriors", strconv.Itoa(o.warriors), "--keep-alive", "--client", o.client}
	default:
		return outsideFigure{}, fmt.Errorf("unknown scenario %q (keepalive, close, multi100, backfeed)", scenario)
	}

	var fig outsideFigure
	if beside != nil {
		// The warrior load alone first: its p99 is the quiet one, and its
		// CPU per round trip is what the warriors beside are charged.
		redisQuiet, err := redisCPU(ctx, rdb)
		if err != nil {
			return fig, err
		}
		hoardQuiet, err := processCPU(serve.Process.Pid)
		if err != nil {
			return fig, err
		}
		if fig.quiet, err = runLoad(ctx, self, beside); err != nil {
			return fig, err
		}
		redisAfter, err := redisCPU(ctx, rdb)
		if err != nil {
			return fig, err
		}
		hoardAfter, err := processCPU(serve.Process.Pid)
		if err != nil {
			return fig, err
		}
		rts := float64(max(fig.quiet.RoundTrips, 1))
		fig.quietRedisMicros = float64((redisAfter - redisQuiet).Microseconds()) / rts
		fig.quietHoardMicros = float64((hoardAfter - hoardQuiet).Microseconds()) / rts
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return fig, err
	}
	redisBefore, err := redisCPU(ctx, rdb)
	if err != nil {
		return fig, err
	}
	hoardBefore, err := processCPU(serve.Process.Pid)
	if err != nil {
		return fig, err
	}
	type result struct {
		r   loadReport
		err error
	}
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- fetchCPUProfile(ctx, url, adminToken, o.duration, profile) }()
	} else {
		profiled <- nil
	}
	besideDone := make(chan result, 1)
	if beside != nil {
		go func() {
			r, err := runLoad(ctx, self, beside)
			besideDone <- result{r, err}
		}()
	}
	if profile != "" {
		// The load generator's own profile beside hoard's.
		loadArgs = append(loadArgs, "--cpuprofile", strings.TrimSuffix(profile, ".pprof")+"-loadgen.pprof")
	}
	fig.report, err = runLoad(ctx, self, loadArgs)
	if beside != nil {
		b := <-besideDone
		if err == nil {
			err = b.err
		}
		fig.warriors = b.r
	}
	if perr := <-profiled; err == nil && perr != nil {
		err = fmt.Errorf("cpu profile: %w", perr)
	}
	if err != nil {
		return fig, err
	}
	hoardAfter, err := processCPU(serve.Process.Pid)
	if err != nil {
		return fig, err
	}
	redisAfter, err := redisCPU(ctx, rdb)
	if err != nil {
		return fig, err
	}
	commands, top, err := redisCommandCount(ctx, rdb)
	if err != nil {
		return fig, err
	}
	reads, err := redisReadsProcessed(ctx, rdb)
	if err != nil {
		return fig, err
	}
	per := float64(fig.report.RoundTrips)
	if scenario == "backfeed" {
		per = float64(fig.report.Items)
	}
	per = max(per, 1)
	fig.redisCommands = float64(commands) / per
	fig.redisMicros = float64((redisAfter - redisBefore).Microseconds()) / per
	fig.hoardMicros = float64((hoardAfter - hoardBefore).Microseconds()) / per
	fig.redisReads = float64(reads) / per
	fig.loadMicros = float64(fig.report.cpu.Microseconds()) / per
	fig.load1 = strings.Fields(loadAverage() + " ?")[0]
	fig.topCommands = top
	return fig, nil
}

// fetchCPUProfile asks hoard serve for a CPU profile covering most of a
// run (a second less than it, so it ends before the load does) and writes it
// to path.
func fetchCPUProfile(ctx context.Context, url, token string, run time.Duration, path string) error {
	seconds := max(int(run/time.Second)-1, 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(file, resp.Body); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

func runLoad(ctx context.Context, self string, args []string) (loadReport, error) {
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return loadReport{}, fmt.Errorf("hoard-bench %s: %w", strings.Join(args, " "), err)
	}
	var r loadReport
	if err := json.Unmarshal(out, &r); err != nil {
		return loadReport{}, fmt.Errorf("load report %q: %w", out, err)
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// redisReadsProcessed is INFO stats' total_reads_processed since CONFIG
// RESETSTAT: the reads of client input Redis's event loop made, so the
// writes (pipelines, lone commands) that reached it, the bench's own few
// included.
func redisReadsProcessed(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO stats has no total_reads_processed")
}

func fillProject(ctx context.Context, engine *queues.Engine, slug string, n int) error {
	maxMulti := queues.MaxMulti
	if _, err := engine.CreateProject(ctx, slug, queues.SettingsPatch{MaxMulti: &maxMulti}); err != nil {
		return err
	}
	batch := make([]queues.QueueItem, 0, 10000)
	for i := 0; i < n; i++ {
		batch = append(batch, queues.QueueItem{Name: fmt.Sprintf("%s/item/%09d", slug, i)})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// freeAddr is a loopback address for the hoard child to listen on.
func freeAddr() (string, error) {
	port, err := freeport.Get(freeport.TCP)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

func waitHealthy(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hoard serve at %s did not become healthy in 30 s (last: %v)", url, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// redisCommandCount sums INFO commandstats' calls (commands scripts call
// count too) since CONFIG RESETSTAT, leaving out the bench's own INFO and
// CONFIG, and names the busiest few.
func redisCommandCount(ctx context.Context, rdb *redis.Client) (int64, string, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, "", err
	}
	type cs struct {
		name  string
		calls int64
	}
	var all []cs
	var total int64
	var scriptCalls, scriptMicros int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		calls, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if luascript.IsScriptCall(name) {
			// The time inside the scripts, without the network's share.
			if _, usec, ok := strings.Cut(rest, "usec="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(usec, ",", 2)[0], 10, 64)
				scriptCalls += calls
				scriptMicros += n
			}
		}
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		all = append(all, cs{name, calls})
		total += calls
	}
	slices.SortFunc(all, func(a, b cs) int { return int(b.calls - a.calls) })
	var top []string
	for i := 0; i < len(all) && i < 6; i++ {
		top = append(top, fmt.Sprintf("%s %d", all[i].name, all[i].calls))
	}
	perCall := "?"
	if scriptCalls > 0 {
		perCall = fmt.Sprintf("%.2f", float64(scriptMicros)/float64(scriptCalls))
	}
	return total, strings.Join(top, ", ") + "; scripts (fcall/evalsha) " + perCall + " us per call inside Redis", nil
}
