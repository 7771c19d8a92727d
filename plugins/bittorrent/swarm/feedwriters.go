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
		hash, user, ok := btstore.ParseUserTorrentKey(key, validName)
		if !ok {
			continue
		}
		records = append(records, deadRecord{hash: hash, user: user, fields: pipe.HMGet(ctx, key, deadWriterFields...)})
	}
	if len(records) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var g feedGroup
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
		g.add(r.hash, announced, recordFeedRow(r.user, seq, v[3:10]))
	}
	if len(g.order) == 0 {
		return 0, nil
	}
	batches, err := g.batches(ctx, s.rdb)
	if err != nil {
		return 0, err
	}
	rows := 0
	for _, b := range batches {
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
	var g feedGroup
	for _, d := range deleted {
		writer, announced := replyString(d.fields[0]), replyInt(d.fields[1])
		if entry, ok := fed[writer]; ok && err == nil {
			if upTo, perr := strconv.ParseInt(entry, 10, 64); perr == nil && announced < upTo {
				continue // delivered by its writer's rounds
			}
		}
		g.add(d.hash, announced, recordFeedRow(d.user, replyInt(d.fields[2]), d.fields[3:10]))
	}
	if len(g.order) == 0 {
		return
	}
	batches, cerr := g.batches(ctx, s.rdb)
	if cerr != nil {
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
			s.holdRow(b.InfoHash, b.Announced, row, t)
		}
	}
}

// feedGroup gathers rows read back from records (a dead writer's, a
// deleted record's) into one FeedBatch per torrent, in the order the
// torrents first came.
type feedGroup struct {
	byTorrent map[bittorrent.InfoHash]*FeedBatch
	order     []bittorrent.InfoHash
}

func (g *feedGroup) add(hash bittorrent.InfoHash, announced int64, row FeedRow) {
	b := g.byTorrent[hash]
	if b == nil {
		if g.byTorrent == nil {
			g.byTorrent = make(map[bittorrent.InfoHash]*FeedBatch)
		}
		b = &FeedBatch{InfoHash: hash}
		g.byTorrent[hash] = b
		g.order = append(g.order, hash)
	}
	b.Rows = append(b.Rows, row)
	b.Announced = max(b.Announced, announced)
}

// batches reads the torrents' counters (one pipeline) into their batches.
// A batch whose counters could not be read has none; the error says so.
func (g *feedGroup) batches(ctx context.Context, rdb redis.UniversalClient) ([]FeedBatch, error) {
	counters := make([]*redis.SliceCmd, len(g.order))
	pipe := rdb.Pipeline()
	for i, hash := range g.order {
		counters[i] = pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "seeders", "leechers", "snatches", "last_action")
	}
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	batches := make([]FeedBatch, len(g.order))
	for i, hash := range g.order {
		b := g.byTorrent[hash]
		if c := counters[i].Val(); len(c) == 5 {
			b.TorrentID, b.Seeders, b.Leechers = replyString(c[0]), replyInt(c[1]), replyInt(c[2])
			b.Snatches, b.LastAction = replyInt(c[3]), replyInt(c[4])
		}
		batches[i] = *b
	}
	return batches, err
}

// recordFeedRow is a record's row from its stored figures, v: uploaded,
// downloaded, up_extra, down_extra, seed_ms, leech_ms, snatched (the
// credited figures stored as their difference from the raw ones).
func recordFeedRow(user string, seq int64, v []any) FeedRow {
	uploaded, downloaded := replyInt(v[0]), replyInt(v[1])
	return FeedRow{UserID: user, Seq: seq, Uploaded: uploaded, Downloaded: downloaded,
		UpCredited: uploaded + replyInt(v[2]), DownCredited: downloaded + replyInt(v[3]),
		SeedMillis: replyInt(v[4]), LeechMillis: replyInt(v[5]), Snatched: replyInt(v[6])}
}
