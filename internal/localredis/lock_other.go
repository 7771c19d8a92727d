//go:build !unix

package localredis

import "os"

const (
	ownerLockFileName = "hoard.lock"
	redisLockFileName = "redis.lock"
)

// lockingSupported: without flock there is no adoption; the redis-server
// is then always this process's own child, and the pidfile check remains.
const lockingSupported = false

// tryLockFile cannot lock outside unix: it always succeeds.
func tryLockFile(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	return f, err == nil, err
}

func lockHeld(path string) bool { return false }
