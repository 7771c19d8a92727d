//go:build unix

package localredis

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// A data dir has two flock'd files, so that the redis-server may outlive
// the hoard that started it (see adopt.go):
//
//   - ownerLockFileName is held by the hoard that supervises the data dir,
//     and only by it (never inherited): one supervisor at a time, and free
//     the moment that hoard is gone, even by SIGKILL.
//   - redisLockFileName is held by the redis-server running there (inherited
//     as fd 3, through the keeper when there is one), and only by it: free
//     once no redis-server process of this data dir is left, even one still
//     flushing its AOF on the way out.
//
// Unlike a pidfile check a lock has no window between the check and the
// start, cannot be fooled by a reused pid, and works across PID namespaces
// (containers sharing a volume).
const (
	ownerLockFileName = "hoard.lock"
	redisLockFileName = "redis.lock"
)

// lockingSupported: without flock there is no adoption; the redis-server
// is then always this process's own child.
const lockingSupported = true

// tryLockFile takes an exclusive flock on path without waiting. ok is false
// when another open file holds it.
func tryLockFile(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("localredis: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("localredis: lock %s: %w", path, err)
	}
	return f, true, nil
}

// lockHeld reports whether some process holds path's flock, without
// taking it for longer than the check (a shared lock, so two checkers do
// not see each other as holders). A missing file is not held.
func lockHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
