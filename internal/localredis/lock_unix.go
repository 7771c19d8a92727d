//go:build unix

package localredis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lockFileName is the data dir's lock: flock'd by the hoard that supervises
// the redis-server there, for its whole life, and inherited by that
// redis-server, so the lock is free only once both are gone. Unlike a
// pidfile check it has no window between the check and the start, and it
// works across PID namespaces (containers sharing a volume).
const lockFileName = "hoard.lock"

// lockDataDir takes the data dir's lock, or says who holds it.
func lockDataDir(dataDir string) (*os.File, error) {
	path := filepath.Join(dataDir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localredis: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("localredis: data dir %s is in use by another hoard (pid %s per %s), or by the redis-server it left, which exits soon after it; stop that hoard first",
				dataDir, trimmed(holder), path)
		}
		return nil, fmt.Errorf("localredis: lock %s: %w", path, err)
	}
	// For people: who holds it. The lock, not the content, is the truth.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func trimmed(b []byte) string {
	s := string(b)
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	if s == "" {
		return "unknown"
	}
	return s
}
