package swarm

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The feed to the site (docs/bittorrent-site.md, "The feed"). Each user's
// record on a torrent numbers every change of its fed figures (seq), and
// the same script returns the record's row at that seq (prelude's
// user_feed); the frontend that answered holds the newest row per record
// in memory (feedbuf.go) and stamps the record with its id. Its feed
// round delivers what it holds, with each torrent's counters as the
// replies said them, and reads nothing of the rows from Redis: a round
// costs Redis the outbox's append and, for a torrent no reply showed a
// seeder, one read of its last_action.
//
// So every row is a record's cumulative figures at one seq: delivering a
// row twice (a refused delivery retried, a frontend killed after its
// append) sends the same row with the same key, which the outbox and the
// site drop; no change is ever left out, because a frontend killed
// before its round leaves records stamped with its id after its "fed up
// to", which another frontend's backstop delivers once its heartbeat
// expired (feedwriters.go, frontends.go). Rows an earlier build wrote to
// Redis (btstore.FeedRowsKey, indexed in btstore.FeedIndexKey) are
// delivered once, by the drain a feed loop runs at start
// (drainLegacyFeed).

// FeedRow is one user's cumulative figures on one torrent at Seq.
type FeedRow struct {
	UserID                   string
	Seq                      int64
	Uploaded, Downloaded     int64
	UpCredited, DownCredited int64
	SeedMillis, LeechMillis  int64
	Snatched                 int64 // ms of the user's snatch, 0 when none
}

// FeedBatch is one torrent's waiting rows with its counters as read.
type FeedBatch struct {
	InfoHash   bittorrent.InfoHash
	TorrentID  string
	Seeders    int64
	Leechers   int64
	Snatches   int64
	LastAction int64 // ms, 0 when never seeded
	Announced  int64 // ms of the newest last_announce among the rows: the torrent's last activity
	Rows       []FeedRow
}

// feedRoundLimit bounds the torrents one deliver call carries, and, in
// the drain of an earlier build's rows, the torrents it takes from each
// index shard at a time, and feedRowsLimit the rows it reads from one
// torrent, so each call is short.
const (
	feedRoundLimit = 100
	feedRowsLimit  = 500
)

// FeedRound delivers the rows this frontend holds, one FeedBatch per
// torrent, in info-hash order, up to feedRoundLimit torrents per deliver
// call, and returns how many rows it delivered. The rows of a call
// deliver refuses are held again (unless a newer row of their record came
// in meanwhile) and offered next round; the round goes on with the other
// calls and returns the first error.
func (s *Store) FeedRound(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, error) {
	rows, _, err := s.feedRound(ctx, deliver)
	return rows, err
}

// feedRound is FeedRound, and tells whether the round was complete: every
// row held when it began was delivered.
func (s *Store) feedRound(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, bool, error) {
	taken := s.feed.take()
	if len(taken) == 0 {
		return 0, true, nil
	}
	// The rows go back to the buffer's spare once the round is done with
	// them (holdAgain copies what it puts back).
	defer s.feed.recycle(taken)
	order := s.feed.takeOrder()
	batches, spans, held := feedBatches(taken, &order)
	s.feed.recycleOrder(order)
	if err := s.readLastActions(ctx, batches); err != nil {
		s.holdAgain(held)
		return 0, false, fmt.Errorf("swarm.FeedRound: %w", err)
	}
	delivered := 0
	var firstErr error
	for start := 0; start < len(batches); start += feedRoundLimit {
		end := min(start+feedRoundLimit, len(batches))
		call := batches[start:end]
		if err := deliver(ctx, call); err != nil {
			firstErr = firstError(firstErr, fmt.Errorf("swarm.FeedRound: delivering %d torrents: %w", len(call), err))
			s.holdAgain(held[spans[start].first:spans[end-1].end])
			continue
		}
		for _, b := range call {
			delivered += len(b.Rows)
			if s.feedHook != nil {
				s.feedHook(b)
			}
		}
	}
	return delivered, firstErr == nil, firstErr
}

// heldSpan is where one torrent's rows are in a round's held rows, once
// sorted by feedBatches.
type heldSpan struct{ first, end int }

// feedBatches sorts a round's rows by torrent (info-hash order), user id
// and seq, keeps each record's newest row (a record changed twice since
// the last round was held twice; rows are cumulative, so the newest
// carries both changes), and makes one batch per torrent with its
// counters as the newest reply said them, and the latest time a reply
// showed a seeder. held is the rows kept, in the batches' order: spans[i]
// is where batch i's rows are in it. The batches' rows share one slice,
// made once per round: a round is about one row per crediting announce.
func feedBatches(taken []heldRow, order *[]heldOrder) (batches []FeedBatch, spans []heldSpan, held []heldRow) {
	sortHeld(taken, order)
	// One pass: a record's newest row is the last of its run, moved down
	// to its place in held (never past the row being read); every row of
	// a torrent, replaced or not, counts for its counters.
	held = taken[:0]
	rows := make([]FeedRow, 0, len(taken))
	for i := 0; i < len(taken); {
		hash := taken[i].key.hash
		var t seenTorrent
		lastAction, announced := int64(0), int64(0)
		first := len(held)
		for ; i < len(taken) && taken[i].key.hash == hash; i++ {
			r := taken[i]
			announced = max(announced, r.announced)
			if r.torrent.at >= t.at {
				t = r.torrent
			}
			lastAction = max(lastAction, r.torrent.lastAction)
			if i+1 < len(taken) && taken[i+1].key == r.key {
				continue
			}
			held = append(held, r)
			rows = append(rows, r.row)
		}
		batches = append(batches, FeedBatch{InfoHash: hash, TorrentID: t.id, Seeders: t.seeders, Leechers: t.leechers,
			Snatches: t.snatches, LastAction: lastAction, Announced: announced, Rows: rows[first:len(held):len(held)]})
		spans = append(spans, heldSpan{first, len(held)})
	}
	clear(taken[len(held):]) // the strings of the rows replaced
	return batches, spans, held
}

// heldOrder is a held row's place in the sort: its info-hash as three
// words, its user and its seq, with the row's index. Sorting these and then moving
// each row once costs a round less than sorting the rows themselves (some
// 130 bytes each, moved at every swap; the sort was 40% of
// BenchmarkFeedBufferRound).
type heldOrder struct {
	hi, mid uint64
	lo      uint32
	i       int
	seq     int64
	user    string
}

// sortHeld sorts held by info-hash, then user id, then seq (a record's
// rows oldest first). scratch is the sort's order, grown as
// needed, for the next round to reuse (feedBuffer.takeOrder).
func sortHeld(held []heldRow, scratch *[]heldOrder) {
	if cap(*scratch) < len(held) {
		*scratch = make([]heldOrder, len(held))
	}
	order := (*scratch)[:len(held)]
	defer clear(order) // the user ids
	for i := range held {
		h := &held[i].key.hash
		order[i] = heldOrder{hi: binary.BigEndian.Uint64(h[:8]), mid: binary.BigEndian.Uint64(h[8:16]),
			lo: binary.BigEndian.Uint32(h[16:]), i: i, seq: held[i].row.Seq, user: held[i].key.user}
	}
	slices.SortFunc(order, func(a, b heldOrder) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.mid, b.mid); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lo, b.lo); c != 0 {
			return c
		}
		if c := strings.Compare(a.user, b.user); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	// Move the rows into their places, one cycle of the permutation at a
	// time: held[k] takes the row at order[k].i, and a placed k is marked
	// -1.
	for start := range order {
		if order[start].i < 0 {
			continue
		}
		if order[start].i == start {
			order[start].i = -1
			continue
		}
		first := held[start]
		k := start
		for {
			from := order[k].i
			order[k].i = -1
			if from == start {
				held[k] = first
				break
			}
			held[k] = held[from]
			k = from
		}
	}
}

// readLastActions reads the stored last_action of the torrents no reply
// showed a seeder for (a torrent with one: the reply's time is its
// last_action), one pipeline; the other counters are the replies'.
func (s *Store) readLastActions(ctx context.Context, batches []FeedBatch) error {
	var reads []*redis.StringCmd
	var which []int
	pipe := s.rdb.Pipeline()
	for i := range batches {
		if batches[i].LastAction == 0 {
			reads = append(reads, pipe.HGet(ctx, btstore.TorrentKey(batches[i].InfoHash), "last_action"))
			which = append(which, i)
		}
	}
	if len(reads) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for k, cmd := range reads {
		batches[which[k]].LastAction = replyInt(cmd.Val())
	}
	return nil
}

// holdAgain puts a round's rows back into the buffer, a refused delivery's
// or a failed read's (a newer row of the record held meanwhile wins in
// the next round).
func (s *Store) holdAgain(rows []heldRow) {
	for _, r := range rows {
		if n := s.feed.hold(r, s.cfg.FeedBufferRows); n > 0 {
			s.counters.feedRowsDropped.Add(int64(n))
		}
	}
}

// holdRow keeps a feed row (from a credit reply, user_feed's) for the
// feed round, with the torrent's counters from the same reply.
func (s *Store) holdRow(hash bittorrent.InfoHash, announced int64, row FeedRow, t seenTorrent) {
	r := heldRow{key: rowKey{hash: hash, user: row.UserID}, announced: announced, row: row, torrent: t}
	if n := s.feed.hold(r, s.cfg.FeedBufferRows); n > 0 {
		s.counters.feedRowsDropped.Add(int64(n))
	}
}

// FeedRowsHeld is how many rows this frontend holds for its next round:
// one per change (a record changed twice holds two, of which the round
// delivers the newest).
func (s *Store) FeedRowsHeld() int { return s.feed.held() }

// drainLegacyFeed delivers, once, the rows an earlier build left in Redis
// (btstore.FeedRowsKey): it indexes the torrents whose rows no index
// names (legacyFeedIndex: a scan of every master), then runs rounds over
// the index until one is complete, settling what it delivered as that
// build did. The feed loop runs it at start, before its first round. The
// scan runs until one succeeds and is marked (btstore.FeedLegacyScannedKey):
// a keyspace of hundreds of millions of keys takes minutes to scan, and
// every start of every frontend paid for it; the index's rounds, a read of
// its sixteen shards when it is empty, run on every start.
func (s *Store) drainLegacyFeed(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, error) {
	scanned, err := s.rdb.Get(ctx, btstore.FeedLegacyScannedKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("swarm.drainLegacyFeed: %w", err)
	}
	if scanned != btstore.FeedLegacyScanned {
		if _, err := s.legacyFeedIndex(ctx); err != nil {
			return 0, err
		}
		if err := s.rdb.Set(ctx, btstore.FeedLegacyScannedKey, btstore.FeedLegacyScanned, 0).Err(); err != nil {
			return 0, fmt.Errorf("swarm.drainLegacyFeed: %w", err)
		}
	}
	delivered := 0
	for {
		n, complete, err := s.legacyFeedRound(ctx, deliver)
		delivered += n
		if err != nil || complete || n == 0 {
			return delivered, err
		}
	}
}

// legacyFeedRound is one round over the index of an earlier build's rows:
// up to feedRoundLimit indexed torrents per shard, one deliver call per
// shard. complete: it took every torrent indexed and every row of each
// and met no error.
func (s *Store) legacyFeedRound(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, bool, error) {
	rows, complete := 0, true
	var firstErr error
	for shard := range btstore.FeedShards {
		n, whole, err := s.feedShard(ctx, shard, deliver)
		rows += n
		complete = complete && whole
		firstErr = firstError(firstErr, err)
	}
	return rows, complete && firstErr == nil, firstErr
}

// feedTorrent is one indexed torrent in a round: its index entry as read,
// then its rows and counters.
type feedTorrent struct {
	hash    bittorrent.InfoHash
	member  string
	score   float64
	rows    *redis.KeyValueSliceCmd
	counter *redis.SliceCmd
}

// feedShard runs a round over one shard of the index. Each step is one
// call for all the shard's torrents taken: reading the rows and counters
// (a pipeline), delivering (the plugin appends every batch to the outbox
// in one script call), settling (a pipeline) and taking torrents with no
// rows left off the index. So a round costs Redis a few round trips per
// shard, not per torrent, and the rows are settled only once the
// delivery of all of them succeeded.
//
// whole: the shard's torrents and their rows were all taken (no limit
// reached).
func (s *Store) feedShard(ctx context.Context, shard int, deliver func(context.Context, []FeedBatch) error) (
	delivered int, whole bool, err error) {
	index := btstore.FeedIndexKey(shard)
	// One more than the limit: the shard's keeper (score 0) comes first.
	entries, err := s.rdb.ZRangeWithScores(ctx, index, 0, feedRoundLimit).Result()
	if err != nil {
		return 0, false, fmt.Errorf("swarm.drainLegacyFeed: %w", err)
	}
	whole = len(entries) <= feedRoundLimit
	torrents := make([]feedTorrent, 0, len(entries))
	var firstErr error
	for _, entry := range entries {
		member, _ := entry.Member.(string)
		if member == btstore.FeedIndexKeeper {
			continue
		}
		hash, ok := btstore.ParseHexInfoHash(member)
		if !ok {
			if err := s.rdb.ZRem(ctx, index, member).Err(); err != nil {
				firstErr = firstError(firstErr, fmt.Errorf("swarm.FeedRound: %w", err))
			}
			continue
		}
		torrents = append(torrents, feedTorrent{hash: hash, member: member, score: entry.Score})
	}
	if len(torrents) == 0 {
		return 0, whole, firstErr
	}
	pipe := s.rdb.Pipeline()
	for i := range torrents {
		t := &torrents[i]
		t.rows = pipe.HRandFieldWithValues(ctx, btstore.FeedRowsKey(t.hash), feedRowsLimit)
		t.counter = pipe.HMGet(ctx, btstore.TorrentKey(t.hash), "id", "seeders", "leechers", "snatches", "last_action")
	}
	_, _ = pipe.Exec(ctx) // errors are read per command

	var batches []FeedBatch
	var settles []feedSettle
	var emptied []any // index members and scores of torrents with no rows left
	for i := range torrents {
		t := &torrents[i]
		if err := firstError(t.rows.Err(), t.counter.Err()); err != nil && !errors.Is(err, redis.Nil) {
			firstErr = firstError(firstErr, fmt.Errorf("swarm.FeedRound: %w", err))
			continue
		}
		if len(t.rows.Val()) == 0 {
			emptied = append(emptied, t.member, t.score)
			continue
		}
		if len(t.rows.Val()) >= feedRowsLimit {
			whole = false
		}
		batch, settle := s.feedBatch(t.hash, t.rows.Val(), t.counter.Val())
		if len(batch.Rows) > 0 {
			batches = append(batches, batch)
			delivered += len(batch.Rows)
		}
		settle.torrent = i
		settles = append(settles, settle)
	}
	if len(batches) > 0 {
		if err := deliver(ctx, batches); err != nil {
			return 0, false, firstError(firstErr, fmt.Errorf("swarm.FeedRound: delivering shard %d: %w", shard, err))
		}
	}
	if s.feedHook != nil {
		for _, batch := range batches {
			s.feedHook(batch)
		}
	}
	for j, left := range s.settleFeed(ctx, torrents, settles) {
		if left.err != nil {
			firstErr = firstError(firstErr, fmt.Errorf("swarm.FeedRound: settling: %w", left.err))
			continue
		}
		if left.n == 0 {
			t := torrents[settles[j].torrent]
			emptied = append(emptied, t.member, t.score)
		}
	}
	if len(emptied) > 0 {
		// Gone from the index only if no flush marked them since the
		// read; a mark after it is a new ZADD, with a new score.
		if err := zremUnchangedScript.Run(ctx, s.rdb, []string{index}, emptied...).Err(); err != nil {
			firstErr = firstError(firstErr, fmt.Errorf("swarm.FeedRound: %w", err))
		}
	}
	return delivered, whole, firstErr
}

// feedSettle is what a round deletes of one torrent's rows once they
// were delivered: the fields of rows named by their seq ("<user>:<seq>"),
// which a plain HDEL deletes safely (a newer row of the user is another
// field), and feed_settle.lua's ARGV for rows an earlier build wrote under
// the user id alone, which it deletes only while their seq is still the
// one delivered.
type feedSettle struct {
	torrent int   // index in the round's torrents
	fields  []any // the seq-named fields
	named   []any // the same as feed_settle.lua's pairs: field, seq delivered
	legacy  []any // pairs: field, seq delivered
}

// feedLeft is how many rows a settled torrent has left, or why that is
// unknown.
type feedLeft struct {
	n   int64
	err error
}

// settleFeed deletes the delivered rows, one pipeline for the shard: per
// torrent an HDEL of its seq-named rows and an HLEN, or, for a torrent
// with rows an earlier build wrote, feed_settle.lua, which returns the
// count itself. Returns the rows left per settle, in order.
func (s *Store) settleFeed(ctx context.Context, torrents []feedTorrent, settles []feedSettle) []feedLeft {
	left := make([]feedLeft, len(settles))
	pipe := s.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(settles))
	var legacy []scriptCall
	var legacyAt []int
	for j, st := range settles {
		key := btstore.FeedRowsKey(torrents[st.torrent].hash)
		if len(st.legacy) > 0 {
			legacy = append(legacy, scriptCall{keys: []string{key}, args: append(st.legacy, st.named...)})
			legacyAt = append(legacyAt, j)
			continue
		}
		if len(st.fields) > 0 {
			pipe.HDel(ctx, key, fieldNames(st.fields)...)
		}
		lens[j] = pipe.HLen(ctx, key)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command: an HDEL that failed leaves rows, which HLEN counts
	for j, cmd := range lens {
		if cmd != nil {
			left[j] = feedLeft{n: cmd.Val(), err: cmd.Err()}
		}
	}
	for i, cmd := range s.runScriptsPipelined(ctx, feedSettleScript, legacy) {
		n, err := cmd.Int64()
		left[legacyAt[i]] = feedLeft{n: n, err: err}
	}
	return left
}

func fieldNames(fields []any) []string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i], _ = f.(string)
	}
	return names
}

// feedBatch is a torrent's batch from its waiting rows and its record's
// counters (id, seeders, leechers, snatches, last_action), and what
// settling it deletes.
func (s *Store) feedBatch(hash bittorrent.InfoHash, waiting []redis.KeyValue, counters []any) (FeedBatch, feedSettle) {
	batch := FeedBatch{InfoHash: hash, TorrentID: replyString(counters[0]), Seeders: replyInt(counters[1]),
		Leechers: replyInt(counters[2]), Snatches: replyInt(counters[3]), LastAction: replyInt(counters[4])}
	var settle feedSettle
	for _, kv := range waiting {
		row, legacy, ok := parseFeedRow(kv.Key, kv.Value)
		if !ok {
			// Only user_feed writes rows: one that does not parse is
			// never fed wrong; it stays, logged, for an operator.
			s.logger.Warn("swarm: a feed row does not parse; it stays unfed", "torrent", btstore.HexInfoHash(hash), "field", kv.Key)
			continue
		}
		batch.Rows = append(batch.Rows, row.FeedRow)
		batch.Announced = max(batch.Announced, row.announced)
		seq := strconv.FormatInt(row.Seq, 10)
		if legacy {
			settle.legacy = append(settle.legacy, kv.Key, seq)
		} else {
			settle.fields = append(settle.fields, kv.Key)
			settle.named = append(settle.named, kv.Key, seq)
		}
	}
	return batch, settle
}

// storedFeedRow is a row as user_feed stores it: the FeedRow and the
// announce that wrote it (ms).
type storedFeedRow struct {
	FeedRow
	announced int64
}

// parseFeedRow reads the row in field "<user>:<seq>" (or, written by an
// earlier build, "<user>"), "seq,uploaded,downloaded,up_credit,
// down_credit,seed_ms,leech_ms,snatched,last_announce"
// (btstore.FeedRowsKey). legacy: the field is the user id alone. A field's
// seq must be its row's.
func parseFeedRow(field, text string) (row storedFeedRow, legacy bool, ok bool) {
	var n [9]int64
	for i := range n {
		value, rest, found := strings.Cut(text, ",")
		if found == (i == len(n)-1) {
			return storedFeedRow{}, false, false // too few or too many fields
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v < 0 {
			return storedFeedRow{}, false, false
		}
		n[i], text = v, rest
	}
	user, seq, named := strings.Cut(field, ":")
	if named && seq != strconv.FormatInt(n[0], 10) {
		return storedFeedRow{}, false, false
	}
	return storedFeedRow{FeedRow: FeedRow{UserID: user, Seq: n[0], Uploaded: n[1], Downloaded: n[2], UpCredited: n[3],
		DownCredited: n[4], SeedMillis: n[5], LeechMillis: n[6], Snatched: n[7]}, announced: n[8]}, !named, true
}

// legacyFeedIndex indexes every torrent with feed rows an earlier build
// wrote that the index lacks (its mark was lost: a frontend killed before
// its flush), scanning every master; it returns how many it indexed.
func (s *Store) legacyFeedIndex(ctx context.Context) (int, error) {
	indexed := 0
	now := float64(s.nowMillis())
	err := s.scanKeys(ctx, btstore.FeedRowsPattern, func(keys []string) error {
		for _, key := range keys {
			hash, ok := btstore.HashFromKey(key)
			if !ok || key != btstore.FeedRowsKey(hash) {
				continue
			}
			// The keeper too (btstore.FeedIndexKeeper), first, in a
			// ZADD of its own: the answer counts torrents.
			index := btstore.FeedIndexKey(btstore.FeedShard(hash))
			pipe := s.rdb.Pipeline()
			pipe.ZAddNX(ctx, index, redis.Z{Score: btstore.FeedIndexKeeperScore, Member: btstore.FeedIndexKeeper})
			added := pipe.ZAddNX(ctx, index, redis.Z{Score: now, Member: btstore.HexInfoHash(hash)})
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			indexed += int(added.Val())
		}
		return nil
	})
	if err != nil {
		return indexed, fmt.Errorf("swarm.drainLegacyFeed: %w", err)
	}
	return indexed, nil
}

// feedLoop runs, on every frontend with a feed, a round every
// FeedInterval, or at once when the rows held reach half the buffer's cap.
// Before its first round it delivers what an earlier build left in Redis
// (drainLegacyFeed, retried every round until it succeeded) and what
// frontends killed before this start left (FeedDeadWriters); after every
// round, what frontends dead since left, and what this one dropped past
// its cap (feedDropped).
func (s *Store) feedLoop(ctx context.Context) {
	defer s.wg.Done()
	rounds := time.NewTicker(s.cfg.FeedInterval)
	defer rounds.Stop()
	legacyDone := s.feedLegacy(ctx)
	s.feedDeadWriters(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds.C:
		case <-s.feed.wake:
		}
		if !legacyDone {
			legacyDone = s.feedLegacy(ctx)
		}
		if err := s.feedRoundStamped(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("swarm: a feed round failed; its rows are held for the next", "error", err)
		}
		s.feedDropped(ctx)
		// A heartbeat gone since the last round: one read of the
		// registry per round, a scan only when one is gone.
		s.feedDeadWriters(ctx)
	}
}

// feedLegacy runs drainLegacyFeed for the feed loop, logging what it did;
// it tells whether the drain is done.
func (s *Store) feedLegacy(ctx context.Context) bool {
	n, err := s.drainLegacyFeed(ctx, s.cfg.OnFeed)
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("swarm: delivering the feed rows an earlier build left failed; the next round tries again", "error", err)
		}
		return false
	}
	if n > 0 {
		s.logger.Info("swarm: delivered the feed rows an earlier build left in Redis", "rows", n)
	}
	return true
}

// feedDeadWriters runs FeedDeadWriters for the feed loop, logging what it
// found.
func (s *Store) feedDeadWriters(ctx context.Context) {
	n, err := s.FeedDeadWriters(ctx, s.cfg.OnFeed)
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("swarm: delivering dead frontends' records failed; the next round tries again", "error", err)
	} else if n > 0 {
		s.logger.Info("swarm: delivered the records of frontends whose heartbeat expired", "rows", n)
	}
}

// feedDropped logs the rows dropped past the buffer's cap since it last
// did, and delivers the records this frontend stamped since the oldest it
// dropped (FeedOwnRecords); done, "fed up to" may pass them again.
func (s *Store) feedDropped(ctx context.Context) {
	if n, logged := s.counters.feedRowsDropped.Load(), s.counters.feedDropsLogged.Load(); n > logged {
		s.counters.feedDropsLogged.Store(n)
		s.logger.Warn("swarm: feed rows were dropped past the buffer's cap; this frontend's scan delivers their records",
			"rows", n-logged, "cap", s.cfg.FeedBufferRows)
	}
	from, gen := s.feed.droppedSince()
	if from == 0 {
		return
	}
	n, err := s.FeedOwnRecords(ctx, from, s.cfg.OnFeed)
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("swarm: delivering the records of dropped feed rows failed; the next round tries again", "error", err)
		}
		return
	}
	s.feed.recovered(gen)
	s.logger.Info("swarm: delivered the records of dropped feed rows", "rows", n)
}

// FeedOwnRecords delivers the rows of the records this frontend stamped
// with a last_announce at or after from (ms), as the backstop does for a
// dead frontend's (feedwriters.go), and returns how many it delivered.
func (s *Store) FeedOwnRecords(ctx context.Context, from int64, deliver func(context.Context, []FeedBatch) error) (int, error) {
	mine := map[string]int64{s.owner: from}
	delivered := 0
	err := s.scanKeys(ctx, btstore.UserTorrentPattern, func(keys []string) error {
		n, err := s.feedDeadWritersBatch(ctx, keys, mine, deliver)
		delivered += n
		return err
	})
	if err != nil {
		return delivered, fmt.Errorf("swarm.FeedOwnRecords: %w", err)
	}
	return delivered, nil
}

// feedRoundStamped is the feed loop's round, and records a complete one
// (roundDelivered: the frontend stops its heartbeat once it holds nothing
// more; frontends.go). Rows are held before their stamp is counted, so
// every change counted before the round began is in what it takes.
//
// A complete round that moved "fed up to" writes it to the registry at
// once (beat), not at the flush loop's next tick: until then the registry
// says this frontend is fed up to an older time, so if it were killed in
// between, another frontend's backstop would deliver again every record
// it stamped since, rows the site already has. It is also the frontend's
// last write once a burst of announces is delivered: written at the next
// tick, it came up to a flush interval after the feed was done (s50:
// hoard-bench announce-private's settling, 2.8 s with the feed against
// 1.7 s without, was mostly that wait and the feed's tick).
func (s *Store) feedRoundStamped(ctx context.Context) error {
	start := s.roundStarts()
	_, complete, err := s.feedRound(ctx, s.cfg.OnFeed)
	if complete && s.roundDelivered(start) {
		// The rows are delivered either way: a failed beat is retried by
		// the flush loop's next one ("fed up to" moved since the last).
		if beatErr := s.beat(ctx); beatErr != nil && ctx.Err() == nil {
			s.logger.Warn("swarm: writing the registry after a feed round failed; the flush loop's next beat writes it",
				"error", beatErr)
		}
	}
	return err
}

// stopFeed is Stop's last round: it delivers every row this frontend
// holds (the write-behind queue was written before, so its rows are
// held). It tells whether the frontend may leave the registry: only when
// everything it answered was delivered; otherwise its entry stays, its
// heartbeat expires, and another frontend's backstop delivers its
// records (FeedDeadWriters).
func (s *Store) stopFeed(ctx context.Context) bool {
	if !s.feedOn() {
		return true
	}
	n, complete, err := s.feedRound(ctx, s.cfg.OnFeed)
	if from, _ := s.feed.droppedSince(); complete && from == 0 {
		return true
	}
	s.logger.Warn("swarm: stopping with feed rows not delivered; another frontend's backstop delivers their records",
		"delivered", n, "held", s.feed.held(), "error", err)
	return false
}

// FeedKey is a row's key: the site keeps the newest seq per user and
// torrent and drops a key it has seen.
func FeedKey(userID string, hash bittorrent.InfoHash, seq int64) string {
	return userID + ":" + btstore.HexInfoHash(hash) + ":" + strconv.FormatInt(seq, 10)
}
