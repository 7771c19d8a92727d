package localredis

import (
	"errors"
	"os"
	"syscall"
)

var sigterm os.Signal = syscall.SIGTERM

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
