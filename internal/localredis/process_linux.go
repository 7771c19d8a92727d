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
// whole process, so the child is started on internal/childproc's thread,
// which lives as long as hoard.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}

// processIsLiveRedis reports whether pid is a running redis-server. It
// looks at /proc rather than trusting kill(pid, 0) because both mistakes
// that matter here would make hoard refuse to start for no reason: a pid
// reused by an unrelated process (after a reboot), and a zombie left by a
// container init that does not reap orphans.
func processIsLiveRedis(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		// Cannot tell (e.g. restricted /proc); assume the worst.
		return processExists(pid)
	}
	// Format: "pid (comm) state ...", where comm may itself contain spaces and ')'.
	openParen := strings.IndexByte(string(stat), '(')
	closeParen := strings.LastIndexByte(string(stat), ')')
	if openParen < 0 || closeParen < openParen || closeParen+2 >= len(stat) {
		return processExists(pid)
	}
	comm := string(stat[openParen+1 : closeParen])
	state := stat[closeParen+2]
	if state == 'Z' || state == 'X' {
		return false
	}
	return strings.Contains(comm, "redis")
}
