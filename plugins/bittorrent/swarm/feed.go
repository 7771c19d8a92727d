package swarm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The feed to the site (docs/bittorrent-site.md, "The feed"). Each user's
// record on a torrent numbers every change of its fed figures (seq), and
// a record that changes while clean joins the torrent's dirty set, in the
// same script (prelude's user_feed); the frontend then indexes the
// torrent (btstore.FeedIndexKey) in its batched flush. A feed round reads
// the indexed torrents' dirty records, hands them to the deliverer (the
// plugin appends them to the outbox) and only then marks what it
// delivered fed (feed_settle.lua), unless the record moved on meanwhile.
//
// So every row is a record's cumulative figures at one seq: delivering a
// row twice (a crash between delivery and settling, two frontends in the
// same round) sends the same row with the same key, which the outbox and
// the site drop; no change is ever left out, because a record leaves the
// dirty set only when the seq delivered is its newest. A mark lost to a
// kill -9 before the flush leaves a dirty set that no index names: the
// backstop (FeedBackstop) scans for dirty sets and indexes them again.

// FeedRow is one user's cumulative figures on one torrent at Seq.
type FeedRow struct {
	UserID                   string
	Seq                      int64
	Uploaded, Downloaded     int64
	UpCredited, DownCredited int64
	SeedMillis, LeechMillis  int64
	Snatched                 int64 // ms of the user's snatch, 0 when none
}

// FeedBatch is one torrent's dirty records with its counters as read.
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
// feedRowsLimit the records it reads from one torrent, so a round is
// short; what is left waits for the next.
const (
	feedRoundLimit = 100
	feedRowsLimit  = 500
)

// FeedRound delivers the dirty records of up to feedRoundLimit indexed
// torrents per shard, one FeedBatch per torrent, and returns how many
// rows it delivered. A batch deliver refuses stays dirty and is offered
// again next round; the round goes on with the others and returns the
// first error.
func (s *Store) FeedRound(ctx context.Context, deliver func(context.Context, FeedBatch) error) (int, error) {
	rows := 0
	var firstErr error
	for shard := range btstore.FeedShards {
		index := btstore.FeedIndexKey(shard)
		entries, err := s.rdb.ZRangeWithScores(ctx, index, 0, feedRoundLimit-1).Result()
		if err != nil {
			return rows, fmt.Errorf("swarm.FeedRound: %w", err)
		}
		for _, entry := range entries {
			member, _ := entry.Member.(string)
			hash, ok := btstore.ParseHexInfoHash(member)
			if !ok {
				_ = s.rdb.ZRem(ctx, index, member).Err()
				continue
			}
			n, left, err := s.feedTorrent(ctx, hash, deliver)
			rows += n
			if err != nil {
				firstErr = firstError(firstErr, err)
				continue
			}
			if left == 0 {
				// Gone from the index only if no flush marked it since
				// the read; a mark after this is a new ZADD.
				if err := zremUnchangedScript.Run(ctx, s.rdb, []string{index}, member, entry.Score).Err(); err != nil {
					firstErr = firstError(firstErr, err)
				}
			}
		}
	}
	return rows, firstErr
}

// feedTorrent delivers one torrent's dirty records and settles them; it
// returns the rows delivered and how many users are still dirty.
func (s *Store) feedTorrent(ctx context.Context, hash bittorrent.InfoHash, deliver func(context.Context, FeedBatch) error) (int, int64, error) {
	users, err := s.rdb.SRandMemberN(ctx, btstore.FeedDirtyKey(hash), feedRowsLimit).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("swarm.FeedRound: %w", err)
	}
	if len(users) == 0 {
		return 0, 0, nil
	}
	pipe := s.rdb.Pipeline()
	torrent := pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "seeders", "leechers", "snatches", "last_action")
	records := make([]*redis.SliceCmd, len(users))
	for i, user := range users {
		records[i] = pipe.HMGet(ctx, btstore.UserTorrentKey(hash, user), "seq", "uploaded", "downloaded", "up_credit",
			"down_credit", "seed_ms", "leech_ms", "snatched", "last_announce")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("swarm.FeedRound: %w", err)
	}
	t := torrent.Val()
	batch := FeedBatch{InfoHash: hash, TorrentID: replyString(t[0]), Seeders: replyInt(t[1]), Leechers: replyInt(t[2]),
		Snatches: replyInt(t[3]), LastAction: replyInt(t[4])}
	seqs := make([]any, 0, 2*len(users))
	for i, user := range users {
		v := records[i].Val()
		seqs = append(seqs, replyString(v[0])) // nil (a record gone) settles as gone
		if v[0] == nil {
			continue
		}
		batch.Rows = append(batch.Rows, FeedRow{UserID: user, Seq: replyInt(v[0]), Uploaded: replyInt(v[1]),
			Downloaded: replyInt(v[2]), UpCredited: replyInt(v[3]), DownCredited: replyInt(v[4]),
			SeedMillis: replyInt(v[5]), LeechMillis: replyInt(v[6]), Snatched: replyInt(v[7])})
		batch.Announced = max(batch.Announced, replyInt(v[8]))
	}
	if len(batch.Rows) > 0 {
		if err := deliver(ctx, batch); err != nil {
			return 0, 0, fmt.Errorf("swarm.FeedRound: delivering %s: %w", btstore.HexInfoHash(hash), err)
		}
	}
	if s.feedHook != nil {
		s.feedHook(batch)
	}
	for _, user := range users {
		seqs = append(seqs, user)
	}
	left, err := s.runScriptInt(ctx, "swarm.FeedRound", feedSettleScript, btstore.FeedSettleKeys(hash, users), seqs...)
	if err != nil {
		return len(batch.Rows), 0, err
	}
	return len(batch.Rows), left, nil
}

// FeedBackstop indexes every torrent with a dirty set that the index
// lacks (its mark was lost: a frontend killed before its flush), scanning
// every master; it returns how many it indexed. It costs a scan of the
// keyspace, so it runs rarely (the plugin's feed backstop period).
func (s *Store) FeedBackstop(ctx context.Context) (int, error) {
	indexed := 0
	now := float64(s.nowMillis())
	err := s.scanKeys(ctx, btstore.FeedDirtyPattern, func(keys []string) error {
		for _, key := range keys {
			hash, ok := btstore.HashFromKey(key)
			if !ok || key != btstore.FeedDirtyKey(hash) {
				continue
			}
			n, err := s.rdb.ZAddNX(ctx, btstore.FeedIndexKey(btstore.FeedShard(hash)),
				redis.Z{Score: now, Member: btstore.HexInfoHash(hash)}).Result()
			if err != nil {
				return err
			}
			indexed += int(n)
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
// once deliver some rows twice, with the same keys.
func (s *Store) feedLoop(ctx context.Context) {
	defer s.wg.Done()
	rounds := time.NewTicker(s.cfg.FeedInterval)
	defer rounds.Stop()
	backstop := time.NewTicker(s.cfg.FeedBackstopInterval)
	defer backstop.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rounds.C:
			if _, err := s.FeedRound(ctx, s.cfg.OnFeed); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: a feed round failed; its rows stay dirty for the next", "error", err)
			}
		case <-backstop.C:
			if n, err := s.FeedBackstop(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: the feed's backstop failed", "error", err)
			} else if n > 0 {
				s.logger.Info("swarm: the feed's backstop indexed torrents whose mark was lost", "torrents", n)
			}
		}
	}
}

// FeedKey is a row's key: the site keeps the newest seq per user and
// torrent and drops a key it has seen.
func FeedKey(userID string, hash bittorrent.InfoHash, seq int64) string {
	return userID + ":" + btstore.HexInfoHash(hash) + ":" + strconv.FormatInt(seq, 10)
}
