//go:build !linux

package childproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent has no portable equivalent outside Linux; the pid files and
// leftover checks of the callers are the only defence there.
func DieWithParent(cmd *exec.Cmd, sig syscall.Signal) {}

// Supported reports whether children really die with their parent here.
const Supported = false
