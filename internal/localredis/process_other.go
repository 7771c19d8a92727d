//go:build !linux

package localredis

import "syscall"

// childSysProcAttr has no portable way to tie the child's lifetime to ours
// outside Linux; Stop remains the only way the child ends.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// processLooksLikeRedis cannot inspect other processes portably, so it
// trusts the pidfile.
func processLooksLikeRedis(pid int) bool { return true }
