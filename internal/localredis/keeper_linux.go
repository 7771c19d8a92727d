package localredis

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The keeper is the one deliberate exception to "children die with hoard"
// (internal/childproc). With Config.OutliveCrash, hoard does not start
// redis-server itself: it re-executes its own binary as the keeper (the
// environment variable keeperEnv selects this mode, in init below), and the
// keeper starts redis-server with a parent-death signal tied to the keeper.
// The keeper does not die with hoard, so neither does the redis-server, and
// the next hoard adopts it instead of replaying the AOF (a replay takes
// seconds per 100 MB; an adoption, milliseconds). What stops it leaking:
//
//   - a clean stop of hoard stops redis-server (SIGTERM, AOF fsynced), and
//     the keeper exits with it;
//   - the keeper checks every keeperPoll whether a hoard holds the data
//     dir's owner lock; once none has for the orphan grace, it stops
//     redis-server the clean way and exits, so a crashed hoard that is
//     never restarted leaves nothing running after the grace;
//   - a SIGKILL of the keeper itself takes redis-server down (SIGTERM via
//     the parent-death signal), which the supervising hoard sees and
//     restarts from the AOF, as after any Redis crash;
//   - the redis lock held by redis-server keeps any second redis-server off
//     the data dir until this one is gone.
const keeperEnv = "HOARD_LOCALREDIS_KEEPER"

const keeperSupported = true

// keeperSpec is what hoard tells the keeper, as JSON in keeperEnv.
type keeperSpec struct {
	Binary    string        `json:"binary"`
	Args      []string      `json:"args"`
	OwnerLock string        `json:"owner_lock"`
	Grace     time.Duration `json:"grace"`
	Poll      time.Duration `json:"poll"`
}

func init() {
	spec := os.Getenv(keeperEnv)
	if spec == "" {
		return
	}
	// init runs on the main goroutine, locked to the main thread until init
	// is over; keep it locked so the parent-death signal is tied to a
	// thread that lives as long as the keeper (see internal/childproc).
	runtime.LockOSThread()
	os.Exit(runKeeper(spec))
}

// runKeeper runs redis-server until it exits, and returns its exit code.
// It writes to stderr only when it has something to say that the log must
// have; once hoard is gone nobody reads it, and SIGPIPE is ignored.
func runKeeper(rawSpec string) int {
	var spec keeperSpec
	if err := json.Unmarshal([]byte(rawSpec), &spec); err != nil || spec.Binary == "" || spec.Grace <= 0 || spec.Poll <= 0 {
		fmt.Fprintf(os.Stderr, "hoard redis keeper: bad %s (%v)\n", keeperEnv, err)
		return 2
	}
	signal.Ignore(syscall.SIGPIPE, syscall.SIGINT, syscall.SIGHUP)
	terminate := make(chan os.Signal, 1)
	signal.Notify(terminate, syscall.SIGTERM)

	cmd := exec.Command(spec.Binary, spec.Args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = withoutEnv(os.Environ(), keeperEnv)
	lock := os.NewFile(3, redisLockFileName) // inherited from hoard
	cmd.ExtraFiles = []*os.File{lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "hoard redis keeper: start %s: %v\n", spec.Binary, err)
		return 1
	}
	lock.Close() // redis-server holds it now
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	ticker := time.NewTicker(spec.Poll)
	defer ticker.Stop()
	var orphanSince time.Time
	stopping := false
	for {
		select {
		case err := <-exited:
			return exitCode(err)
		case <-terminate:
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case now := <-ticker.C:
			if stopping {
				continue
			}
			if lockHeld(spec.OwnerLock) {
				orphanSince = time.Time{}
				continue
			}
			if orphanSince.IsZero() {
				orphanSince = now
				continue
			}
			if now.Sub(orphanSince) >= spec.Grace {
				stopping = true
				fmt.Fprintf(os.Stderr, "hoard redis keeper: no hoard has adopted redis-server (pid %d) for %s; stopping it\n", cmd.Process.Pid, spec.Grace)
				_ = cmd.Process.Signal(syscall.SIGTERM)
			}
		}
	}
}

// exitCode is redis-server's exit code as a shell would report it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			return 128 + int(status.Signal())
		}
		return exit.ExitCode()
	}
	return 1
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// keeperCommand is the command that runs redis-server under a keeper.
func keeperCommand(spec keeperSpec) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("localredis: find own executable for the keeper: %w", err)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	// What ps shows: not a second hoard.
	cmd.Args = []string{filepath.Base(self) + "-redis-keeper"}
	cmd.Env = append(withoutEnv(os.Environ(), keeperEnv), keeperEnv+"="+string(raw))
	// Its own process group keeps a terminal's Ctrl-C away, as for a
	// redis-server child; no parent-death signal, by design.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}
