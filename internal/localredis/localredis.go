// Package localredis starts and supervises a private redis-server child
// process. `hoard serve` uses it when no Redis URL is configured, and tests use
// it to get a real Redis without any external setup.
//
// The child only ever listens on a unix socket or on 127.0.0.1, so the Redis it
// runs is never reachable from the network.
package localredis

import (
	"github.com/hoardproject/hoard/internal/childproc"

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
	readyTimeout    = 10 * time.Second
	readyPollPeriod = 50 * time.Millisecond
	// Redis fsyncs the AOF on SIGTERM; give it generous time before SIGKILL
	// throws away up to a second of writes.
	gracefulStopTimeout = 15 * time.Second
	initialRestartDelay = 200 * time.Millisecond
	maxRestartDelay     = 10 * time.Second
	// A child that stayed up this long is considered healthy, so a later crash
	// restarts quickly again instead of inheriting a long backoff.
	healthyRunDuration = time.Minute
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
	// dirLock holds the data dir's flock between Start and Stop; every
	// redis-server child inherits it (see lock_unix.go).
	dirLock *os.File

	// mu guards the fields below, which are read from other goroutines.
	mu         sync.Mutex
	network    string
	address    string
	outputTail []string

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

	mu    sync.Mutex
	child *child
}

// child is one running redis-server process.
type child struct {
	cmd       *exec.Cmd
	startedAt time.Time
	exited    chan struct{} // closed after Wait returned; waitErr is then set
	waitErr   error
	// outputDone is closed when the child's output pipe hit EOF, i.e. every
	// line it printed has been logged and recorded in the tail.
	outputDone chan struct{}
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

// Start launches redis-server and returns once it answers PING (or fails
// after 10s). From then on the child is restarted if it dies, until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	if s.supervision != nil {
		return errors.New("localredis: server already started")
	}

	if _, err := s.fsyncPolicy(); err != nil {
		return err
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
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	started := false
	defer func() {
		if !started && lock != nil {
			lock.Close()
		}
	}()
	// Still checked: a redis-server started by an older hoard holds no lock.
	if err := refuseIfDataDirInUse(dataDir); err != nil {
		return err
	}
	if err := s.chooseListenAddress(dataDir); err != nil {
		return err
	}
	s.dirLock = lock
	args := s.commandLine(dataDir)
	s.mu.Lock()
	s.outputTail = nil // a failed start should only show this run's output
	s.mu.Unlock()

	// Supervision outlives Start's ctx (which only bounds start-up), but keeps its values.
	supervisionCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sup := &supervision{ctx: supervisionCtx, cancel: cancel, done: make(chan struct{})}

	first, err := s.launch(binary, args)
	if err != nil {
		cancel()
		return err
	}
	readyCtx, cancelReady := context.WithTimeout(ctx, readyTimeout)
	err = s.waitReady(readyCtx, first)
	cancelReady()
	if err != nil {
		_ = s.terminate(first) // the readiness error is the one worth reporting
		cancel()
		return fmt.Errorf("localredis: redis-server did not become ready: %w%s", err, s.describeOutputTail())
	}
	sup.child = first
	s.supervision = sup
	started = true
	s.logger.Info("redis-server started", "network", s.Network(), "address", s.Address(), "pid", first.cmd.Process.Pid)

	go s.supervise(sup, binary, args)
	return nil
}

// Stop ends supervision and shuts the child down: SIGTERM, up to 15s for a
// clean exit (Redis fsyncs the AOF), then SIGKILL. Calling it again, or after
// a failed Start, does nothing.
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
	current := sup.child
	sup.mu.Unlock()
	defer s.releaseLock()
	if current == nil {
		return nil
	}
	err := s.terminate(current)
	if err != nil {
		s.logger.Error("redis-server did not stop cleanly", "error", err)
		return err
	}
	s.logger.Info("redis-server stopped")
	return nil
}

// releaseLock gives up this process's hold on the data dir's lock; a
// redis-server still running keeps its inherited hold until it exits.
func (s *Server) releaseLock() {
	if s.dirLock != nil {
		s.dirLock.Close()
		s.dirLock = nil
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
			port, err := FreeLoopbackPort()
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
		// The BitTorrent plugin reacts to expired keys.
		"--notify-keyspace-events", "Ex",
	}
	if s.cfg.AppendOnly {
		policy, _ := s.fsyncPolicy() // checked by Start
		args = append(args, "--appendonly", "yes", "--appendfsync", string(policy),
			// When to rewrite the AOF: once it reaches 512 MB and has
			// doubled since the last rewrite. Redis's 64 MB minimum is
			// wrong for hoard: every Bloom filter bit a backfeed sets is
			// logged (about 870 bytes per new item with the default k =
			// 20), while the filter itself is a few tens of MB (36 MB a
			// generation at the defaults) that each rewrite forks and
			// writes out again, so a 100k-item flood rewrote every few
			// seconds (9 rewrites per 300k items). At 512 MB a rewrite
			// comes every ~600k new items; replaying that much AOF on a
			// restart takes about 8 s (60 MB/s measured with DEBUG
			// LOADAOF). The 100% growth (Redis's default, said here so it
			// is a choice) keeps the AOF within about twice a large
			// dataset.
			"--auto-aof-rewrite-min-size", "512mb",
			"--auto-aof-rewrite-percentage", "100")
	} else {
		args = append(args, "--appendonly", "no")
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

// launch starts one redis-server process and begins logging its output.
func (s *Server) launch(binary string, args []string) (*child, error) {
	outputReader, outputWriter, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("localredis: create output pipe: %w", err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout = outputWriter
	cmd.Stderr = outputWriter
	cmd.SysProcAttr = childSysProcAttr()
	if s.dirLock != nil {
		cmd.ExtraFiles = []*os.File{s.dirLock} // fd 3: the data dir's lock
	}
	// Forked from childproc's long-lived thread, so the parent-death signal
	// fires when hoard dies, not when some runtime thread is retired.
	if err := childproc.Do(cmd.Start); err != nil {
		outputReader.Close()
		outputWriter.Close()
		return nil, fmt.Errorf("localredis: start %s: %w", binary, err)
	}
	// Only the child writes to the pipe now, so EOF means it is gone.
	outputWriter.Close()

	c := &child{cmd: cmd, startedAt: time.Now(), exited: make(chan struct{}), outputDone: make(chan struct{})}
	go func() {
		defer close(c.outputDone)
		defer outputReader.Close()
		s.logOutput(outputReader)
	}()
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
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

// terminate stops c: SIGTERM, then SIGKILL after gracefulStopTimeout. It
// reports an error only if the child did not exit cleanly on SIGTERM.
func (s *Server) terminate(c *child) error {
	select {
	case <-c.exited:
		// Already dead (crashed, or failed to start); nothing to shut down.
		return nil
	default:
	}
	if err := c.cmd.Process.Signal(sigterm); err != nil {
		s.logger.Warn("could not send SIGTERM to redis-server", "error", err)
	}
	var err error
	select {
	case <-c.exited:
		if c.waitErr != nil {
			err = fmt.Errorf("localredis: redis-server exited uncleanly after SIGTERM: %w", c.waitErr)
		}
	case <-time.After(gracefulStopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		err = fmt.Errorf("localredis: redis-server did not exit within %s of SIGTERM and was killed", gracefulStopTimeout)
	}
	// Let the last lines reach the log before we return, so callers (and
	// tests) do not see log records from a server they consider stopped.
	// Bounded because a forked AOF-rewrite child could hold the pipe open.
	select {
	case <-c.outputDone:
	case <-time.After(2 * time.Second):
	}
	return err
}

// supervise restarts the child whenever it dies, until sup.ctx is cancelled.
func (s *Server) supervise(sup *supervision, binary string, args []string) {
	defer close(sup.done)
	restartDelay := initialRestartDelay
	for {
		sup.mu.Lock()
		current := sup.child
		sup.mu.Unlock()

		select {
		case <-sup.ctx.Done():
			return
		case <-current.exited:
		}
		ranFor := time.Since(current.startedAt)
		if ranFor >= healthyRunDuration {
			restartDelay = initialRestartDelay
		}
		s.logger.Error("redis-server exited unexpectedly; restarting",
			"error", current.waitErr, "ran_for", ranFor.Round(time.Millisecond), "restart_in", restartDelay)

		for {
			select {
			case <-sup.ctx.Done():
				return
			case <-time.After(restartDelay):
			}
			restartDelay = min(restartDelay*2, maxRestartDelay)

			replacement, err := s.launch(binary, args)
			if err != nil {
				s.logger.Error("redis-server restart failed", "error", err, "retry_in", restartDelay)
				continue
			}
			// Publish the replacement before waiting, so Stop can shut it down.
			sup.mu.Lock()
			sup.child = replacement
			sup.mu.Unlock()

			readyCtx, cancelReady := context.WithTimeout(sup.ctx, readyTimeout)
			err = s.waitReady(readyCtx, replacement)
			cancelReady()
			if sup.ctx.Err() != nil {
				return // Stop terminates the replacement
			}
			if err != nil {
				_ = s.terminate(replacement)
				s.logger.Error("restarted redis-server did not become ready", "error", err, "retry_in", restartDelay)
				continue
			}
			s.logger.Info("redis-server restarted", "pid", replacement.cmd.Process.Pid)
			break
		}
	}
}

// FreeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago. Another process may grab it before it is used, so callers should be
// prepared to retry.
func FreeLoopbackPort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}
