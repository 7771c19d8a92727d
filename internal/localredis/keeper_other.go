//go:build !linux

package localredis

import (
	"errors"
	"os/exec"
	"time"
)

// keeperSupported: outside Linux a child cannot be tied to its parent's
// death, so there is nothing to keep alive on purpose; OutliveCrash is
// ignored and redis-server is hoard's plain child.
const keeperSupported = false

type keeperSpec struct {
	Binary    string
	Args      []string
	OwnerLock string
	Grace     time.Duration
	Poll      time.Duration
}

func keeperCommand(keeperSpec) (*exec.Cmd, error) {
	return nil, errors.New("localredis: no keeper outside Linux")
}
