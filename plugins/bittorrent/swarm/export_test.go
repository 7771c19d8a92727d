package swarm

import (
	"context"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// SetPruneHook makes Repair's index prune call fn between its read of the
// torrents and the removal of their entries, so a test can race it.
func SetPruneHook(s *Store, fn func()) { s.pruneHook = fn }

// SetPasskeyCacheLimits bounds the store's passkey cache to known and
// misses entries per generation, so a test can fill it.
func SetPasskeyCacheLimits(s *Store, known, misses int) {
	s.passkeys = newPasskeyCache(known, misses)
}

// PasskeyCacheSizes are the cached known passkeys and misses.
func PasskeyCacheSizes(s *Store) (known, misses int) { return s.passkeys.sizes() }

// SetFeedHook makes the feed call fn between a batch's delivery and its
// settling, so a test can crash it there.
func SetFeedHook(s *Store, fn func(FeedBatch)) { s.feedHook = fn }

// ExpireMember runs what the expiry listener runs on a peer's timeout-key
// event: expire.lua for that one deadline member.
func ExpireMember(ctx context.Context, s *Store, hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string) (int64, error) {
	removed, _, err := s.expireMembers(ctx, hash, []string{string(peer[:]) + userID})
	return removed, err
}

// DrainDue runs one tick of the write-behind loop: the torrents due are
// written, reading their views (a store without write-behind: nothing).
func DrainDue(ctx context.Context, s *Store) error {
	if s.writeBehind == nil {
		return nil
	}
	return s.writeBehind.drainDue(ctx)
}

// FlushBatch runs the flush loop's tick: the batched global effects,
// not the write-behind queue.
func FlushBatch(ctx context.Context, s *Store) error { return s.flushBatch(ctx) }

// DrainTicks is how many write-behind loop ticks make one WriteBehind.
const DrainTicks = drainTicks

// ForgetBeat makes the store take its last heartbeat as too old: the next
// call that may stamp a record beats first.
func ForgetBeat(s *Store) { s.frontend.beatNanos.Store(0) }

// FeedRoundStamped runs one of the feed loop's rounds (a complete round
// moves "fed up to").
func FeedRoundStamped(ctx context.Context, s *Store) error { return s.feedRoundStamped(ctx) }

// FedUpTo is this frontend's "fed up to" (ms), as its next beat writes it.
func FedUpTo(s *Store) int64 {
	s.frontend.mu.Lock()
	defer s.frontend.mu.Unlock()
	return s.frontend.fedUpTo
}

// CallBegins counts an announce in flight as prepareAnnounce does for
// one whose script may stamp a record, and returns its time; CallEnds
// ends it, as its reply would.
func CallBegins(s *Store) int64   { return s.callBegins() }
func CallEnds(s *Store, at int64) { s.callEnds(at) }

// TakeQueue takes the whole write-behind queue as a drain does, and
// returns the write of what it took: a drain whose calls are in flight
// until it is called.
func TakeQueue(ctx context.Context, s *Store) (write func() error) {
	taken, oldest := s.writeBehind.queue.take()
	return func() error { return s.writeBehind.writeTaken(ctx, taken, oldest, 0) }
}

// Undelivered counts the announces counted in flight and the sets of
// refreshes held out of the write-behind queue: both 0 once every call
// ended (a count left behind would hold "fed up to" back for good).
func Undelivered(s *Store) (calls, held int) {
	s.frontend.callsMu.Lock()
	for _, n := range s.frontend.calls {
		calls += n
	}
	s.frontend.callsMu.Unlock()
	if s.writeBehind != nil {
		s.writeBehind.queue.mu.Lock()
		for _, n := range s.writeBehind.queue.held {
			held += n
		}
		s.writeBehind.queue.mu.Unlock()
	}
	return calls, held
}

// FeedDropped runs what the feed loop runs after a round for rows dropped
// past the buffer's cap: the frontend's own scan of the records it
// stamped since the oldest dropped.
func FeedDropped(ctx context.Context, s *Store) error {
	from, gen := s.feed.droppedSince()
	if from == 0 {
		return nil
	}
	if _, err := s.FeedOwnRecords(ctx, from, s.cfg.OnFeed); err != nil {
		return err
	}
	s.feed.recovered(gen)
	return nil
}
