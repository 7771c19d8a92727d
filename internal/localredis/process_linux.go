package localredis

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// childSysProcAttr makes the kernel SIGTERM redis-server when hoard dies, even
// by SIGKILL, so no orphan keeps the data dir (and its pidfile) busy. Its own
// process group keeps a terminal's Ctrl-C away from it: hoard decides when
// Redis stops, after it has stopped writing.
//
// Pdeathsig fires when the OS thread that forked the child exits, not the
// whole process; the Go runtime only retires threads locked with
// runtime.LockOSThread, which hoard does not do around Start.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}

// processLooksLikeRedis guards against a stale pidfile whose pid was reused by
// an unrelated process (e.g. after a reboot).
func processLooksLikeRedis(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		// Cannot tell (e.g. restricted /proc); assume the worst.
		return true
	}
	return strings.Contains(string(comm), "redis")
}
