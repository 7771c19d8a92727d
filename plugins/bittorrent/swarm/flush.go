package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// The global counters, in btstore.StatsKey's field order.
const (
	statAnnounces = iota
	statScrapes
	statRequests
	statSeeders
	statLeechers
	statSnatches
	statCount
)

var statNames = [statCount]string{"announces", "scrapes", "requests", "seeders", "leechers", "snatches"}

// maxPendingEntries bounds the batch: an announce that grows it past this
// flushes it at once (when no flush is running), so a store that was
// never started cannot grow it without end.
const maxPendingEntries = 20_000

// userTorrent names a user's state on one torrent.
type userTorrent struct {
	user    string
	torrent string // torrent id
}

// userUpdate is a user's new state on a torrent, from a script.
type userUpdate struct {
	key     userTorrent
	hash    bittorrent.InfoHash // the torrent the record is under
	bits    int64
	version int64
}

// transfer is a user's transfer: raw uploaded and downloaded, then
// credited (bytes).
type transfer [4]int64

// The fields of btstore.UserStatsKey, in the order of transfer.stored.
var transferFields = [4]string{"uploaded", "downloaded", "up_extra", "down_extra"}

// stored is t as the totals keep it (btstore.UserStatsKey): the credited
// figures as their difference from the raw ones, which no multiplier or
// token makes nonzero on nearly every announce, so the flush skips their
// HINCRBY (s43). Readers add the raw figure back (Store.User).
func (t transfer) stored() transfer {
	return transfer{t[0], t[1], t[2] - t[0], t[3] - t[1]}
}

// movedBy is one announce's transfer from a script's reply: raw deltas,
// then credited. With accounting off the scripts credit nothing and write
// no difference into the record, so the credited figures are taken as the
// raw ones here, and the totals' difference does not move either: were
// they 0, every flush would write each moving user's differences (-raw,
// two HINCRBYs that accounting on, with no multiplier, never pays), and
// the totals would disagree with the records. Readers say 0 credited
// while accounting is off (creditOf).
func (s *Store) movedBy(userID string, up, down, upCredited, downCredited int64) transfer {
	if !s.accounting(userID) {
		upCredited, downCredited = up, down
	}
	return transfer{up, down, upCredited, downCredited}
}

// transferFieldArgs are transferFields boxed once, for the flush's
// commands.
var transferFieldArgs = [4]any{transferFields[0], transferFields[1], transferFields[2], transferFields[3]}

// indexDelta is how one torrent's index scores changed.
type indexDelta struct {
	seeders, leechers, snatches int64
}

// pending holds the global writes of scripts that ran since the last
// flush: counter deltas (summed, lock-free), and under mu the index
// deltas per torrent (summed), the newest state per user and torrent, and
// transfer deltas per user.
type pending struct {
	stats [statCount]atomic.Int64

	mu     sync.Mutex
	index  map[bittorrent.InfoHash]*indexDelta
	users  map[userTorrent]userUpdate
	totals map[string]*transfer
	// cheats: the announces whose figures crossed a signal's threshold
	// (watch.go)
	cheats []*cheatCheck
	// spare is the last flush's maps, emptied (recycle): the
	// next take's batch starts in them, so a flush's batch does not grow
	// its maps from nothing again (some 45 MB of map growth per 60,000
	// announces in BenchmarkFeedSticky's memory profile)
	spare batch
}

func (p *pending) reset() {
	p.index, p.users, p.totals = p.spare.index, p.spare.users, p.spare.totals
	p.spare = batch{}
	if p.index == nil {
		p.index = make(map[bittorrent.InfoHash]*indexDelta)
	}
	if p.users == nil {
		p.users = make(map[userTorrent]userUpdate)
	}
	if p.totals == nil {
		p.totals = make(map[string]*transfer)
	}
	p.cheats = nil
}

// recycle empties a flush's batch once the flush is done with it and
// keeps its maps for the next take.
func (p *pending) recycle(b *batch) {
	clear(b.index)
	clear(b.users)
	clear(b.totals)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spare = batch{index: b.index, users: b.users, totals: b.totals}
}

func (p *pending) size() int {
	return len(p.index) + len(p.users) + len(p.totals) + len(p.cheats)
}

// addCheat records one announce's signals to check (watchTransfer).
func (p *pending) addCheat(check *cheatCheck) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cheats = append(p.cheats, check)
}

func (p *pending) addStat(stat int, n int64) {
	if n != 0 {
		p.stats[stat].Add(n)
	}
}

func (p *pending) addIndexLocked(hash bittorrent.InfoHash, seeders, leechers, snatches int64) {
	if seeders == 0 && leechers == 0 && snatches == 0 {
		return
	}
	d := p.index[hash]
	if d == nil {
		d = &indexDelta{}
		p.index[hash] = d
	}
	d.seeders += seeders
	d.leechers += leechers
	d.snatches += snatches
}

func (p *pending) addUserLocked(u *userUpdate) {
	if u == nil || u.key.torrent == "" {
		return
	}
	if old, ok := p.users[u.key]; !ok || u.version >= old.version {
		p.users[u.key] = *u
	}
}

func (p *pending) addTotalsLocked(userID string, d transfer) {
	if userID == "" || d == (transfer{}) {
		return
	}
	t := p.totals[userID]
	if t == nil {
		t = &transfer{}
		p.totals[userID] = t
	}
	for i := range d {
		t[i] += d[i]
	}
}

// addAnnounce records one announce's effects; it reports whether the
// batch has grown past maxPendingEntries.
func (p *pending) addAnnounce(hash bittorrent.InfoHash, dSeeders, dLeechers, snatched int64, userID string,
	moved transfer, update *userUpdate) bool {
	p.addStat(statAnnounces, 1)
	p.addStat(statSeeders, dSeeders)
	p.addStat(statLeechers, dLeechers)
	p.addStat(statSnatches, snatched)
	if dSeeders == 0 && dLeechers == 0 && snatched == 0 && update == nil && moved == (transfer{}) {
		return false // the common announce: nothing but the counter
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addIndexLocked(hash, dSeeders, dLeechers, snatched)
	p.addUserLocked(update)
	p.addTotalsLocked(userID, moved.stored())
	return p.size() > maxPendingEntries
}

// addRefresh records a written-behind plain re-announce's effects (its
// announce was counted when it was answered).
func (p *pending) addRefresh(userID string, moved transfer, update *userUpdate) {
	if update == nil && moved == (transfer{}) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addUserLocked(update)
	p.addTotalsLocked(userID, moved.stored())
}

// addExpiry records one expire.lua run's effects.
func (p *pending) addExpiry(hash bittorrent.InfoHash, dSeeders, dLeechers int64, updates []userUpdate) bool {
	p.addStat(statSeeders, dSeeders)
	p.addStat(statLeechers, dLeechers)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addIndexLocked(hash, dSeeders, dLeechers, 0)
	for i := range updates {
		p.addUserLocked(&updates[i])
	}
	return p.size() > maxPendingEntries
}

// batch is what one flush writes.
type batch struct {
	stats  [statCount]int64
	index  map[bittorrent.InfoHash]*indexDelta
	users  map[userTorrent]userUpdate
	totals map[string]*transfer
	cheats []*cheatCheck
}

// take empties the pending writes and returns them.
func (p *pending) take() batch {
	var b batch
	for i := range p.stats {
		b.stats[i] = p.stats[i].Swap(0)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b.index, b.users, b.totals, b.cheats = p.index, p.users, p.totals, p.cheats
	p.reset()
	return b
}

// Flush writes the batched global effects now: counters, indexes, user
// sets and user totals, in one pipeline. Writes that fail go back into
// the batch for the next flush. Flushes never overlap.
func (s *Store) Flush(ctx context.Context) error {
	var drainErr error
	if s.writeBehind != nil {
		drainErr = s.writeBehind.drain(ctx)
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return errors.Join(drainErr, s.flushLocked(ctx))
}

// flushBatch writes the batched global effects, waiting for a flush
// that is running.
func (s *Store) flushBatch(ctx context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.flushLocked(ctx)
}

// flushIfIdle flushes unless a flush is already running (which will
// empty the batch anyway).
func (s *Store) flushIfIdle(ctx context.Context) {
	if !s.flushMu.TryLock() {
		return
	}
	defer s.flushMu.Unlock()
	if err := s.flushLocked(ctx); err != nil {
		s.logger.Warn("swarm: flushing a full batch failed", "error", err)
	}
}

func (s *Store) flushLocked(ctx context.Context) error {
	work := s.pending.take()
	// What goes back into the batch is copied from work (the undo
	// closures, ledgerEntriesOf, userUpdates): work is done with when
	// this returns.
	defer s.pending.recycle(&work)
	pipe := s.rdb.Pipeline()
	var requeue []func()
	var cmds []redis.Cmder
	queue := func(cmd redis.Cmder, undo func()) {
		cmds = append(cmds, cmd)
		requeue = append(requeue, undo)
	}

	for stat, n := range work.stats {
		if n != 0 {
			queue(pipe.HIncrBy(ctx, btstore.StatsKey, statNames[stat], n), func() { s.pending.addStat(stat, n) })
		}
	}
	indexes := [3]btstore.Index{btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches}
	var shrunk [3]bool
	for hash, d := range work.index {
		member := btstore.HexInfoHash(hash)
		for i, n := range [3]int64{d.seeders, d.leechers, d.snatches} {
			if n == 0 {
				continue
			}
			undo := func() {
				var back [3]int64
				back[i] = n
				s.pending.mu.Lock()
				s.pending.addIndexLocked(hash, back[0], back[1], back[2])
				s.pending.mu.Unlock()
			}
			queue(pipe.ZIncrBy(ctx, btstore.IndexKey(indexes[i]), float64(n), member), undo)
			if n < 0 {
				shrunk[i] = true
			}
		}
	}
	// A torrent whose count fell to zero leaves the ranking; so does one a
	// late delta would push below zero (its record was deleted, e.g. by
	// UnregisterTorrent, before its last peers expired).
	for i, touched := range shrunk {
		if touched {
			queue(pipe.ZRemRangeByScore(ctx, btstore.IndexKey(indexes[i]), "-inf", "0"), func() {})
		}
	}
	// The totals: an HINCRBY per user and field, with the key boxed once
	// per user and the field names once per process; a failed one goes
	// back into the batch (below), with no closure per command.
	type totalWrite struct {
		user  string
		field int
		n     int64
		cmd   *redis.IntCmd
	}
	var totals []totalWrite
	for userID, t := range work.totals {
		var key any = btstore.UserStatsKey(userID)
		for i := range transferFields {
			if t[i] == 0 {
				continue
			}
			cmd := redis.NewIntCmd(ctx, "hincrby", key, transferFieldArgs[i], t[i])
			_ = pipe.Process(ctx, cmd) // queued: errors are read per command
			totals = append(totals, totalWrite{user: userID, field: i, n: t[i], cmd: cmd})
		}
	}
	userCalls := make([]scriptCall, 0, len(work.users))
	userUpdates := make([]userUpdate, 0, len(work.users))
	for _, u := range work.users {
		userCalls = append(userCalls, userSetsCall(u))
		userUpdates = append(userUpdates, u)
	}

	failed := 0
	var firstErr error
	if len(cmds) > 0 || len(totals) > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per command
		for i, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				failed++
				firstErr = firstError(firstErr, err)
				requeue[i]()
			}
		}
	}
	for _, w := range totals {
		if err := w.cmd.Err(); err != nil {
			failed++
			firstErr = firstError(firstErr, err)
			var undo transfer
			undo[w.field] = w.n
			s.pending.mu.Lock()
			s.pending.addTotalsLocked(w.user, undo)
			s.pending.mu.Unlock()
		}
	}
	for i, cmd := range s.runScriptsPipelined(ctx, userSetsScript, userCalls) {
		if err := cmd.Err(); err != nil {
			failed++
			firstErr = firstError(firstErr, err)
			s.pending.mu.Lock()
			s.pending.addUserLocked(&userUpdates[i])
			s.pending.mu.Unlock()
		}
	}
	cheatsFailed, cheatsErr := s.writeCheatChecks(ctx, work.cheats)
	failed += cheatsFailed
	firstErr = firstError(firstErr, cheatsErr)
	if failed > 0 {
		s.counters.flushFailures.Add(int64(failed))
		return fmt.Errorf("swarm.Flush: %d of %d writes failed, kept for the next flush: %w",
			failed, len(cmds)+len(totals)+len(userCalls)+len(work.cheats), firstErr)
	}
	return nil
}

func firstError(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// userSetsCall is user_sets.lua's invocation for one user state.
func userSetsCall(u userUpdate) scriptCall {
	return scriptCall{
		keys: []string{
			btstore.UserSetKey(u.key.user, btstore.UserActive), btstore.UserSetKey(u.key.user, btstore.UserComplete),
			btstore.UserSetKey(u.key.user, btstore.UserIncomplete), btstore.UserSetKey(u.key.user, btstore.UserHnR),
			btstore.UserVersionsKey(u.key.user), btstore.UserTorrentsKey(u.key.user),
		},
		args: []any{u.key.torrent, u.version, u.bits, btstore.HexInfoHash(u.hash)},
	}
}

// flushLoop flushes every FlushInterval until ctx ends.
func (s *Store) flushLoop(ctx context.Context) {
	defer s.wg.Done()
	ticker := time.NewTicker(s.cfg.FlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			// The batch alone: the write-behind queue has its own loop,
			// which writes each torrent when it is due (writeBehind.drainDue);
			// draining it all here too would write refreshes a view read
			// was about to take along, in calls of their own.
			if err := s.flushBatch(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: flush failed", "error", err)
			}
			if err := s.beatIfHolding(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: the frontend's heartbeat failed", "error", err)
			}
		}
	}
}
