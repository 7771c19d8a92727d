package swarm

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The frontends' registry and heartbeats (btstore.FrontendsKey), s43's
// step 2b. Every record whose fed figures a frontend changes carries its
// id (the record's w, prelude's user_feed), and a frontend that delivers
// the feed registers with its "fed up to" time and keeps a heartbeat while
// it holds changes not yet delivered. Since S5 (docs/bittorrent-site.md,
// s43) the feed's rows are only in the memory of the frontend that
// answered (feedbuf.go): a frontend killed before its round leaves rows
// that only its stamped records still show, and the backstop of another
// frontend finds them: a registered frontend with no heartbeat
// (DeadFrontends), and its records stamped after its "fed up to".
//
// The heartbeat lives only while the frontend holds changes (step 2a
// refreshed it every second, so Redis never went quiet and hoard-bench
// announce-private's settle never ended): an idle frontend writes nothing,
// which also spares an idle tracker's AOF and replicas. So a frontend that
// looks dead may be idle; its "fed up to", written by its last beat, is
// then after every record it stamped, and the backstop finds none of them.
// It beats again before it stamps a record (ensureBeat), so no record
// carries the id of a frontend the registry does not list as alive.

// heartbeatTTL is how long a frontend's heartbeat outlives its last beat:
// three flush intervals, so a flush loop slowed by a busy Redis is not
// taken for a dead one, and at least a second.
func (s *Store) heartbeatTTL() time.Duration {
	return max(3*s.cfg.FlushInterval, time.Second)
}

// frontendState is this frontend's side of the registry.
type frontendState struct {
	// start is the monotonic origin of beatNanos.
	start time.Time
	// beatNanos is when the last beat was written (ns since start, 0:
	// none): the heartbeat is taken as alive for half its TTL after it.
	// Measured on the monotonic clock, not Config.Clock: the heartbeat
	// expires on Redis's clock, which an injected clock does not move.
	beatNanos atomic.Int64
	// stamps counts the replies that stamped a record with this
	// frontend's id; delivered is stamps as read when the last complete
	// feed round began (every change stamped before it was delivered by
	// then). The frontend holds changes while stamps > delivered.
	stamps atomic.Int64

	// callsMu guards calls: the announces that may stamp a record, by
	// the time (ms) they read for it (their record's last_announce), from
	// that reading until their reply was handled (callBegins, callEnds).
	callsMu sync.Mutex
	calls   map[int64]int

	mu        sync.Mutex // orders beats, and guards the fields below
	delivered int64
	fedUpTo   int64 // ms (Config.Clock): the last complete round's start, or the store's creation
	beatFed   int64 // the fedUpTo the last beat wrote, -1: no beat yet
}

func (f *frontendState) init(now int64) {
	f.start = time.Now()
	f.fedUpTo, f.beatFed = now, -1
}

// feedOn tells whether this frontend delivers the feed, and so keeps the
// registry's bookkeeping.
func (s *Store) feedOn() bool { return s.cfg.OnFeed != nil }

// ensureBeat makes sure this frontend's heartbeat is alive before a call
// that may stamp a record with its id: a frontend that went idle (no
// heartbeat) beats again, one call, once per idle spell.
func (s *Store) ensureBeat(ctx context.Context) error {
	if !s.feedOn() || s.beatFresh() {
		return nil
	}
	s.frontend.mu.Lock()
	defer s.frontend.mu.Unlock()
	if s.beatFresh() {
		return nil // another call beat while this one waited
	}
	return s.beatLocked(ctx)
}

// beatFresh tells whether the last beat is younger than half the
// heartbeat's TTL.
func (s *Store) beatFresh() bool {
	last := s.frontend.beatNanos.Load()
	return last != 0 && time.Since(s.frontend.start)-time.Duration(last) < s.heartbeatTTL()/2
}

// stamped records that a reply stamped a record with this frontend's id.
func (s *Store) stamped() { s.frontend.stamps.Add(1) }

// holding tells whether this frontend stamped records since the start of
// its last complete feed round.
func (s *Store) holding() bool {
	s.frontend.mu.Lock()
	defer s.frontend.mu.Unlock()
	return s.frontend.stamps.Load() > s.frontend.delivered
}

// callBegins reads the time (ms) of an announce whose script may stamp a
// record with this frontend's id, and counts it in flight until
// callEnds(at): read and counted under one lock, so a round's feedUpTo
// either sees it or began before it read its time.
func (s *Store) callBegins() int64 {
	s.frontend.callsMu.Lock()
	defer s.frontend.callsMu.Unlock()
	at := s.nowMillis()
	if s.frontend.calls == nil {
		s.frontend.calls = make(map[int64]int)
	}
	s.frontend.calls[at]++
	return at
}

// callEnds ends what callBegins counted, once the call's reply was
// handled (its row held, feedbuf.go) or it failed.
func (s *Store) callEnds(at int64) {
	s.frontend.callsMu.Lock()
	defer s.frontend.callsMu.Unlock()
	if s.frontend.calls[at]--; s.frontend.calls[at] <= 0 {
		delete(s.frontend.calls, at)
	}
}

// roundStarts is read at the start of a feed round: what a complete
// round then settles (roundDelivered).
type roundStart struct {
	stamps int64
	at     int64
}

func (s *Store) roundStarts() roundStart {
	stamps := s.frontend.stamps.Load()
	return roundStart{stamps: stamps, at: s.feedUpTo()}
}

// feedUpTo is the one place of the lead's decision 6: the "fed up to" a
// round that starts now may reach once complete. The round's start,
// unless a change not yet in the batch the round flushes is older: an
// announce in flight (its script may have run, its reply is not
// handled), a refresh waiting in the write-behind queue (refresh.lua
// will set the record's last_announce to the time of the announce it
// answered, not to when it runs), or one a drain or a view read took
// from the queue and has not written or put back, or a row dropped past
// the buffer's cap and not yet recovered. Without it, a change
// of a frontend killed after this round would have a last_announce
// before its "fed up to", and the backstop (FeedDeadWriters) would miss
// it.
//
// The queue's lock is held across the whole reading, so a refresh that
// moves from the queue to a drain, or from an announce to the queue, is
// seen on one side or the other: the announce ends its count (callEnds)
// only after its refresh is queued, and the drain's hold is taken under
// the queue's lock. The time is read last, under the calls' lock, so a
// call counted after it began after it.
func (s *Store) feedUpTo() int64 {
	oldest := int64(math.MaxInt64)
	if w := s.writeBehind; w != nil {
		w.queue.mu.Lock()
		defer w.queue.mu.Unlock()
		oldest = w.queue.oldestLocked()
	}
	// Rows dropped past the buffer's cap: before the oldest, until this
	// frontend's own scan delivered their records (feedDropped).
	if from, _ := s.feed.droppedSince(); from != 0 {
		oldest = min(oldest, from)
	}
	s.frontend.callsMu.Lock()
	defer s.frontend.callsMu.Unlock()
	for at := range s.frontend.calls {
		oldest = min(oldest, at)
	}
	return min(oldest, s.nowMillis())
}

// roundDelivered records a complete round (every change stamped before
// it began delivered): the frontend is fed up to feedUpTo's time as the
// round began, even when that is before the last one (only a clock
// stepped back makes it so; a later "fed up to" would not be safe). A
// round that found nothing newly stamped leaves "fed up to" where it
// was: moved, it would be beaten into the registry after every round of
// an idle frontend. It tells whether "fed up to" moved.
func (s *Store) roundDelivered(r roundStart) bool {
	s.frontend.mu.Lock()
	defer s.frontend.mu.Unlock()
	if r.stamps <= s.frontend.delivered {
		return false
	}
	s.frontend.delivered = r.stamps
	s.frontend.fedUpTo = r.at
	return true
}

// beatIfHolding is the flush loop's beat: while the frontend holds
// changes, and once more when its "fed up to" moved since the last beat
// (so the registry's entry is after every record it stamped before it
// goes quiet). Otherwise it writes nothing and the heartbeat expires.
func (s *Store) beatIfHolding(ctx context.Context) error {
	if !s.feedOn() {
		return nil
	}
	s.frontend.mu.Lock()
	moved := s.frontend.beatFed >= 0 && s.frontend.beatFed != s.frontend.fedUpTo
	holding := s.frontend.stamps.Load() > s.frontend.delivered
	s.frontend.mu.Unlock()
	if !holding && !moved {
		return nil
	}
	return s.beat(ctx)
}

// beat writes this frontend's heartbeat and its registry entry ("fed up
// to") in one transaction (one slot): another frontend's
// frontend_forget.lua then sees either both or neither.
func (s *Store) beat(ctx context.Context) error {
	s.frontend.mu.Lock()
	defer s.frontend.mu.Unlock()
	return s.beatLocked(ctx)
}

func (s *Store) beatLocked(ctx context.Context) error {
	fed := s.frontend.fedUpTo
	_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, btstore.FrontendHeartbeatKey(s.owner), fed, s.heartbeatTTL())
		pipe.HSet(ctx, btstore.FrontendsKey, s.owner, fed)
		return nil
	})
	if err != nil {
		return fmt.Errorf("swarm: the frontend's heartbeat: %w", err)
	}
	s.frontend.beatNanos.Store(max(int64(time.Since(s.frontend.start)), 1))
	s.frontend.beatFed = fed
	return nil
}

// unregisterFrontend takes this frontend off the registry when it stops
// cleanly, once Stop delivered every row it held (stopFeed).
func (s *Store) unregisterFrontend(ctx context.Context) error {
	if !s.feedOn() {
		return nil
	}
	_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HDel(ctx, btstore.FrontendsKey, s.owner)
		pipe.Del(ctx, btstore.FrontendHeartbeatKey(s.owner))
		return nil
	})
	if err != nil {
		return fmt.Errorf("swarm: unregistering the frontend: %w", err)
	}
	return nil
}

// DeadFrontends returns the other registered frontends whose heartbeat is
// gone, each with its "fed up to" time (ms): the records it stamped after
// that may hold changes it never delivered. A frontend that is only idle
// is among them, fed up to after everything it stamped.
func (s *Store) DeadFrontends(ctx context.Context) (map[string]int64, error) {
	all, err := s.rdb.HGetAll(ctx, btstore.FrontendsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("swarm.DeadFrontends: %w", err)
	}
	delete(all, s.owner)
	if len(all) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(all))
	alive := make([]*redis.IntCmd, 0, len(all))
	pipe := s.rdb.Pipeline()
	for id := range all {
		ids = append(ids, id)
		alive = append(alive, pipe.Exists(ctx, btstore.FrontendHeartbeatKey(id)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("swarm.DeadFrontends: %w", err)
	}
	dead := make(map[string]int64)
	for i, id := range ids {
		if alive[i].Val() == 0 {
			fed, err := strconv.ParseInt(all[id], 10, 64)
			if err != nil {
				// Only beat writes entries: one that does not parse
				// is reported fed up to nothing, so a backstop
				// looks at all its records.
				s.logger.Warn("swarm: a frontend's registry entry does not parse", "frontend", id, "value", all[id])
			}
			dead[id] = fed
		}
	}
	return dead, nil
}

// ForgetFrontend takes a dead frontend off the registry once what it left
// was delivered (frontend_forget.lua: only while its heartbeat is still
// gone and its "fed up to" is fed). It reports whether the entry went.
func (s *Store) ForgetFrontend(ctx context.Context, id string, fed int64) (bool, error) {
	n, err := frontendForgetScript.Run(ctx, s.rdb, btstore.FrontendKeys(id), id, strconv.FormatInt(fed, 10)).Int64()
	if err != nil {
		return false, fmt.Errorf("swarm.ForgetFrontend: %w", err)
	}
	return n == 1, nil
}

// Owner is this frontend's id: the records' writer stamp and its registry
// entry.
func (s *Store) Owner() string { return s.owner }
