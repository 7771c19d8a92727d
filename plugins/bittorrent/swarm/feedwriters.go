package swarm

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The backstop over the writers' stamps, S5's step 2c-i (s43): when the
// feed's rows are held only in the memory of the frontend that answered,
// a frontend killed before its round leaves changes that only its stamped
// records show. FeedDeadWriters finds them: the records on every master
// stamped by a registered frontend whose heartbeat is gone
// (DeadFrontends), changed after its "fed up to", each delivered as its
// row at its current seq (cumulative: a copy of a row already delivered
// has the same key, and the site drops it). Then the frontend leaves the
// registry (ForgetFrontend), so one dead or idle frontend costs one scan.
// A row the dead frontend appended before it died comes again, with the
// same key: the outbox or the site drops it. The same batch code serves
// a live frontend's scan for the records of rows it dropped past its
// buffer's cap (FeedOwnRecords).

// deadWriterFields are the record fields FeedDeadWriters reads, in order.
var deadWriterFields = []string{"w", "last_announce", "seq", "uploaded", "downloaded", "up_extra", "down_extra",
	"seed_ms", "leech_ms", "snatched"}

// FeedDeadWriters delivers the rows of the records dead frontends changed
// after their "fed up to" and forgets those frontends; it returns how many
// rows it delivered. deliver is a feed round's: one call per scan batch
// with rows. A frontend is forgotten only when the whole scan and every
// delivery succeeded.
func (s *Store) FeedDeadWriters(ctx context.Context, deliver func(context.Context, []FeedBatch) error) (int, error) {
	dead, err := s.DeadFrontends(ctx)
	if err != nil || len(dead) == 0 {
		return 0, err
	}
	delivered := 0
	err = s.scanKeys(ctx, btstore.UserTorrentPattern, func(keys []string) error {
		n, err := s.feedDeadWritersBatch(ctx, keys, dead, deliver)
		delivered += n
		return err
	})
	if err != nil {
		return delivered, fmt.Errorf("swarm.FeedDeadWriters: %w", err)
	}
	var firstErr error
	for id, fed := range dead {
		if _, err := s.ForgetFrontend(ctx, id, fed); err != nil {
			firstErr = firstError(firstErr, err)
		}
	}
	return delivered, firstErr
}

// deadRecord is one scanned user-torrent record.
type deadRecord struct {
	hash   bittorrent.InfoHash
	user   string
	fields *redis.SliceCmd
}

// feedDeadWritersBatch reads one scan batch of records (one pipeline),
// and delivers the rows of those a dead frontend changed after its "fed
// up to", with their torrents' counters (a second pipeline).
func (s *Store) feedDeadWritersBatch(ctx context.Context, keys []string, dead map[string]int64,
	deliver func(context.Context, []FeedBatch) error) (int, error) {
	records := make([]deadRecord, 0, len(keys))
	pipe := s.rdb.Pipeline()
	for _, key := range keys {
		hash, ok := btstore.HashFromKey(key)
		if !ok {
			continue
		}
		prefix := btstore.UserTorrentKey(hash, "")
		if len(key) <= len(prefix) || key[:len(prefix)] != prefix || !validName(key[len(prefix):]) {
			continue
		}
		records = append(records, deadRecord{hash: hash, user: key[len(prefix):],
			fields: pipe.HMGet(ctx, key, deadWriterFields...)})
	}
	if len(records) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	byTorrent := make(map[bittorrent.InfoHash]*FeedBatch)
	var order []bittorrent.InfoHash
	for _, r := range records {
		v := r.fields.Val()
		fed, ok := dead[replyString(v[0])]
		if !ok {
			continue
		}
		announced, seq := replyInt(v[1]), replyInt(v[2])
		if announced < fed || seq == 0 {
			continue // delivered by its writer's rounds (a change at "fed up to" itself may not be), or never numbered
		}
		uploaded, downloaded := replyInt(v[3]), replyInt(v[4])
		row := FeedRow{UserID: r.user, Seq: seq, Uploaded: uploaded, Downloaded: downloaded,
			UpCredited: uploaded + replyInt(v[5]), DownCredited: downloaded + replyInt(v[6]),
			SeedMillis: replyInt(v[7]), LeechMillis: replyInt(v[8]), Snatched: replyInt(v[9])}
		b := byTorrent[r.hash]
		if b == nil {
			b = &FeedBatch{InfoHash: r.hash}
			byTorrent[r.hash] = b
			order = append(order, r.hash)
		}
		b.Rows = append(b.Rows, row)
		b.Announced = max(b.Announced, announced)
	}
	if len(order) == 0 {
		return 0, nil
	}
	counters := make([]*redis.SliceCmd, len(order))
	pipe = s.rdb.Pipeline()
	for i, hash := range order {
		counters[i] = pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "seeders", "leechers", "snatches", "last_action")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	batches := make([]FeedBatch, len(order))
	rows := 0
	for i, hash := range order {
		c := counters[i].Val()
		b := byTorrent[hash]
		b.TorrentID, b.Seeders, b.Leechers = replyString(c[0]), replyInt(c[1]), replyInt(c[2])
		b.Snatches, b.LastAction = replyInt(c[3]), replyInt(c[4])
		batches[i] = *b
		rows += len(b.Rows)
	}
	if err := deliver(ctx, batches); err != nil {
		return 0, fmt.Errorf("delivering %d rows of dead frontends: %w", rows, err)
	}
	return rows, nil
}

// deletedRecord is a record a delete script removed, with what it
// returned of it: w, last_announce, seq, uploaded, downloaded, up_extra,
// down_extra, seed_ms, leech_ms, snatched (user_purge_record.lua).
type deletedRecord struct {
	hash   bittorrent.InfoHash
	user   string
	fields []any
}

// feedDeleted delivers the rows of deleted records whose writer's "fed up
// to" is before their last change (a writer the registry does not list is
// fed up to nothing), the lead's decision 5: the writer may have died with
// the row only in its memory, and no backstop finds a deleted record. A
// live writer delivers its own row too; the copy has the same key. One
// read of the registry per call, one of the torrents' counters. A failed
// read or delivery holds the rows in this frontend's buffer for its next
// round (logged): the delete itself is done.
func (s *Store) feedDeleted(ctx context.Context, deleted []deletedRecord) {
	if len(deleted) == 0 || !s.feedOn() {
		return
	}
	fed, err := s.rdb.HGetAll(ctx, btstore.FrontendsKey).Result()
	byTorrent := make(map[bittorrent.InfoHash]*FeedBatch)
	var order []bittorrent.InfoHash
	for _, d := range deleted {
		writer, announced := replyString(d.fields[0]), replyInt(d.fields[1])
		if entry, ok := fed[writer]; ok && err == nil {
			if upTo, perr := strconv.ParseInt(entry, 10, 64); perr == nil && announced < upTo {
				continue // delivered by its writer's rounds
			}
		}
		v := d.fields[2:]
		uploaded, downloaded := replyInt(v[1]), replyInt(v[2])
		row := FeedRow{UserID: d.user, Seq: replyInt(v[0]), Uploaded: uploaded, Downloaded: downloaded,
			UpCredited: uploaded + replyInt(v[3]), DownCredited: downloaded + replyInt(v[4]),
			SeedMillis: replyInt(v[5]), LeechMillis: replyInt(v[6]), Snatched: replyInt(v[7])}
		b := byTorrent[d.hash]
		if b == nil {
			b = &FeedBatch{InfoHash: d.hash}
			byTorrent[d.hash] = b
			order = append(order, d.hash)
		}
		b.Rows = append(b.Rows, row)
		b.Announced = max(b.Announced, announced)
	}
	if len(order) == 0 {
		return
	}
	counters := make([]*redis.SliceCmd, len(order))
	pipe := s.rdb.Pipeline()
	for i, hash := range order {
		counters[i] = pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "seeders", "leechers", "snatches", "last_action")
	}
	_, cerr := pipe.Exec(ctx)
	batches := make([]FeedBatch, len(order))
	for i, hash := range order {
		b := byTorrent[hash]
		if c := counters[i].Val(); len(c) == 5 {
			b.TorrentID, b.Seeders, b.Leechers = replyString(c[0]), replyInt(c[1]), replyInt(c[2])
			b.Snatches, b.LastAction = replyInt(c[3]), replyInt(c[4])
		}
		batches[i] = *b
	}
	if cerr != nil && !errors.Is(cerr, redis.Nil) {
		err = firstError(err, cerr)
	} else if err == nil {
		err = s.cfg.OnFeed(ctx, batches)
	}
	if err == nil {
		return
	}
	s.logger.Warn("swarm: delivering deleted records' rows failed; they are held for the next round", "error", err)
	for _, b := range batches {
		t := seenTorrent{id: b.TorrentID, seeders: b.Seeders, leechers: b.Leechers, snatches: b.Snatches,
			lastAction: b.LastAction, at: b.Announced}
		for _, row := range b.Rows {
			s.holdRow(b.InfoHash, row.UserID, b.Announced, []any{row.Seq, row.Uploaded, row.Downloaded, row.UpCredited,
				row.DownCredited, row.SeedMillis, row.LeechMillis, row.Snatched}, t)
		}
	}
}
