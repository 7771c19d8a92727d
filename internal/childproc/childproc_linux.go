package childproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent asks the kernel to send sig to cmd's process when the
// thread that forks it exits: start cmd through Start or Do, so that thread
// is the one that lives as long as hoard.
func DieWithParent(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}

// Supported reports whether children really die with their parent here.
const Supported = true
