package localredis

import (
	"fmt"
	"strings"
)

// FsyncPolicy is redis-server's appendfsync setting: when the AOF is forced
// to disk, and so how many acknowledged writes a crash of Redis (or of the
// machine) can take with it. A crash of hoard alone loses nothing: every
// write Redis acknowledged is in Redis's memory and goes to the AOF.
type FsyncPolicy string

const (
	// FsyncEverySec fsyncs once a second in a background thread: up to about
	// a second of acknowledged writes (two in the worst case, when a slow
	// disk makes Redis skip a beat) is lost if Redis or the machine dies.
	FsyncEverySec FsyncPolicy = "everysec"
	// FsyncAlways fsyncs before replying to any write: a write Redis
	// acknowledged survives a crash of Redis or of the machine, at the cost
	// of one fsync per event-loop turn (see docs/durability.md).
	FsyncAlways FsyncPolicy = "always"
	// FsyncNo leaves flushing to the kernel (about every 30 s on Linux): a
	// kill of redis-server loses nothing the kernel already has, but a power
	// loss can take tens of seconds of writes.
	FsyncNo FsyncPolicy = "no"
)

// DefaultFsyncPolicy is what the supervised redis-server runs with unless
// told otherwise, the same as Redis's own default.
const DefaultFsyncPolicy = FsyncEverySec

// FsyncPolicies lists every accepted value, in the order help texts name them.
var FsyncPolicies = []FsyncPolicy{FsyncEverySec, FsyncAlways, FsyncNo}

// ParseFsyncPolicy accepts exactly the values redis-server's appendfsync
// accepts; anything else is an error that names them, so a typo never
// falls back to a weaker policy than the operator asked for.
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	for _, p := range FsyncPolicies {
		if s == string(p) {
			return p, nil
		}
	}
	names := make([]string, len(FsyncPolicies))
	for i, p := range FsyncPolicies {
		names[i] = string(p)
	}
	return "", fmt.Errorf("redis fsync policy %q is not one of %s", s, strings.Join(names, ", "))
}
