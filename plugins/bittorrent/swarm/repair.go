package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"

	"github.com/hoardproject/hoard/internal/lease"
)

// repairBatch is how many keys one SCAN step returns and one repair
// pipeline handles.
const repairBatch = 500

// RepairReport says what a Repair found and changed.
type RepairReport struct {
	Torrents      int   // torrent records scanned
	Seeders       int64 // global seeder count recomputed from them
	Leechers      int64 // global leecher count recomputed from them
	Snatches      int64 // global snatch count recomputed from them
	IndexFixed    int   // index scores rewritten
	IndexRemoved  int   // index entries of torrents that are gone (or unregistered, in private mode)
	SwarmsIndexed int   // swarms with peers that were missing from the due index
	UserStates    int   // user states resent to the users' sets
}

// Repair recomputes what the batched flush maintains from the per-torrent
// truth, for when a frontend died with an unflushed batch: the global
// seeder, leecher and snatch counts, the three indexes, the due index
// (swarms with peers missing from it), and every user's sets. It walks
// the keyspace with SCAN on each master, so it never blocks Redis, but it
// reads every torrent: run it rarely (Config.RepairInterval).
//
// It is exact on a quiet tracker. Under traffic the global counts it
// writes can be off by the changes made while it ran, not yet flushed by
// some frontend, and the next repair corrects that; index scores are
// rewritten per batch, so their window is one pipeline.
func (s *Store) Repair(ctx context.Context) (RepairReport, error) {
	var report RepairReport
	// Our own batch holds deltas the truth already includes: flush it
	// first so they are not added on top of the recomputed totals.
	if err := s.Flush(ctx); err != nil {
		return report, err
	}
	err := s.scanKeys(ctx, btstore.TorrentRecordPattern, func(keys []string) error {
		return s.repairTorrents(ctx, keys, &report)
	})
	if err != nil {
		return report, fmt.Errorf("swarm.Repair: torrents: %w", err)
	}
	if err := s.rdb.HSet(ctx, btstore.StatsKey, statNames[statSeeders], report.Seeders,
		statNames[statLeechers], report.Leechers, statNames[statSnatches], report.Snatches).Err(); err != nil {
		return report, fmt.Errorf("swarm.Repair: stats: %w", err)
	}
	for _, index := range []btstore.Index{btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches} {
		if err := s.pruneIndex(ctx, index, &report); err != nil {
			return report, fmt.Errorf("swarm.Repair: index %s: %w", index, err)
		}
	}
	if s.cfg.Private {
		err = s.scanKeys(ctx, btstore.UserTorrentPattern, func(keys []string) error {
			return s.repairUserStates(ctx, keys, &report)
		})
		if err != nil {
			return report, fmt.Errorf("swarm.Repair: user states: %w", err)
		}
	}
	return report, nil
}

// repairTorrents handles one batch of torrent record keys.
func (s *Store) repairTorrents(ctx context.Context, keys []string, report *RepairReport) error {
	type torrent struct {
		hash   bittorrent.InfoHash
		hex    string
		fields *redis.SliceCmd
		first  *redis.ZSliceCmd
	}
	torrents := make([]torrent, 0, len(keys))
	members := make([]string, 0, len(keys))
	pipe := s.rdb.Pipeline()
	for _, key := range keys {
		hash, ok := btstore.HashFromKey(key)
		if !ok || key != btstore.TorrentKey(hash) {
			continue
		}
		t := torrent{hash: hash, hex: btstore.HexInfoHash(hash)}
		t.fields = pipe.HMGet(ctx, key, "seeders", "leechers", "snatches", "id")
		t.first = pipe.ZRangeWithScores(ctx, btstore.DeadlinesKey(hash), 0, 0)
		torrents = append(torrents, t)
		members = append(members, t.hex)
	}
	if len(torrents) == 0 {
		return nil
	}
	indexes := []btstore.Index{btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches}
	scores := make([]*redis.FloatSliceCmd, len(indexes))
	for i, index := range indexes {
		scores[i] = pipe.ZMScore(ctx, btstore.IndexKey(index), members...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}

	fix := s.rdb.Pipeline()
	fixes := 0
	var dueAdds []*redis.IntCmd
	for i, t := range torrents {
		v := t.fields.Val()
		if len(v) < 4 {
			continue
		}
		report.Torrents++
		counts := [3]int64{replyInt(v[0]), replyInt(v[1]), replyInt(v[2])}
		report.Seeders += counts[0]
		report.Leechers += counts[1]
		report.Snatches += counts[2]
		if listed := !s.cfg.Private || v[3] != nil; listed {
			for j, index := range indexes {
				// ZMSCORE gives 0 for a missing member: a torrent whose
				// count is 0 need not be added.
				if have := scores[j].Val(); i < len(have) && int64(have[i]) != counts[j] {
					fix.ZAdd(ctx, btstore.IndexKey(index), redis.Z{Score: float64(counts[j]), Member: t.hex})
					fixes++
				}
			}
		}
		if first := t.first.Val(); counts[0]+counts[1] > 0 && len(first) == 1 {
			// LT adds a missing entry, lowers a too-late one, and leaves
			// a correct one alone; its reply counts only additions.
			dueAdds = append(dueAdds, fix.ZAddLT(ctx, btstore.DueKey(btstore.DueShard(t.hash)),
				redis.Z{Score: first[0].Score, Member: t.hex}))
		}
	}
	if fixes+len(dueAdds) == 0 {
		return nil
	}
	if _, err := fix.Exec(ctx); err != nil {
		return err
	}
	report.IndexFixed += fixes
	for _, cmd := range dueAdds {
		report.SwarmsIndexed += int(cmd.Val())
	}
	return nil
}

// pruneIndex removes index entries whose torrent record is gone (open
// torrents expire), or, in private mode, is no longer registered. The
// removal is compare-and-remove (zrem_unchanged.lua): a torrent registered
// and announced after the read has a flushed count in its entry, a
// different score, and keeps it.
func (s *Store) pruneIndex(ctx context.Context, index btstore.Index, report *RepairReport) error {
	key := btstore.IndexKey(index)
	var cursor uint64
	for {
		page, next, err := s.rdb.ZScan(ctx, key, cursor, "", repairBatch).Result()
		if err != nil {
			return err
		}
		var members, scores []string
		var checks []*redis.BoolCmd
		pipe := s.rdb.Pipeline()
		for i := 0; i+1 < len(page); i += 2 {
			members = append(members, page[i])
			scores = append(scores, page[i+1])
			hash, ok := btstore.ParseHexInfoHash(page[i])
			if !ok {
				checks = append(checks, nil)
				continue
			}
			if s.cfg.Private {
				checks = append(checks, pipe.HExists(ctx, btstore.TorrentKey(hash), "id"))
			} else {
				checks = append(checks, existsCmd(ctx, pipe, btstore.TorrentKey(hash)))
			}
		}
		if len(members) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				return err
			}
			var gone []any
			for i, check := range checks {
				if check == nil || !check.Val() {
					gone = append(gone, members[i], scores[i])
				}
			}
			if len(gone) > 0 {
				if s.pruneHook != nil {
					s.pruneHook()
				}
				n, err := zremUnchangedScript.Run(ctx, s.rdb, []string{key}, gone...).Int()
				if err != nil {
					return fmt.Errorf("swarm: pruning %s: %w", key, err)
				}
				report.IndexRemoved += n
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// existsCmd queues EXISTS as a boolean.
func existsCmd(ctx context.Context, pipe redis.Pipeliner, key string) *redis.BoolCmd {
	cmd := redis.NewBoolCmd(ctx, "exists", key)
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// repairUserStates resends the state of one batch of user-torrent records
// to the users' sets; user_sets.lua applies a version it already has
// again, so sets that lost a flush are corrected and others unchanged.
func (s *Store) repairUserStates(ctx context.Context, keys []string, report *RepairReport) error {
	type record struct {
		user   string
		hash   bittorrent.InfoHash
		state  *redis.SliceCmd
		torrID *redis.StringCmd
	}
	records := make([]record, 0, len(keys))
	pipe := s.rdb.Pipeline()
	for _, key := range keys {
		hash, userID, ok := btstore.ParseUserTorrentKey(key, validName)
		if !ok {
			continue
		}
		records = append(records, record{
			user:   userID,
			hash:   hash,
			state:  pipe.HMGet(ctx, key, "bits", "ver"),
			torrID: pipe.HGet(ctx, btstore.TorrentKey(hash), "id"),
		})
	}
	if len(records) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return err
	}
	calls := make([]scriptCall, 0, len(records))
	for _, r := range records {
		v := r.state.Val()
		if len(v) < 2 || v[0] == nil || r.torrID.Val() == "" {
			continue
		}
		calls = append(calls, userSetsCall(userUpdate{
			key:     userTorrent{user: r.user, torrent: r.torrID.Val()},
			hash:    r.hash,
			bits:    replyInt(v[0]),
			version: replyInt(v[1]),
		}))
	}
	for _, cmd := range s.runScriptsPipelined(ctx, userSetsScript, calls) {
		if err := cmd.Err(); err != nil {
			return err
		}
		report.UserStates++
	}
	return nil
}

// scanKeys calls fn with each page of keys matching pattern, on every
// master of a cluster in turn, or on the one server.
func (s *Store) scanKeys(ctx context.Context, pattern string, fn func(keys []string) error) error {
	var nodes []redis.Cmdable
	if cluster, ok := s.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cluster.ForEachMaster(ctx, func(_ context.Context, master *redis.Client) error {
			mu.Lock()
			nodes = append(nodes, master)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return err
		}
	} else {
		nodes = []redis.Cmdable{s.rdb}
	}
	for _, node := range nodes {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, repairBatch).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				if err := fn(keys); err != nil {
					return err
				}
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return nil
}

// repairLoop runs Repair every RepairInterval on one frontend at a time.
func (s *Store) repairLoop(ctx context.Context) {
	defer s.wg.Done()
	ticker := time.NewTicker(s.cfg.RepairInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		ok, err := lease.Take(ctx, s.rdb, btstore.RepairLeaseKey, s.owner, s.cfg.RepairInterval*9/10)
		if err != nil || !ok {
			continue
		}
		report, err := s.Repair(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("swarm: repair failed", "error", err)
			}
			continue
		}
		s.logger.Info("swarm: repair done", "torrents", report.Torrents, "index_fixed", report.IndexFixed,
			"index_removed", report.IndexRemoved, "swarms_indexed", report.SwarmsIndexed, "user_states", report.UserStates)
	}
}
