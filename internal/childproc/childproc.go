// Package childproc starts child processes that die with hoard, even when
// hoard is killed with SIGKILL.
//
// Linux's parent-death signal (Pdeathsig) is the kernel's guarantee, but
// it fires when the OS *thread* that forked the child exits, not when the
// process does. The Go runtime may retire the thread a goroutine happened
// to run on (a thread whose locked goroutine exits is destroyed), and then
// a healthy hoard would kill its own children. So every child is forked
// from one dedicated goroutine locked to its OS thread for the life of the
// process: that thread exits only when hoard does.
//
// The one deliberate exception is the supervised redis-server of `hoard
// serve`: it outlives a crash of hoard under a keeper process, so that the
// next hoard adopts it instead of replaying its AOF, and it stops itself
// when no hoard adopts it in time (internal/localredis, keeper_linux.go).
package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type job struct {
	fn   func() error
	done chan error
}

var (
	startOnce sync.Once
	jobs      chan job
)

// forker runs every fork on the one thread it locks and never releases.
func forker() {
	runtime.LockOSThread()
	// Never unlocked and never returns: the thread must outlive every
	// child forked from it.
	for j := range jobs {
		j.done <- j.fn()
	}
}

// Do runs fn on the forking thread and returns its error. fn must fork its
// children itself (exec.Cmd.Start, or a library call that starts one) and
// should not block for long: starts are serialised.
func Do(fn func() error) error {
	startOnce.Do(func() {
		jobs = make(chan job)
		go forker()
	})
	j := job{fn: fn, done: make(chan error, 1)}
	jobs <- j
	return <-j.done
}

// Start starts cmd on the forking thread with DieWithParent applied.
func Start(cmd *exec.Cmd, sig syscall.Signal) error {
	DieWithParent(cmd, sig)
	return Do(cmd.Start)
}
