package swarm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The feed to the site (docs/bittorrent-site.md, "The feed"). Each user's
// record on a torrent numbers every change of its fed figures (seq), and
// the same script puts the record's row at that seq in the torrent's
// feed rows (btstore.FeedRowsKey; prelude's user_feed), replacing the
// user's row not yet fed. A row new there is a mark: the frontend then
// indexes the torrent (btstore.FeedIndexKey) in its batched flush. A feed
// round reads the indexed torrents' rows (never the records), hands them
// to the deliverer (the plugin appends them to the outbox) and only then
// deletes what it delivered. A row's field names its user and seq, so
// that delete is a plain HDEL per torrent (no script): a row that moved
// on meanwhile is another field, which stays for the next round.
//
// So every row is a record's cumulative figures at one seq: delivering a
// row twice (a crash between delivery and settling, two frontends in the
// same round) sends the same row with the same key, which the outbox and
// the site drop; no change is ever left out, because a row goes only when
// the seq delivered is its newest. A mark lost to a kill -9 before the
// flush leaves rows that no index names: the backstop (FeedBackstop)
// scans for rows and indexes their torrents again.

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

// feedRoundLimit bounds the torrents one round takes from each shard, and
// feedRowsLimit the rows it reads from one torrent, so a round is
// short; what is left waits for the next.
const (
	feedRoundLimit = 100
	feedRowsLimit  = 500
)

// FeedRound delivers the waiting rows of up to feedRoundLimit indexed
// torrents per shard, one FeedBatch per torrent and one deliver call per
// shard, and returns how many rows it delivered. The batches of a call
// deliver refuses stay waiting and are offered again next round; the
// round goes on with the other shards and returns the first error.
func (s *Store) FeedRound(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, error) {
	rows, _, err := s.feedRound(ctx, deliver)
	return rows, err
}

// feedRound is FeedRound, and tells whether the round was complete: it
// took every torrent indexed and every row of each (no limit reached) and
// met no error, so every row indexed before it began was delivered.
func (s *Store) feedRound(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, bool, error) {
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
		return 0, false, fmt.Errorf("swarm.FeedRound: %w", err)
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

// FeedBackstop indexes every torrent with feed rows that the index lacks
// (its mark was lost: a frontend killed before its flush), scanning
// every master; it returns how many it indexed. It costs a scan of the
// keyspace, so it runs rarely (the plugin's feed backstop period).
func (s *Store) FeedBackstop(ctx context.Context) (int, error) {
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
		return indexed, fmt.Errorf("swarm.FeedBackstop: %w", err)
	}
	return indexed, nil
}

// feedLoop runs a feed round every FeedInterval and the backstop every
// FeedBackstopInterval, on every frontend: rounds on two frontends at
// once deliver some rows twice, with the same keys. At start and after
// every round it delivers what dead frontends left (FeedDeadWriters).
func (s *Store) feedLoop(ctx context.Context) {
	defer s.wg.Done()
	rounds := time.NewTicker(s.cfg.FeedInterval)
	defer rounds.Stop()
	backstop := time.NewTicker(s.cfg.FeedBackstopInterval)
	defer backstop.Stop()
	s.feedDeadWriters(ctx) // what frontends killed before this start left
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds.C:
			if err := s.feedRoundStamped(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: a feed round failed; its rows wait for the next", "error", err)
			}
			// A heartbeat gone since the last round: one read of the
			// registry per round, a scan only when one is gone.
			s.feedDeadWriters(ctx)
		case <-backstop.C:
			if n, err := s.FeedBackstop(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: the feed's backstop failed", "error", err)
			} else if n > 0 {
				s.logger.Info("swarm: the feed's backstop indexed torrents whose mark was lost", "torrents", n)
			}
		}
	}
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

// feedRoundStamped is the feed loop's round: it flushes the batch first
// (the marks of every change this frontend answered so far), so a
// complete round delivers every change the frontend stamped before it
// began, and then records that (roundDelivered: the frontend stops its
// heartbeat once it holds nothing more; frontends.go).
func (s *Store) feedRoundStamped(ctx context.Context) error {
	start := s.roundStarts()
	if err := s.flushBatch(ctx); err != nil {
		return err
	}
	_, complete, err := s.feedRound(ctx, s.cfg.OnFeed)
	if complete {
		s.roundDelivered(start)
	}
	return err
}

// FeedKey is a row's key: the site keeps the newest seq per user and
// torrent and drops a key it has seen.
func FeedKey(userID string, hash bittorrent.InfoHash, seq int64) string {
	return userID + ":" + btstore.HexInfoHash(hash) + ":" + strconv.FormatInt(seq, 10)
}
