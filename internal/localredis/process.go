package localredis

import (
	"errors"
	"os"
	"syscall"
)

// processExists reports whether pid names a process. EPERM means it exists
// but belongs to someone else, which still counts.
func processExists(pid int) bool {
	process, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = process.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// signalPID sends sig to pid, which need not be this process's child (an
// adopted redis-server is not). A gone process is os.ErrProcessDone.
func signalPID(pid int, sig syscall.Signal) error {
	process, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	err = process.Signal(sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
