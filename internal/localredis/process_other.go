//go:build !linux

package localredis

import "syscall"

// childSysProcAttr has no portable way to tie the child's lifetime to ours
// outside Linux; Stop remains the only way the child ends.
func childSysProcAttr() *syscall.SysProcAttr { return nil }

// processIsLiveRedis cannot inspect other processes portably, so any live
// process named by the pidfile counts.
func processIsLiveRedis(pid int) bool { return processExists(pid) }
