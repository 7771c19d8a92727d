package server

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/hoardproject/hoard/queues"
)

// DefaultPageCacheFor is how long a frontend reuses one project's
// stats.json and charts.json, and the max-age it sends with them. Every
// open project page polls both after live activity, so without it a
// thousand viewers would cost a thousand Redis reads per poll.
const DefaultPageCacheFor = 2 * time.Second

// computeTimeout bounds one shared computation. It does not follow the
// request that started it: the requests waiting on it must not fail
// because that one client went away.
const computeTimeout = 10 * time.Second

// sharedJSON keeps each key's encoded JSON for a short while and computes
// a missing or expired one once, however many requests ask for it at the
// same time (a TTL cache with singleflight). Errors are shared by the
// requests that waited on the computation but never kept.
type sharedJSON struct {
	ttl   time.Duration
	clock queues.Clock

	mu      sync.Mutex
	entries map[string]*sharedEntry
}

type sharedEntry struct {
	done    chan struct{} // closed once body or err is set
	body    []byte
	err     error
	expires time.Time
}

// pruneAbove is how many keys the cache holds before it drops expired
// ones; keys are project slugs that exist, so this is rarely reached.
const pruneAbove = 1024

func newSharedJSON(ttl time.Duration, clock queues.Clock) *sharedJSON {
	return &sharedJSON{ttl: ttl, clock: clock, entries: map[string]*sharedEntry{}}
}

// get returns key's JSON: the cached one if fresh, the one being computed
// if a computation is in flight, else a new one from compute.
func (s *sharedJSON) get(ctx context.Context, key string, compute func(context.Context) (any, error)) ([]byte, error) {
	s.mu.Lock()
	now := s.clock.Now()
	e, ok := s.entries[key]
	if !ok || (isClosed(e.done) && !now.Before(e.expires)) {
		e = &sharedEntry{done: make(chan struct{})}
		if len(s.entries) >= pruneAbove {
			s.pruneLocked(now)
		}
		s.entries[key] = e
		s.mu.Unlock()
		s.fill(ctx, key, e, now, compute)
	} else {
		s.mu.Unlock()
	}
	select {
	case <-e.done:
		return e.body, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *sharedJSON) fill(ctx context.Context, key string, e *sharedEntry, started time.Time, compute func(context.Context) (any, error)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), computeTimeout)
	defer cancel()
	v, err := compute(ctx)
	if err == nil {
		e.body, err = json.Marshal(v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Fresh for ttl from when the read began, so nothing served is older
	// than ttl plus one computation.
	e.err, e.expires = err, started.Add(s.ttl)
	if err != nil && s.entries[key] == e {
		delete(s.entries, key)
	}
	close(e.done)
}

func (s *sharedJSON) pruneLocked(now time.Time) {
	for key, e := range s.entries {
		if isClosed(e.done) && !now.Before(e.expires) {
			delete(s.entries, key)
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
