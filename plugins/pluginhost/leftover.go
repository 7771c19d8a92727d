package pluginhost

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A plugin's pid file, <PIDDir>/<name>.pid, holds "<plugin pid> <host pid>".
// The parent-death signal makes a plugin die with its host; the pid file is
// the second line of defence, for a plugin that survived anyway (a host on a
// system without the signal, or a plugin started by an older hoard): the
// next start finds it and kills it, because it holds the plugin's ports.

func pidFilePath(dir, name string) string { return filepath.Join(dir, name+".pid") }

// writePIDFile records a running plugin and its host.
func writePIDFile(dir, name string, pid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := pidFilePath(dir, name) + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", pid, os.Getpid())), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, pidFilePath(dir, name))
}

// killLeftover kills the plugin a previous host left running: the process
// in the pid file, if it still runs the plugin's binary and its parent is no
// longer the host that recorded it (it was re-parented when that host
// died). A process that is not the binary (the pid was reused) or that is
// still its live host's child is left alone. It returns the pid it killed,
// or 0.
func killLeftover(dir, name, binary string, logger *slog.Logger) (int, error) {
	content, err := os.ReadFile(pidFilePath(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(content))
	if len(fields) != 2 {
		return 0, nil // not ours to interpret; overwritten at start
	}
	pid, err1 := strconv.Atoi(fields[0])
	host, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil || pid <= 1 {
		return 0, nil
	}
	if !runsBinary(pid, binary) {
		return 0, nil
	}
	if parent, ok := parentPID(pid); !ok || parent == host {
		return 0, nil
	}
	logger.Warn("killing a plugin left running by a previous hoard", "pid", pid, "previous_host_pid", host, "binary", binary)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return 0, fmt.Errorf("kill leftover plugin %d: %w", pid, err)
	}
	// Its sockets close when it is gone; wait for that, boundedly.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !runsBinary(pid, binary) {
			return pid, nil
		}
	}
	return pid, fmt.Errorf("leftover plugin %d did not exit after SIGKILL", pid)
}

// runsBinary reports whether pid is a live (not zombie) process executing
// binary.
func runsBinary(pid int, binary string) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	want, err := filepath.Abs(binary)
	if err != nil {
		return false
	}
	if resolved, err := filepath.EvalSymlinks(want); err == nil {
		want = resolved
	}
	if exe != want {
		return false
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && !strings.Contains(string(status), "State:\tZ")
}

// parentPID reads a process's parent from /proc.
func parentPID(pid int) (int, bool) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid, err := strconv.Atoi(strings.TrimSpace(rest))
			return ppid, err == nil
		}
	}
	return 0, false
}
