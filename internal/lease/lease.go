// Package lease is hoard's one lease: a Redis key naming the frontend that
// runs a periodic job this period (a plugin's tick, the swarm's sweep of a
// shard, its repair), taken or renewed by one script (lua/lease.lua).
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/lua"

	"github.com/hoardproject/hoard/internal/luascript"
)

var script = luascript.Load(lua.Files, "lease.lua")

// Take takes the lease key for owner for ttl, or renews it when owner
// holds it already, and reports whether owner holds it now.
func Take(ctx context.Context, rdb redis.UniversalClient, key, owner string, ttl time.Duration) (bool, error) {
	ms := max(ttl.Milliseconds(), 1)
	reply, err := luascript.Run(ctx, rdb, script, []string{key}, owner, ms)
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", key, err)
	}
	return reply == int64(1), nil
}

// NewOwner returns an owner id unique to this process and call: host name,
// pid and 6 random bytes (a restarted process is a new owner).
func NewOwner() string {
	host, _ := os.Hostname()
	var id [6]byte
	_, _ = rand.Read(id[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(id[:]))
}
