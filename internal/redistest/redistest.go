// Package redistest gives tests real Redis deployments to run against: a
// single redis-server and a three-node Redis Cluster, both private children
// of the test binary. Engine code must behave the same on both, and only a
// real cluster catches cross-slot mistakes in Lua scripts and pipelines.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.RunMain(m) }
//
//	func TestSomething(t *testing.T) {
//		redistest.ForEach(t, func(t *testing.T, b redistest.Backend) { ... })
//	}
//
// Environment:
//   - HOARD_TEST_REDIS_URL: use this Redis as "single" instead of starting one.
//   - HOARD_TEST_CLUSTER_ADDRS: comma-separated host:port of an existing cluster to use as "cluster".
//   - HOARD_TEST_CLUSTER=0: skip the cluster backend (RunMain prints a
//     "SKIP:" line, which make test's summary lists and CI=true fails).
//   - CI=true: a missing redis-server fails the package instead of skipping it.
//   - go test -short (make unit, the fast tier): no Redis is started, the
//     package's tests that need none run, and each one that asks for a Redis
//     (ForEach, Require) skips saying so, whether redis-server is installed
//     or not.
//
// Backends are flushed between tests, so never point these variables at a
// Redis holding data you want to keep.
package redistest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/unittier"
)

func init() {
	// Start spawns processes and Flush wipes whole databases: neither belongs
	// anywhere near a production binary.
	if !testing.Testing() {
		panic("internal/redistest must only be imported from _test.go files")
	}
}

// Backend is one real Redis deployment a test suite runs against.
type Backend struct {
	Name   string // "single" or "cluster"
	Client redis.UniversalClient
	// URL reaches the same Redis in HOARD_REDIS_URL's form (one URL, or
	// a comma-separated node list for the cluster), for code under test
	// that dials by itself, like plugins.
	URL string
}

const (
	singleBackendName  = "single"
	clusterBackendName = "cluster"
	startTimeout       = 3 * time.Minute // a loaded machine (the whole suite under -race) can take long
)

func clusterWanted() bool { return os.Getenv("HOARD_TEST_CLUSTER") != "0" }

// Unavailable reports whether redis-server is needed but missing, and why.
// It is not needed when every wanted backend is provided through the
// environment.
func Unavailable() (reason string, unavailable bool) {
	needsLocalServer := os.Getenv("HOARD_TEST_REDIS_URL") == "" ||
		(clusterWanted() && os.Getenv("HOARD_TEST_CLUSTER_ADDRS") == "")
	if !needsLocalServer {
		return "", false
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "redis-server is not installed, so the Redis-backed tests cannot run; install it with " +
			"`make deps` (or apt-get install redis-server, as root or with sudo), or point HOARD_TEST_REDIS_URL and " +
			"HOARD_TEST_CLUSTER_ADDRS (or HOARD_TEST_CLUSTER=0) at existing servers", true
	}
	return "", false
}

// Start returns the backends to run a package's engine tests against: always
// a "single" redis-server (fresh, on a free loopback port, in a temp dir, AOF
// off) and, unless HOARD_TEST_CLUSTER is "0", a three-node "cluster" on
// loopback. HOARD_TEST_REDIS_URL and HOARD_TEST_CLUSTER_ADDRS replace the
// started servers with existing ones. The returned stop closes the clients
// and stops every child Start started; it is safe to call more than once.
func Start(ctx context.Context) (backends []Backend, stop func(), err error) {
	tempDir, err := os.MkdirTemp("", "hoard-redistest-")
	if err != nil {
		return nil, nil, err
	}
	fleet := &fleet{tempDir: tempDir, logger: testLogger()}
	stop = fleet.stop
	defer func() {
		if err != nil {
			// fleet.stop, not stop: the failing return has set stop to
			// nil already (calling it panicked and hid the error)
			fleet.stop()
			stop = nil
			backends = nil
		}
	}()

	single, err := fleet.singleBackend(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: single backend: %w", err)
	}
	backends = append(backends, single)

	if clusterWanted() {
		cluster, err := fleet.clusterBackend(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("redistest: cluster backend: %w", err)
		}
		backends = append(backends, cluster)
	}
	return backends, stop, nil
}

// Flush empties a backend: FLUSHALL on every master of a cluster, FLUSHALL
// on anything else.
func Flush(ctx context.Context, b Backend) error {
	if cluster, ok := b.Client.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
			return master.FlushAll(ctx).Err()
		})
	}
	return b.Client.FlushAll(ctx).Err()
}

// packageBackends holds what RunMain started, for Backends and ForEach.
var packageBackends []Backend

// RunMain is a whole TestMain: it starts the backends (or skips the package
// when redis-server is missing, failing instead when CI is "true"), runs the
// tests, stops the children, runs after (e.g. removing binaries the tests
// built once for the package) and exits with the tests' code.
func RunMain(m *testing.M, after ...func()) {
	defer func() {
		for _, f := range after {
			f()
		}
	}()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if fuzzing() || testing.Short() {
		// Fuzz targets are pure parsers, and the fuzzer starts and restarts
		// many worker processes: starting a cluster in each stalls it. The
		// unit tier (-short) is the answer in seconds: starting a cluster
		// would take most of them, and its Redis tests skip one by one
		// (Require), so the package's pure tests still run.
		return m.Run()
	}
	if reason, unavailable := Unavailable(); unavailable {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: "+reason)
			return 1
		}
		fmt.Println("SKIP: " + reason)
		return 0
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	backends, stop, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: "+err.Error())
		return 1
	}
	packageBackends = backends
	if !clusterWanted() {
		// Said the way a skipped package says it, so make test's summary
		// lists it and fails it under CI=true: the cluster catches
		// cross-slot mistakes that the single server lets through.
		fmt.Println("SKIP: the cluster backend is off (HOARD_TEST_CLUSTER=0); every test ran on the single redis-server only")
	}

	code := m.Run()
	stop()
	return code
}

// fuzzing reports whether this process runs `go test -fuzz` (as the
// coordinator or as one of its workers).
func fuzzing() bool {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return true
	}
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}

// Backends returns the backends RunMain started (none in the unit tier:
// tests call Require, which skips there, benchmarks run only in make bench).
func Backends() []Backend { return packageBackends }

// Require returns the backends RunMain started, skipping the test in the
// unit tier (-short), where there are none.
func Require(tb testing.TB) []Backend {
	tb.Helper()
	unittier.Skip(tb, "it needs a real Redis")
	backends := Backends()
	if len(backends) == 0 {
		tb.Fatal("redistest: no backends; call redistest.RunMain(m) from this package's TestMain")
	}
	return backends
}

// ForEach runs fn as a subtest named after each backend, flushing the
// backend first so every subtest starts from an empty Redis.
func ForEach(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	backends := Require(t)
	for _, backend := range backends {
		t.Run(backend.Name, func(t *testing.T) {
			if err := Flush(t.Context(), backend); err != nil {
				t.Fatalf("redistest: flush %s backend: %v", backend.Name, err)
			}
			fn(t, backend)
		})
	}
}

// Parallel gives t a redis-server of its own (fresh, AOF off, stopped when t
// ends) and runs t in parallel (t.Parallel) with the package's other
// Parallel tests. It is for the long tests that mostly wait on child
// processes (real hoard serve and plugin binaries killed and restarted):
// the package's shared backends are flushed by every other test, so only a
// private server lets such tests overlap. When HOARD_TEST_REDIS_URL names
// the single backend instead of a started one, t runs serially on that,
// flushed, as ForEach would. The backend's Client is a *redis.Client.
func Parallel(t *testing.T) Backend {
	t.Helper()
	backends := Require(t)
	if os.Getenv("HOARD_TEST_REDIS_URL") != "" {
		for _, b := range backends {
			if b.Name == singleBackendName {
				require(t, Flush(t.Context(), b), "flush the single backend")
				return b
			}
		}
		t.Fatal("redistest: no single backend")
	}
	t.Parallel()
	f := &fleet{tempDir: t.TempDir(), logger: testLogger()}
	t.Cleanup(f.stop)
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	b, err := f.singleBackend(ctx)
	require(t, err, "start a redis-server of the test's own")
	return b
}

// require fails t with what was being done; redistest does not depend on
// testify.
func require(t *testing.T, err error, doing string) {
	t.Helper()
	if err != nil {
		t.Fatalf("redistest: %s: %v", doing, err)
	}
}

// fleet owns everything Start created, so one stop can undo it all.
type fleet struct {
	tempDir string
	logger  *slog.Logger

	mu       sync.Mutex
	servers  []*localredis.Server
	clients  []interface{ Close() error }
	stopOnce sync.Once
}

func (f *fleet) track(server *localredis.Server) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers = append(f.servers, server)
}

func (f *fleet) trackClient(client interface{ Close() error }) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clients = append(f.clients, client)
}

func (f *fleet) stop() {
	f.stopOnce.Do(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, client := range f.clients {
			_ = client.Close()
		}
		var wg sync.WaitGroup
		for _, server := range f.servers {
			wg.Go(func() {
				if err := server.Stop(); err != nil {
					f.logger.Warn("redistest: stopping redis-server", "address", server.Address(), "error", err)
				}
			})
		}
		wg.Wait()
		_ = os.RemoveAll(f.tempDir)
	})
}

func (f *fleet) singleBackend(ctx context.Context) (Backend, error) {
	var options *redis.Options
	var url string
	if url = os.Getenv("HOARD_TEST_REDIS_URL"); url != "" {
		parsed, err := redis.ParseURL(url)
		if err != nil {
			return Backend{}, fmt.Errorf("HOARD_TEST_REDIS_URL: %w", err)
		}
		options = parsed
	} else {
		server, err := f.startServer(ctx, "single", nil)
		if err != nil {
			return Backend{}, err
		}
		options = &redis.Options{Network: server.Network(), Addr: server.Address()}
		url = server.URL()
	}
	client := redis.NewClient(options)
	f.trackClient(client)
	if err := client.Ping(ctx).Err(); err != nil {
		return Backend{}, fmt.Errorf("ping %s: %w", options.Addr, err)
	}
	return Backend{Name: singleBackendName, Client: client, URL: url}, nil
}

// startServer starts one redis-server on a fresh loopback port in
// tempDir/name. Free ports are only free until someone else takes them, so a
// start that fails is retried on new ports a few times. extraArgs receives
// the chosen port and a second free port (for a cluster bus).
func (f *fleet) startServer(ctx context.Context, name string, extraArgs func(dataDir string, busPort int) []string) (*localredis.Server, error) {
	const attempts = 3
	var lastErr error
	for attempt := range attempts {
		dataDir := fmt.Sprintf("%s/%s-%d", f.tempDir, name, attempt)
		port, err := freeport.Get(freeport.TCP)
		if err != nil {
			return nil, err
		}
		busPort, err := freeport.Get(freeport.TCP)
		if err != nil {
			return nil, err
		}
		var args []string
		if extraArgs != nil {
			args = extraArgs(dataDir, busPort)
		}
		server := localredis.New(localredis.Config{
			DataDir:   dataDir,
			Port:      port,
			ExtraArgs: args,
			Logger:    f.logger.With("node", name),
		})
		lastErr = server.Start(ctx)
		if lastErr == nil {
			f.track(server)
			return server, nil
		}
		if errors.Is(lastErr, localredis.ErrRedisServerNotFound) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// testLogger keeps redis-server's chatter out of test output; supervision
// warnings and errors (a crashed child) still show.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func splitAddrs(list string) []string {
	var addrs []string
	for _, addr := range strings.Split(list, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}
