package orphans

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// dueShards lists the shards of a due set as a walk's sources.
func dueShards(context.Context) ([]source, error) {
	out := make([]source, btstore.OrphanDueShards)
	for i := range out {
		out[i] = source{name: strconv.Itoa(i), shard: i}
	}
	return out, nil
}

// readDue reads a page of a due set's shard: the entries older than the
// window. Entries looked at leave the set or move later, so a page starts
// at the first entry unless some were kept where they are: the cursor is
// 1 + the offset (a walk's cursor 0 is the end of a source).
func (c *Cleaner) readDue(ctx context.Context, set btstore.DueSet, src source, cursor uint64, report *Report) ([]btstore.DueEntry, error) {
	upTo := c.nowMillis() - c.windowMillis() - 1
	offset := int64(max(cursor, 1) - 1)
	entries, err := btstore.ReadDue(ctx, c.rdb, set, src.shard, upTo, offset, int64(c.cfg.Policy.ScanCount))
	report.Scanned += len(entries)
	report.Due += len(entries)
	return entries, err
}

// nextDue is the cursor after a page of n entries of which kept stayed
// in place: 0 (the shard's end) when the page was not full.
func (c *Cleaner) nextDue(cursor uint64, n, kept int) uint64 {
	if n < c.cfg.Policy.ScanCount {
		return 0
	}
	return max(cursor, 1) + uint64(kept)
}

// dueTorrentPage looks at a page of torrents recorded as possible
// orphans (unregistered, or their swarm emptied) a window ago. A live
// one (an id, or peers) leaves the set: the change that makes it
// unreferenced again records it again. One too recent moves to its
// newest stamp; an open-mode record whose retention TTL runs, to its
// expiry. The others go as in the torrents walk, by orphan_torrent.lua,
// which checks everything again in the torrent's slot: a stale entry
// deletes nothing live. Their registry entries and score index revisions
// are checked next, and their users' set entries recorded due.
//
// What this path leaves to its record's TTL or to the backstop walk:
// peer records (their retention TTL), the family keys of scoring and
// unique-IP metrics (source_seen, pending: TTLs; ipm counters: none, the
// backstop) and stray timeout keys.
func (c *Cleaner) dueTorrentPage(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error) {
	entries, err := c.readDue(ctx, btstore.DueTorrents, src, cursor, report)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	type torrent struct {
		entry  btstore.DueEntry
		fields *redis.SliceCmd
		peers  *redis.IntCmd
		ttl    *redis.DurationCmd
	}
	var looked []torrent
	var drop []btstore.DueEntry
	pipe := c.rdb.Pipeline()
	for _, e := range entries {
		hash, ok := btstore.ParseHexInfoHash(e.Member)
		if !ok {
			drop = append(drop, e) // written by hand: only dropped
			continue
		}
		looked = append(looked, torrent{entry: e,
			fields: pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "registered", "unregistered", "created", "last_action"),
			peers:  pipe.Exists(ctx, btstore.SeedersKey(hash), btstore.LeechersKey(hash)),
			ttl:    pipe.PTTL(ctx, btstore.TorrentKey(hash)),
		})
	}
	if len(looked) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
	}
	now := c.nowMillis()
	var later []btstore.DueEntry
	var candidates []btstore.DueEntry
	for _, t := range looked {
		v := t.fields.Val()
		ttl := t.ttl.Val() // negative: no TTL, or no record
		if v[0] != nil || t.peers.Val() > 0 {
			drop = append(drop, t.entry) // live
			continue
		}
		var newest int64
		present := false
		for _, f := range v[1:] {
			if text, ok := f.(string); ok {
				present = true
				n, _ := strconv.ParseInt(text, 10, 64)
				newest = max(newest, n)
			}
		}
		if present && !c.cfg.Store.Private {
			if c.cfg.Store.OpenTorrentRetention < 0 && ttl < 0 {
				drop = append(drop, t.entry) // kept for ever by the settings
				continue
			}
			if ttl > 0 { // its retention runs: look once it expired
				later = append(later, btstore.DueEntry{Member: t.entry.Member, At: now + ttl.Milliseconds() - c.windowMillis()})
				continue
			}
		}
		if present && !c.stale(now, newest) {
			later = append(later, btstore.DueEntry{Member: t.entry.Member, At: newest})
			continue
		}
		candidates = append(candidates, t.entry)
	}
	if err := btstore.RescheduleDue(ctx, c.rdb, btstore.DueTorrents, src.shard, later); err != nil {
		return 0, err
	}
	kept := 0
	if len(candidates) > 0 {
		calls := make([]evalCall, len(candidates))
		for i, e := range candidates {
			hash, _ := btstore.ParseHexInfoHash(e.Member)
			calls[i] = c.torrentCall(hash, nil, nil, false)
		}
		var gone []string
		for i, cmd := range c.runPipelined(ctx, torrentScript, calls) {
			wasGone, _, err := c.countTorrent(ctx, calls[i], cmd, report)
			if err != nil {
				return 0, err
			}
			if !wasGone {
				drop = append(drop, candidates[i]) // live again
				continue
			}
			hash, _ := btstore.ParseHexInfoHash(candidates[i].Member)
			finished, err := c.finishTorrent(ctx, hash, report)
			if err != nil {
				return 0, err
			}
			if !finished {
				kept++ // users left (a huge torrent) or live again: looked at again
				continue
			}
			drop = append(drop, candidates[i])
			gone = append(gone, candidates[i].Member)
		}
		if err := c.checkGoneIndexes(ctx, gone, report); err != nil {
			return 0, err
		}
	}
	if _, err := btstore.DropDue(ctx, c.rdb, btstore.DueTorrents, src.shard, drop); err != nil {
		return 0, err
	}
	return c.nextDue(cursor, len(entries), kept), nil
}

// checkGoneIndexes checks the registry entries and score index
// revisions of torrents just removed, as the registry and revisions
// walks would.
func (c *Cleaner) checkGoneIndexes(ctx context.Context, hexes []string, report *Report) error {
	if len(hexes) == 0 {
		return nil
	}
	pipe := c.rdb.Pipeline()
	ids := pipe.HMGet(ctx, btstore.RegistryKey, hexes...)
	revs := make([]*redis.StringCmd, len(hexes))
	for i, hexHash := range hexes {
		hash, _ := btstore.ParseHexInfoHash(hexHash)
		revs[i] = pipe.HGet(ctx, btstore.ScoreIndexRevsKey(btstore.ScoreShard(hash)), hexHash)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	var registry []string
	for i, id := range ids.Val() {
		if text, ok := id.(string); ok {
			registry = append(registry, hexes[i], text)
		}
	}
	if len(registry) > 0 {
		if err := c.checkRegistry(ctx, registry, report); err != nil {
			return err
		}
	}
	byShard := map[int][]string{}
	for i, hexHash := range hexes {
		if rev := revs[i].Val(); rev != "" {
			hash, _ := btstore.ParseHexInfoHash(hexHash)
			shard := btstore.ScoreShard(hash)
			byShard[shard] = append(byShard[shard], hexHash, rev)
		}
	}
	for shard, pairs := range byShard {
		if err := c.checkRevs(ctx, shard, pairs, report); err != nil {
			return err
		}
	}
	return nil
}

// dueUserPage looks at a page of users whose records on torrents went:
// each user's set entries whose record is gone and whose version is
// older than the window go (orphan_user.lua compares each version
// again), and the user leaves the set.
func (c *Cleaner) dueUserPage(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error) {
	entries, err := c.readDue(ctx, btstore.DueUsers, src, cursor, report)
	if err != nil || len(entries) == 0 {
		return 0, err
	}
	now := c.nowMillis()
	for _, e := range entries {
		if err := c.cleanUser(ctx, e.Member, now, report); err != nil {
			return 0, err
		}
	}
	if _, err := btstore.DropDue(ctx, c.rdb, btstore.DueUsers, src.shard, entries); err != nil {
		return 0, err
	}
	return c.nextDue(cursor, len(entries), 0), nil
}
