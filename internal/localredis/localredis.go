// Package localredis starts and supervises a private redis-server child
// process. `hoard serve` uses it when no Redis URL is configured, and tests use
// it to get a real Redis without any external setup.
//
// The child only ever listens on a unix socket or on 127.0.0.1, so the Redis it
// runs is never reachable from the network.
package localredis

import (
	"github.com/hoardproject/hoard/internal/childproc"
	"github.com/hoardproject/hoard/internal/freeport"

	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrRedisServerNotFound is wrapped by the error Start returns when the
// redis-server binary cannot be found, so callers can give setup advice.
var ErrRedisServerNotFound = errors.New("redis-server not found")

// redisServerNotFoundMessage is what users see; it tells them both ways out.
const redisServerNotFoundMessage = "redis-server was not found in PATH; install it with `apt-get install --no-install-recommends redis-server` (Debian/Ubuntu; as root or with sudo) or set HOARD_REDIS_URL to use an existing Redis"

type redisServerNotFoundError struct{}

func (redisServerNotFoundError) Error() string { return redisServerNotFoundMessage }
func (redisServerNotFoundError) Unwrap() error { return ErrRedisServerNotFound }

const (
	socketFileName  = "redis.sock"
	pidFileName     = "redis.pid"
	addrFileName    = "redis.addr"
	readyPollPeriod = 50 * time.Millisecond
	// A redis-server that has not answered at all, not even "LOADING",
	// this long after it started is stuck (it binds its socket before it
	// loads anything). A loading one is never given up on: it is waited
	// for however long its AOF takes, with its progress logged.
	noAnswerTimeout = 30 * time.Second
	// How often a loading redis-server's progress is logged.
	loadingLogPeriod = 2 * time.Second
	// How long Start waits for the data dir's previous supervisor (a
	// hoard still shutting down) or its redis-server (still exiting)
	// unless Config.LockWait says otherwise: a clean stop takes up to
	// gracefulStopTimeout.
	defaultLockWait = 30 * time.Second
	// How often a lock held by someone else is tried again.
	lockPollPeriod = 20 * time.Millisecond
	// Redis fsyncs the AOF on SIGTERM; give it generous time before SIGKILL
	// throws away up to a second of writes.
	gracefulStopTimeout = 15 * time.Second
	// Restarts after a redis-server that had served dies are immediate:
	// warriors wait for nothing but the replay. Only a child that dies
	// before it ever answered (a bad config, a full disk) is retried with
	// a backoff, from initialRestartDelay doubling to maxRestartDelay.
	initialRestartDelay = 200 * time.Millisecond
	maxRestartDelay     = 5 * time.Second
	// DefaultOrphanGrace is how long a redis-server left by a crashed
	// hoard (Config.OutliveCrash) waits to be adopted before it stops
	// itself: long enough for a service manager's restart, short enough
	// that a hoard nobody restarts leaves nothing running for long.
	DefaultOrphanGrace = 2 * time.Minute
	// How often the keeper checks for a supervising hoard.
	keeperPoll = time.Second
	// How many output lines to keep for error messages.
	outputTailLines = 20
	// sun_path is 108 bytes on Linux including the terminating NUL; other
	// systems allow even less (104 on BSD/macOS), so stay on the safe side.
	maxUnixSocketPathLen = 103
)

// Config describes the redis-server child to run.
type Config struct {
	// DataDir holds the Redis files (AOF, pidfile, socket); created 0700 if missing.
	DataDir string
	// Binary is the redis-server executable; empty means look up "redis-server" in PATH.
	Binary string
	// AppendOnly turns the AOF on. Production wants it; tests usually do not.
	AppendOnly bool
	// AppendFsync is the AOF's fsync policy when AppendOnly is on; empty
	// means DefaultFsyncPolicy. Start refuses a value ParseFsyncPolicy refuses.
	AppendFsync FsyncPolicy
	// MaxMemory is redis-server's maxmemory in bytes, with the noeviction
	// policy (a write that would exceed it is refused; no queue data is
	// ever evicted). 0 means no limit.
	MaxMemory int64
	// AOFReplayTarget is how long replaying the AOF's incremental part
	// may take before Start's watcher rewrites the AOF (BGREWRITEAOF),
	// judged at the replay rate (see aof.go); 0 means DefaultAOFReplayTarget.
	// Only with AppendOnly.
	AOFReplayTarget time.Duration
	// OutliveCrash lets the redis-server outlive a hoard that dies without
	// Stop (SIGKILL, a panic), under a keeper process, so that the next
	// Start on the data dir adopts it at once instead of replaying the
	// AOF; it stops itself after OrphanGrace if no Start adopts it. Linux
	// only (elsewhere the child simply is hoard's). See keeper_linux.go.
	OutliveCrash bool
	// OrphanGrace is OutliveCrash's wait for adoption; 0 means DefaultOrphanGrace.
	OrphanGrace time.Duration
	// LockWait bounds how long Start waits for a previous supervisor of
	// the data dir (or its redis-server) still on its way out; 0 means 30 s.
	LockWait time.Duration
	// Port 0 means listen on a unix socket only. Port > 0 means listen on
	// 127.0.0.1:Port only.
	Port int
	// ExtraArgs are appended to the command line, e.g. "--cluster-enabled", "yes".
	ExtraArgs []string
	// Logger receives the child's output (one record per line, attr
	// "redis": debug, except what Redis logs as a warning and anything that
	// is not a Redis log line; see outputLevel) and supervision events.
	// Nil means slog.Default().
	Logger *slog.Logger
}

// Server is a supervised redis-server child process.
type Server struct {
	cfg    Config
	logger *slog.Logger

	// lifecycle serialises Start and Stop.
	lifecycle sync.Mutex
	// supervision is non-nil between a successful Start and the next Stop.
	supervision *supervision
	// ownerLock holds the data dir's owner lock between Start and Stop.
	ownerLock *os.File

	// mu guards the fields below, which are read from other goroutines.
	mu         sync.Mutex
	network    string
	address    string
	outputTail []string
	// redisLock is the data dir's redis lock while no redis-server holds
	// it: taken when the last one is gone, handed to the next one at launch.
	redisLock *os.File
	// replayRate is the slowest AOF replay seen (bytes/s), 0 before any.
	replayRate float64

	// overcommitAdvice makes Redis's overcommit warning one line of hoard's
	// per Server, not a paragraph per (re)start.
	overcommitAdvice sync.Once
}

// supervision is the state of one Start..Stop period.
type supervision struct {
	// ctx is cancelled by Stop; it ends restarts and pending ready checks.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	current *instance
}

// instance is one redis-server on the data dir: started by this Server
// (directly or under a keeper) or adopted from a hoard that died.
type instance struct {
	// cmd is the process this Server started: redis-server itself, or its
	// keeper. nil when adopted.
	cmd     *exec.Cmd
	exited  chan struct{} // closed after cmd.Wait returned; waitErr is then set
	waitErr error
	// outputDone is closed when the output pipe hit EOF, i.e. every line
	// printed has been logged and recorded in the tail. nil when adopted
	// (what an adopted redis-server prints goes nowhere).
	outputDone chan struct{}
	startedAt  time.Time
	adopted    bool
	// pid is redis-server's pid once known (0 before).
	pid atomic.Int64
	// served: it answered PING, so a later death is a crash to restart
	// from at once, not a failure to start.
	served atomic.Bool
	// gone is closed once no process of this instance holds the data dir
	// (the redis lock is this Server's again): it may be started afresh.
	gone chan struct{}
}

// New returns a Server for cfg. Nothing happens until Start.
func New(cfg Config) *Server {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{cfg: cfg, logger: logger}
}

// Network is "unix" or "tcp", as go-redis' Options.Network expects. It is
// empty before Start.
func (s *Server) Network() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.network
}

// Address is the unix socket path or "127.0.0.1:port", as go-redis'
// Options.Addr expects. It is empty before Start.
func (s *Server) Address() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.address
}

// URL is the server's address in the form redis.ParseURL understands:
// "unix:///path/redis.sock" or "redis://127.0.0.1:port/0". It is empty before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.network {
	case "unix":
		return "unix://" + s.address
	case "tcp":
		return "redis://" + s.address + "/0"
	default:
		return ""
	}
}

// PID is the running redis-server's pid, or 0 when none is known.
func (s *Server) PID() int {
	s.lifecycle.Lock()
	sup := s.supervision
	s.lifecycle.Unlock()
	if sup == nil {
		return 0
	}
	sup.mu.Lock()
	defer sup.mu.Unlock()
	return int(sup.current.pid.Load())
}

// Start launches redis-server, or adopts the one a crashed hoard left
// running on the data dir (OutliveCrash), and returns once it answers
// PING. A redis-server still loading its AOF is waited for, however long
// that takes, with its progress logged; ctx bounds the wait. A previous
// supervisor or redis-server still exiting is waited for up to LockWait.
// From then on the child is restarted if it dies, until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	if s.supervision != nil {
		return errors.New("localredis: server already started")
	}

	if _, err := s.fsyncPolicy(); err != nil {
		return err
	}
	if s.cfg.MaxMemory < 0 {
		return fmt.Errorf("localredis: maxmemory %d is negative", s.cfg.MaxMemory)
	}
	binary, err := s.findBinary()
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(s.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("localredis: resolve data dir %q: %w", s.cfg.DataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("localredis: create data dir: %w", err)
	}
	owner, err := s.lockOwner(ctx, dataDir)
	if err != nil {
		return err
	}
	started := false
	defer func() {
		if !started {
			s.releaseLocks(owner)
		}
	}()
	s.mu.Lock()
	s.outputTail = nil // a failed start should only show this run's output
	s.mu.Unlock()

	// Supervision outlives Start's ctx (which only bounds start-up), but keeps its values.
	supervisionCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sup := &supervision{ctx: supervisionCtx, cancel: cancel, done: make(chan struct{})}

	first, err := s.launchOrAdopt(ctx, binary, dataDir)
	if err != nil {
		cancel()
		return err
	}
	if err := s.waitReady(ctx, first); err != nil {
		_ = s.terminate(first) // the readiness error is the one worth reporting
		cancel()
		return fmt.Errorf("localredis: redis-server did not become ready: %w%s", err, s.describeOutputTail())
	}
	if first.adopted {
		// It runs with the command line of the hoard that started it:
		// apply this one's settings (those Redis can change live).
		if err := s.applySettings(ctx); err != nil {
			s.logger.Warn("could not apply settings to the adopted redis-server", "error", err)
		}
	}
	sup.current = first
	s.supervision = sup
	s.ownerLock = owner
	started = true
	if first.adopted {
		s.logger.Info("adopted the redis-server a previous hoard left running", "network", s.Network(), "address", s.Address(), "pid", first.pid.Load(),
			"since_start", time.Since(first.startedAt).Round(time.Millisecond))
	} else {
		s.logger.Info("redis-server started", "network", s.Network(), "address", s.Address(), "pid", first.pid.Load())
	}

	go s.supervise(sup, binary, dataDir)
	if s.cfg.AppendOnly {
		go s.watchAOF(sup)
	}
	return nil
}

// lockOwner takes the data dir's owner lock, waiting up to LockWait for a
// previous supervisor that is still on its way out.
func (s *Server) lockOwner(ctx context.Context, dataDir string) (*os.File, error) {
	path := filepath.Join(dataDir, ownerLockFileName)
	wait := s.cfg.LockWait
	if wait <= 0 {
		wait = defaultLockWait
	}
	deadline := time.Now().Add(wait)
	logged := false
	for {
		f, ok, err := tryLockFile(path)
		if err != nil {
			return nil, err
		}
		if ok {
			// For people: who holds it. The lock, not the content, is the truth.
			if err := f.Truncate(0); err == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			return f, nil
		}
		if time.Now().After(deadline) {
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("localredis: data dir %s is in use by another hoard (pid %s per %s), which did not exit within %s; stop that hoard first",
				dataDir, trimmed(holder), path, wait)
		}
		if !logged && time.Until(deadline) < wait-time.Second {
			holder, _ := os.ReadFile(path)
			s.logger.Info("waiting for the data dir's previous hoard to exit", "data_dir", dataDir, "holder_pid", trimmed(holder), "up_to", wait)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("localredis: waiting for data dir %s: %w", dataDir, ctx.Err())
		case <-time.After(lockPollPeriod):
		}
	}
}

func trimmed(b []byte) string {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "unknown"
	}
	return s
}

// launchOrAdopt starts a redis-server on the data dir, or adopts the one
// running there. A redis-server that holds the redis lock but does not
// answer is on its way out (a SIGTERM, a keeper's grace ended): it is
// waited for, up to LockWait.
func (s *Server) launchOrAdopt(ctx context.Context, binary, dataDir string) (*instance, error) {
	wait := s.cfg.LockWait
	if wait <= 0 {
		wait = defaultLockWait
	}
	deadline := time.Now().Add(wait)
	logged := false
	var lastErr error
	for {
		free := s.holdsRedisLock()
		if !free {
			lock, ok, err := tryLockFile(filepath.Join(dataDir, redisLockFileName))
			if err != nil {
				return nil, err
			}
			if ok {
				s.setRedisLock(lock)
				free = true
			}
		}
		if free {
			// Still checked: a redis-server started by an older hoard
			// holds no redis lock.
			if err := refuseIfDataDirInUse(dataDir); err != nil {
				return nil, err
			}
			if err := s.chooseListenAddress(dataDir); err != nil {
				return nil, err
			}
			return s.launch(binary, dataDir)
		}
		inst, err := s.adopt(ctx, dataDir)
		if err == nil {
			return inst, nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("localredis: a redis-server holds data dir %s but cannot be adopted (%v), and did not exit within %s", dataDir, lastErr, wait)
		}
		if !logged {
			s.logger.Info("waiting for the data dir's previous redis-server to exit", "data_dir", dataDir, "why", err, "up_to", wait)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("localredis: waiting for the previous redis-server on %s: %w", dataDir, ctx.Err())
		case <-time.After(lockPollPeriod):
		}
	}
}

func (s *Server) setRedisLock(f *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.redisLock != nil && s.redisLock != f {
		s.redisLock.Close()
	}
	s.redisLock = f
}

func (s *Server) holdsRedisLock() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.redisLock != nil
}

// takeRedisLock hands the redis lock over to a redis-server being launched.
func (s *Server) takeRedisLock() *os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.redisLock
	s.redisLock = nil
	return f
}

// Stop ends supervision and shuts the child down: SIGTERM, up to 15s for a
// clean exit (Redis fsyncs the AOF), then SIGKILL. Calling it again, or after
// a failed Start, does nothing. An adopted redis-server is stopped the same way.
func (s *Server) Stop() error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	sup := s.supervision
	if sup == nil {
		return nil
	}
	s.supervision = nil

	// Stop the supervisor first so it cannot start a replacement child
	// while we are shutting the current one down.
	sup.cancel()
	<-sup.done

	sup.mu.Lock()
	current := sup.current
	sup.mu.Unlock()
	owner := s.ownerLock
	s.ownerLock = nil
	defer s.releaseLocks(owner)
	err := s.terminate(current)
	if err != nil {
		s.logger.Error("redis-server did not stop cleanly", "error", err)
		return err
	}
	s.logger.Info("redis-server stopped")
	return nil
}

// releaseLocks gives up this process's locks on the data dir. The owner
// lock goes last, so the next supervisor finds the redis-server gone.
func (s *Server) releaseLocks(owner *os.File) {
	if f := s.takeRedisLock(); f != nil {
		f.Close()
	}
	if owner != nil {
		owner.Close()
	}
}

// fsyncPolicy is the configured AOF fsync policy, or the default.
func (s *Server) fsyncPolicy() (FsyncPolicy, error) {
	if s.cfg.AppendFsync == "" {
		return DefaultFsyncPolicy, nil
	}
	policy, err := ParseFsyncPolicy(string(s.cfg.AppendFsync))
	if err != nil {
		return "", fmt.Errorf("localredis: %w", err)
	}
	return policy, nil
}

func (s *Server) findBinary() (string, error) {
	name := s.cfg.Binary
	if name == "" {
		name = "redis-server"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		s.logger.Debug("redis-server lookup failed", "binary", name, "error", err)
		return "", redisServerNotFoundError{}
	}
	return path, nil
}

// refuseIfDataDirInUse stops two redis-servers from sharing one data dir,
// which would corrupt the AOF (and, on a unix socket, silently steal the
// socket: redis-server unlinks an existing socket file before binding).
func refuseIfDataDirInUse(dataDir string) error {
	pidFile := filepath.Join(dataDir, pidFileName)
	content, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localredis: read pidfile: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(content)))
	if err != nil || pid <= 0 {
		// Garbage pidfile: nobody can be relying on it, redis-server overwrites it.
		return nil
	}
	if pid != os.Getpid() && processIsLiveRedis(pid) {
		return fmt.Errorf("localredis: another redis-server (pid %d) is already running on data dir %s; stop it first (or remove %s if that pid is not a redis-server)", pid, dataDir, pidFile)
	}
	return nil
}

// chooseListenAddress decides where the child listens, preferring a unix
// socket when no port was asked for.
func (s *Server) chooseListenAddress(dataDir string) error {
	network, address := "tcp", ""
	if s.cfg.Port > 0 {
		address = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.cfg.Port))
	} else {
		socketPath := filepath.Join(dataDir, socketFileName)
		if len(socketPath) <= maxUnixSocketPathLen {
			network, address = "unix", socketPath
		} else {
			port, err := freeport.Get(freeport.TCP)
			if err != nil {
				return fmt.Errorf("localredis: socket path %q is too long and no loopback port is free: %w", socketPath, err)
			}
			address = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			s.logger.Warn("redis unix socket path is too long for the OS; listening on loopback TCP instead",
				"socket_path", socketPath, "max_len", maxUnixSocketPathLen, "address", address)
		}
	}
	s.mu.Lock()
	s.network, s.address = network, address
	s.mu.Unlock()
	return nil
}

func (s *Server) commandLine(dataDir string) []string {
	args := []string{
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--dir", dataDir,
		"--pidfile", filepath.Join(dataDir, pidFileName),
		// Durability comes from the AOF alone; RDB snapshots would fork
		// the whole dataset periodically for no benefit.
		"--save", "",
	}
	for _, setting := range s.settings() {
		args = append(args, "--"+setting[0], setting[1])
	}
	network, address := s.Network(), s.Address()
	if network == "unix" {
		args = append(args, "--port", "0", "--unixsocket", address, "--unixsocketperm", "700")
	} else {
		_, port, _ := net.SplitHostPort(address)
		args = append(args, "--bind", "127.0.0.1", "--port", port)
	}
	return append(args, s.cfg.ExtraArgs...)
}

// settings are the redis-server settings of Config that Redis can also
// change while it runs: the command line of a launch, and CONFIG SET on
// an adopted redis-server, whose command line was its previous hoard's.
func (s *Server) settings() [][2]string {
	settings := [][2]string{
		// The BitTorrent plugin reacts to expired keys.
		{"notify-keyspace-events", "Ex"},
		// A limit that refuses writes rather than evicting: evicting would
		// drop queue data silently. 0 is no limit.
		{"maxmemory", strconv.FormatInt(s.cfg.MaxMemory, 10)},
		{"maxmemory-policy", "noeviction"},
	}
	if !s.cfg.AppendOnly {
		return append(settings, [2]string{"appendonly", "no"})
	}
	policy, _ := s.fsyncPolicy() // checked by Start
	return append(settings,
		[2]string{"appendonly", "yes"},
		[2]string{"appendfsync", string(policy)},
		// A rewrite writes the dataset as an RDB base, which loads many
		// times faster than the commands it replaces (see aof.go).
		[2]string{"aof-use-rdb-preamble", "yes"},
		// Redis's own trigger, kept as a backstop: once the AOF reaches
		// aofRewriteMinSize and has doubled since the last rewrite. The
		// trigger that bounds the replay time is hoard's (watchAOF), on
		// the incremental part's size against the replay rate.
		[2]string{"auto-aof-rewrite-min-size", strconv.FormatInt(s.aofRewriteThreshold(), 10)},
		[2]string{"auto-aof-rewrite-percentage", "100"})
}

// applySettings sets settings() on the running redis-server.
func (s *Server) applySettings(ctx context.Context) error {
	client := s.newClient()
	defer client.Close()
	args := []any{"CONFIG", "SET"}
	for _, setting := range s.settings() {
		args = append(args, setting[0], setting[1])
	}
	return client.Do(ctx, args...).Err()
}

// launch starts one redis-server process (under a keeper with
// OutliveCrash) and begins logging its output. It takes the redis lock
// this Server holds and hands it to the child.
func (s *Server) launch(binary, dataDir string) (*instance, error) {
	args := s.commandLine(dataDir)
	if err := writeAddrFile(dataDir, s.Network(), s.Address()); err != nil {
		return nil, err
	}
	outputReader, outputWriter, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("localredis: create output pipe: %w", err)
	}
	var cmd *exec.Cmd
	keeper := s.cfg.OutliveCrash && keeperSupported && lockingSupported
	if keeper {
		grace := s.cfg.OrphanGrace
		if grace <= 0 {
			grace = DefaultOrphanGrace
		}
		cmd, err = keeperCommand(keeperSpec{Binary: binary, Args: args, OwnerLock: filepath.Join(dataDir, ownerLockFileName),
			Grace: grace, Poll: min(keeperPoll, grace/4)})
		if err != nil {
			// Better a redis-server that dies with hoard than none.
			s.logger.Warn("cannot run redis-server under a keeper; it will die with hoard, and a restart will replay its AOF", "error", err)
			keeper = false
		}
	}
	if !keeper {
		cmd = exec.Command(binary, args...)
		cmd.SysProcAttr = childSysProcAttr()
	}
	cmd.Stdout = outputWriter
	cmd.Stderr = outputWriter
	lock := s.takeRedisLock()
	if lock != nil && lockingSupported {
		cmd.ExtraFiles = []*os.File{lock} // fd 3: the data dir's redis lock
	}
	start := cmd.Start
	if !keeper {
		// Forked from childproc's long-lived thread, so the parent-death
		// signal fires when hoard dies, not when some runtime thread is retired.
		start = func() error { return childproc.Do(cmd.Start) }
	}
	err = start()
	if lock != nil {
		lock.Close() // the child holds it now (or, on failure, nobody)
	}
	if err != nil {
		outputReader.Close()
		outputWriter.Close()
		return nil, fmt.Errorf("localredis: start %s: %w", binary, err)
	}
	// Only the child writes to the pipe now, so EOF means it is gone.
	outputWriter.Close()

	inst := &instance{cmd: cmd, startedAt: time.Now(), exited: make(chan struct{}), outputDone: make(chan struct{}), gone: make(chan struct{})}
	if !keeper {
		inst.pid.Store(int64(cmd.Process.Pid))
	}
	go func() {
		defer close(inst.outputDone)
		defer outputReader.Close()
		s.logOutput(outputReader)
	}()
	go func() {
		inst.waitErr = cmd.Wait()
		close(inst.exited)
	}()
	go s.watchGone(inst, dataDir)
	return inst, nil
}

// watchGone closes inst.gone once no process of inst holds the data dir:
// the process this Server started has exited (for a keeper, that is after
// its redis-server), and the redis lock is free, which also covers an
// adopted redis-server and one killed behind its keeper's back. The lock
// it then holds is the next launch's.
func (s *Server) watchGone(inst *instance, dataDir string) {
	if inst.exited != nil {
		<-inst.exited
	}
	for {
		lock, free, err := tryLockFile(filepath.Join(dataDir, redisLockFileName))
		if err == nil && free {
			s.setRedisLock(lock)
			close(inst.gone)
			return
		}
		if err != nil {
			// The lock cannot be asked (the data dir was removed under
			// a running server, say): the process itself tells, or this
			// would wait forever for a server long gone.
			if pid := int(inst.pid.Load()); pid > 0 && errors.Is(signalPID(pid, 0), os.ErrProcessDone) {
				close(inst.gone)
				return
			}
		}
		time.Sleep(lockPollPeriod)
	}
}

func (s *Server) logOutput(output io.Reader) {
	lines := bufio.NewReader(output)
	for {
		line, err := lines.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			level, overcommit := outputLevel(line)
			if overcommit {
				s.overcommitAdvice.Do(func() { s.logger.Warn(overcommitAdvice) })
			}
			s.logger.Log(context.Background(), level, "redis-server output", "redis", line)
			s.mu.Lock()
			s.outputTail = append(s.outputTail, line)
			if len(s.outputTail) > outputTailLines {
				s.outputTail = s.outputTail[len(s.outputTail)-outputTailLines:]
			}
			s.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// describeOutputTail formats the last lines the child printed, so start-up
// errors (bad config, port in use) explain themselves.
func (s *Server) describeOutputTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.outputTail) == 0 {
		return " (redis-server printed nothing)"
	}
	return "; last redis-server output:\n  " + strings.Join(s.outputTail, "\n  ")
}

// terminate stops inst: SIGTERM, then SIGKILL after gracefulStopTimeout,
// and waits until it is gone. It reports an error only if it did not exit
// cleanly on SIGTERM.
func (s *Server) terminate(inst *instance) error {
	select {
	case <-inst.gone:
		// Already dead (crashed, or failed to start); nothing to shut down.
		return nil
	default:
	}
	s.signal(inst, syscall.SIGTERM)
	var err error
	select {
	case <-inst.gone:
		if inst.exited != nil && inst.waitErr != nil {
			err = fmt.Errorf("localredis: redis-server exited uncleanly after SIGTERM: %w", inst.waitErr)
		}
	case <-time.After(gracefulStopTimeout):
		s.signal(inst, syscall.SIGKILL)
		<-inst.gone
		err = fmt.Errorf("localredis: redis-server did not exit within %s of SIGTERM and was killed", gracefulStopTimeout)
	}
	// Let the last lines reach the log before we return, so callers (and
	// tests) do not see log records from a server they consider stopped.
	// Bounded because a forked AOF-rewrite child could hold the pipe open.
	if inst.outputDone != nil {
		select {
		case <-inst.outputDone:
		case <-time.After(2 * time.Second):
		}
	}
	return err
}

// signal sends sig to inst's redis-server. The process this Server started
// for it (a keeper) gets it too when the redis-server's pid is not known
// yet (the keeper passes a SIGTERM on) and for a SIGKILL (which makes the
// kernel SIGTERM the redis-server).
func (s *Server) signal(inst *instance, sig syscall.Signal) {
	pid := int(inst.pid.Load())
	if pid > 0 {
		if err := signalPID(pid, sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.logger.Warn("could not signal redis-server", "pid", pid, "signal", sig, "error", err)
		}
	}
	if inst.cmd != nil && inst.cmd.Process.Pid != pid && (pid == 0 || sig == syscall.SIGKILL) {
		_ = inst.cmd.Process.Signal(sig)
	}
}

// supervise restarts the child whenever it dies, until sup.ctx is cancelled.
func (s *Server) supervise(sup *supervision, binary, dataDir string) {
	defer close(sup.done)
	restartDelay := time.Duration(0)
	for {
		sup.mu.Lock()
		current := sup.current
		sup.mu.Unlock()

		select {
		case <-sup.ctx.Done():
			return
		case <-current.gone:
		}
		ranFor := time.Since(current.startedAt)
		if current.served.Load() {
			// It served: warriors are waiting, and the replay alone is
			// wait enough. Only failures to start back off.
			restartDelay = 0
		} else {
			restartDelay = min(max(restartDelay*2, initialRestartDelay), maxRestartDelay)
		}
		var waitErr error
		if current.exited != nil {
			waitErr = current.waitErr
		}
		s.logger.Error("redis-server exited unexpectedly; restarting",
			"error", waitErr, "ran_for", ranFor.Round(time.Millisecond), "restart_in", restartDelay)

		for {
			select {
			case <-sup.ctx.Done():
				return
			case <-time.After(restartDelay):
			}
			replacement, err := s.launchOrAdopt(sup.ctx, binary, dataDir)
			if err != nil {
				restartDelay = min(max(restartDelay*2, initialRestartDelay), maxRestartDelay)
				s.logger.Error("redis-server restart failed", "error", err, "retry_in", restartDelay)
				continue
			}
			// Publish the replacement before waiting, so Stop can shut it down.
			sup.mu.Lock()
			sup.current = replacement
			sup.mu.Unlock()

			err = s.waitReady(sup.ctx, replacement)
			if sup.ctx.Err() != nil {
				return // Stop terminates the replacement
			}
			if err != nil {
				_ = s.terminate(replacement)
				restartDelay = min(max(restartDelay*2, initialRestartDelay), maxRestartDelay)
				s.logger.Error("restarted redis-server did not become ready", "error", err, "retry_in", restartDelay)
				continue
			}
			s.logger.Info("redis-server restarted", "pid", replacement.pid.Load(), "after", time.Since(current.startedAt.Add(ranFor)).Round(time.Millisecond))
			break
		}
	}
}
