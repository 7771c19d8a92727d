//go:build !unix

package localredis

import "os"

// lockDataDir has no flock outside unix; the pidfile check remains.
func lockDataDir(dataDir string) (*os.File, error) { return nil, nil }
