package btstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Orphan cleanup's due sets: what may have become unreferenced is
// recorded when it happens, scored by when cleanup should look at it, so
// cleanup reads the entries whose time has come instead of walking the
// keyspace (docs/bittorrent-orphans.md). An entry is scored by its
// timestamp of interest (ms): cleanup looks at it once that is older than
// the protection window.
//
// An entry is a hint, never the truth: cleanup looks at the record again
// in one script in the record's own slot (orphan_torrent.lua,
// orphan_user.lua), so a stale entry deletes nothing live, and a lost one
// (a process killed between its change and the entry) is found by the
// slow backstop walk. That is why the entries are written by Go beside
// the change rather than inside its script: a script touches one slot,
// and the sets are sharded over OrphanDueShards slots of their own, so a
// cluster spreads their writes and no master holds them all.

// DueSet is one of cleanup's due sets.
type DueSet int

// The due sets.
const (
	DueTorrents DueSet = iota // torrents that may be gone: unregistered, or their swarm emptied
	DueUsers                  // users whose set entries may name a record that went
)

// Key is the set's shard.
func (d DueSet) Key(shard int) string {
	if d == DueUsers {
		return OrphanUserDueKey(shard)
	}
	return OrphanDueKey(shard)
}

// DueEntry is one entry: a hex info-hash or a user id, and its
// timestamp of interest (ms).
type DueEntry struct {
	Member string
	At     int64
}

// MarkTorrentDue records that a torrent may become an orphan, its
// timestamp of interest at (ms). An earlier entry stays earlier (ZADD
// LT): looking early costs one read, and cleanup moves the entry on when
// the torrent is too recent.
func MarkTorrentDue(ctx context.Context, rdb redis.Cmdable, hash bittorrent.InfoHash, at int64) error {
	err := rdb.ZAddLT(ctx, OrphanDueKey(OrphanDueShard(hash)), redis.Z{Score: float64(at), Member: HexInfoHash(hash)}).Err()
	if err != nil {
		return fmt.Errorf("btstore.MarkTorrentDue: %w", err)
	}
	return nil
}

// MarkUserDue records that a user's set entries may name records that
// went, its timestamp of interest at (ms); an earlier entry stays
// earlier.
func MarkUserDue(ctx context.Context, rdb redis.Cmdable, userID string, at int64) error {
	err := rdb.ZAddLT(ctx, OrphanUserDueKey(OrphanUserDueShard(userID)), redis.Z{Score: float64(at), Member: userID}).Err()
	if err != nil {
		return fmt.Errorf("btstore.MarkUserDue: %w", err)
	}
	return nil
}

// ReadDue returns up to count entries of a shard whose timestamp of
// interest is at or before upTo (ms), earliest first, from offset.
func ReadDue(ctx context.Context, rdb redis.UniversalClient, set DueSet, shard int, upTo, offset, count int64) ([]DueEntry, error) {
	zs, err := rdb.ZRangeByScoreWithScores(ctx, set.Key(shard), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(upTo, 10), Offset: offset, Count: count,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("btstore.ReadDue: %w", err)
	}
	out := make([]DueEntry, 0, len(zs))
	for _, z := range zs {
		member, _ := z.Member.(string)
		out = append(out, DueEntry{Member: member, At: int64(z.Score)})
	}
	return out, nil
}

// RescheduleDue moves entries of a shard later, each only if it is still
// there and not already later (ZADD XX GT): an entry a change wrote since
// the read is earlier and is looked at then.
func RescheduleDue(ctx context.Context, rdb redis.UniversalClient, set DueSet, shard int, entries []DueEntry) error {
	if len(entries) == 0 {
		return nil
	}
	zs := make([]redis.Z, len(entries))
	for i, e := range entries {
		zs[i] = redis.Z{Score: float64(e.At), Member: e.Member}
	}
	if err := rdb.ZAddArgs(ctx, set.Key(shard), redis.ZAddArgs{XX: true, GT: true, Members: zs}).Err(); err != nil {
		return fmt.Errorf("btstore.RescheduleDue: %w", err)
	}
	return nil
}

var dueDropScript = Script("zrem_unchanged.lua")

// DropDue removes entries of a shard, each only if its time is still the
// one read (zrem_unchanged.lua): a change since the read wrote an earlier
// time, and the entry stays for it. It returns how many went.
func DropDue(ctx context.Context, rdb redis.UniversalClient, set DueSet, shard int, entries []DueEntry) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2*len(entries))
	for _, e := range entries {
		args = append(args, e.Member, strconv.FormatInt(e.At, 10))
	}
	n, err := luascript.Run(ctx, rdb, dueDropScript, []string{set.Key(shard)}, args...)
	if err != nil {
		return 0, fmt.Errorf("btstore.DropDue: %w", err)
	}
	count, _ := n.(int64)
	return int(count), nil
}
