package swarm

import (
	"context"
	"sync"
	"time"
)

// refreshed is a frontend's copy of a small list read from Redis (the
// client whitelist, the deny lists), kept for a TTL. When it is stale one
// caller reloads it while the others keep answering from the old copy;
// only the very first load waits, and a failed reload keeps the old copy.
// invalidate (a change made here, or another frontend's hint) makes the
// next caller reload.
type refreshed[T any] struct {
	mu         sync.Mutex
	value      T
	loaded     bool
	loadedAt   time.Time
	refreshing bool
}

// get returns the copy, reloading it with load when it is older than ttl
// (or from the future: the clock went back). The error is load's, and
// only when there is no copy at all.
func (c *refreshed[T]) get(ctx context.Context, now time.Time, ttl time.Duration, load func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	stale := !c.loaded || now.Sub(c.loadedAt) > ttl || now.Before(c.loadedAt)
	reload := stale && (!c.loaded || !c.refreshing)
	if reload {
		c.refreshing = true
	}
	value, loaded := c.value, c.loaded
	c.mu.Unlock()
	if !reload {
		return value, nil
	}
	fresh, err := load(ctx)
	c.mu.Lock()
	c.refreshing = false
	if err == nil {
		c.value, c.loaded, c.loadedAt = fresh, true, now
		value, loaded = fresh, true
	}
	c.mu.Unlock()
	if err != nil && !loaded {
		var zero T
		return zero, err
	}
	return value, nil
}

func (c *refreshed[T]) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded = false
}
