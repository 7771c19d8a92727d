package orphans

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// maxFinishRounds bounds the script calls that delete one gone torrent's
// user records in chunks (finishChunk users each) in one page; what is
// left waits for the next pass, and the torrent record stays until then.
const (
	maxFinishRounds = 20
	finishChunk     = 500
)

// torrentPage reads one SCAN page of torrent keys and runs
// orphan_torrent.lua once per torrent in it, with the page's keys of that
// torrent. A torrent whose record (or users set) is in the page is
// finished: its remaining user records are read from its users set and
// deleted in chunks, and the record itself goes with the last chunk.
func (c *Cleaner) torrentPage(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error) {
	keys, next, err := src.node.Scan(ctx, cursor, btstore.TorrentKeyPattern, int64(c.cfg.Policy.ScanCount)).Result()
	if err != nil {
		return 0, err
	}
	report.Scanned += len(keys)
	type group struct {
		hash       bittorrent.InfoHash
		keys       []string
		kinds      []any
		users      []string // user records of the page: deleted by the finishing call when finish
		later      []string // the reaper's snatchers and claims: likewise
		laterKinds []any
		finish     bool
	}
	var order []*group
	groups := map[bittorrent.InfoHash]*group{}
	for _, key := range keys {
		hash, kind, ok := btstore.ParseTorrentKey(key)
		if !ok {
			continue
		}
		switch kind {
		case btstore.KindSeeders, btstore.KindLeechers, btstore.KindDeadlines, btstore.KindOwners:
			continue // the swarm's: expiry removes them with the last peer
		}
		g := groups[hash]
		if g == nil {
			g = &group{hash: hash}
			groups[hash] = g
			order = append(order, g)
		}
		switch kind {
		case btstore.KindTorrent, btstore.KindUsers:
			g.finish = true
		case btstore.KindUser:
			g.users = append(g.users, key)
		case btstore.KindScore, btstore.KindScoreHistory, btstore.KindScoreTrackers, btstore.KindScoreTrackersAt:
			// fixed KEYS of every call: the group is all it needs, so a
			// torrent of which only scoring's keys are left is looked at
		case btstore.KindSnatchers, btstore.KindClaims, btstore.KindFeedRows:
			// the finishing call deletes these by name
			g.later = append(g.later, key)
			g.laterKinds = append(g.laterKinds, string(kind))
		default:
			g.keys = append(g.keys, key)
			g.kinds = append(g.kinds, string(kind))
		}
	}
	// A cheap read first: a registered torrent, or one with peers, is
	// live, and most are; the script (which checks again) runs only for
	// the others.
	if len(order) == 0 {
		return next, nil
	}
	pipe := c.rdb.Pipeline()
	ids := make([]*redis.StringCmd, len(order))
	peers := make([]*redis.IntCmd, len(order))
	for i, g := range order {
		ids[i] = pipe.HGet(ctx, btstore.TorrentKey(g.hash), "id")
		peers[i] = pipe.Exists(ctx, btstore.SeedersKey(g.hash), btstore.LeechersKey(g.hash))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	candidates := order[:0]
	for i, g := range order {
		if ids[i].Val() == "" && peers[i].Val() == 0 {
			candidates = append(candidates, g)
		}
	}
	order = candidates

	// Then each candidate with its other keys, in one pipeline; the
	// page's user records ride along only where the torrent record is
	// already gone (the script defers them otherwise).
	calls := make([]evalCall, len(order))
	for i, g := range order {
		keys, kinds := g.keys, g.kinds
		if !g.finish {
			for _, key := range g.users {
				keys, kinds = append(keys, key), append(kinds, string(btstore.KindUser))
			}
			keys, kinds = append(keys, g.later...), append(kinds, g.laterKinds...)
		}
		calls[i] = c.torrentCall(g.hash, keys, kinds, false)
	}
	var unfinished []*group
	for i, cmd := range c.runPipelined(ctx, torrentScript, calls) {
		gone, _, err := c.countTorrent(ctx, calls[i], cmd, report)
		if err != nil {
			return 0, err
		}
		if gone && order[i].finish {
			unfinished = append(unfinished, order[i])
		}
	}
	if len(unfinished) == 0 {
		return next, nil
	}
	// Then the gone torrents of the page with their users, in two more
	// pipelines; a torrent with more users than one chunk goes on alone.
	pipe = c.rdb.Pipeline()
	members := make([]*redis.ScanCmd, len(unfinished))
	for i, g := range unfinished {
		members[i] = pipe.SScan(ctx, btstore.TorrentUsersKey(g.hash), 0, "", finishChunk)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	calls = calls[:0]
	var went []string
	for i, g := range unfinished {
		users, _ := members[i].Val()
		calls = append(calls, c.finishCall(g.hash, users, g.users))
		went = append(went, users...)
	}
	if err := c.markUsersDue(ctx, went); err != nil {
		return 0, err
	}
	for i, cmd := range c.runPipelined(ctx, torrentScript, calls) {
		gone, left, err := c.countTorrent(ctx, calls[i], cmd, report)
		if err != nil {
			return 0, err
		}
		if gone && left > 0 {
			if _, err := c.finishTorrent(ctx, unfinished[i].hash, report); err != nil {
				return 0, err
			}
		}
	}
	return next, nil
}

// markUsersDue records users whose records on a torrent are being
// deleted, so cleanup looks at their set entries at once (the records
// went because they were older than the window, and so are their
// entries' versions); written before the delete, so a kill -9 between
// leaves the hint, not the entries alone.
func (c *Cleaner) markUsersDue(ctx context.Context, users []string) error {
	if len(users) == 0 {
		return nil
	}
	at := c.nowMillis() - c.windowMillis() - 1
	pipe := c.rdb.Pipeline()
	for _, user := range users {
		if err := btstore.MarkUserDue(ctx, pipe, user, at); err != nil {
			return err
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// finishCall is the finishing orphan_torrent.lua call for a torrent with
// the user records of users (from its users set) and extra (found in a
// page).
func (c *Cleaner) finishCall(hash bittorrent.InfoHash, users, extra []string) evalCall {
	keys := make([]string, 0, len(users)+len(extra))
	kinds := make([]any, 0, len(users)+len(extra))
	seen := map[string]bool{}
	for _, user := range users {
		key := btstore.UserTorrentKey(hash, user)
		keys, kinds, seen[key] = append(keys, key), append(kinds, string(btstore.KindUser)), true
	}
	for _, key := range extra {
		if !seen[key] {
			keys, kinds = append(keys, key), append(kinds, string(btstore.KindUser))
		}
	}
	// the feed's rows of the records that go (no walk need find them)
	keys, kinds = append(keys, btstore.FeedRowsKey(hash)), append(kinds, string(btstore.KindFeedRows))
	return c.torrentCall(hash, keys, kinds, true)
}

// finishTorrent goes on deleting a gone torrent's user records listed in
// its users set, a chunk per script call, and its record with the last
// chunk. Between chunks the record (without an id) stays, so announces
// are refused; registered again meanwhile, the torrent keeps the records
// not deleted yet (each deleted one was an orphan when it went). finished
// says the torrent is gone with every user record.
func (c *Cleaner) finishTorrent(ctx context.Context, hash bittorrent.InfoHash, report *Report) (finished bool, err error) {
	prevLeft := int64(-1)
	for range maxFinishRounds {
		users, _, err := c.rdb.SScan(ctx, btstore.TorrentUsersKey(hash), 0, "", finishChunk).Result()
		if err != nil {
			return false, err
		}
		if err := c.markUsersDue(ctx, users); err != nil {
			return false, err
		}
		call := c.finishCall(hash, users, nil)
		gone, left, err := c.countTorrent(ctx, call, torrentScript.Run(ctx, c.rdb, call.keys, call.args...), report)
		if err != nil || !gone || left == 0 || (prevLeft >= 0 && left >= prevLeft) {
			// done, live again, or stuck on a fresh record: the next pass looks again
			return err == nil && gone && left == 0, err
		}
		prevLeft = left
	}
	return false, nil
}

func (c *Cleaner) torrentCall(hash bittorrent.InfoHash, extra []string, kinds []any, finish bool) evalCall {
	keys := append(btstore.OrphanTorrentFixedKeys(hash), extra...)
	private, keepOpen, fin := "0", "0", "0"
	if c.cfg.Store.Private {
		private = "1"
	}
	if c.cfg.Store.OpenTorrentRetention < 0 {
		keepOpen = "1"
	}
	if finish {
		fin = "1"
	}
	args := append([]any{c.nowMillis(), c.windowMillis(), private, keepOpen, fin}, kinds...)
	return evalCall{keys: keys, args: args, torrent: hash}
}

// countTorrent adds one orphan_torrent.lua reply to the report, and hands
// the user records the call deleted with a numbered change to
// Config.FeedDeleted before it says the torrent is gone (decision 5): a
// writer killed with such a record's row only in its memory would lose it,
// and no backstop finds a deleted record.
func (c *Cleaner) countTorrent(ctx context.Context, call evalCall, cmd *redis.Cmd, report *Report) (gone bool, left int64, err error) {
	reply, err := cmd.Slice()
	if err != nil {
		return false, 0, err
	}
	if len(reply) < 10 || len(reply)%2 != 0 {
		return false, 0, errors.New("orphan_torrent.lua: malformed reply")
	}
	counts := make([]int64, 10)
	for i := range counts {
		n, ok := reply[i].(int64)
		if !ok {
			return false, 0, errors.New("orphan_torrent.lua: malformed reply")
		}
		counts[i] = n
	}
	var deleted []btstore.DeletedUserRecord
	for i := 10; i+1 < len(reply); i += 2 {
		index, _ := reply[i].(int64)
		fields, ok := reply[i+1].([]any)
		if index < 1 || int(index) > len(call.keys) || !ok || len(fields) != 10 {
			return false, 0, errors.New("orphan_torrent.lua: malformed deleted record")
		}
		deleted = append(deleted, btstore.DeletedUserRecord{Key: call.keys[index-1], Fields: fields})
	}
	if len(deleted) > 0 && c.cfg.FeedDeleted != nil {
		c.cfg.FeedDeleted(ctx, call.torrent, deleted)
	}
	report.UserRecords += int(counts[1])
	report.PeerRecords += int(counts[2])
	report.Timeouts += int(counts[3])
	report.ReaperStates += int(counts[4])
	report.SeenSets += int(counts[5])
	report.Torrents += int(counts[6])
	report.ScoreKeys += int(counts[8])
	report.IPMetrics += int(counts[9])
	return counts[0] == 1, counts[7], nil
}

// userPage reads one SCAN page of users' keys: for each versions hash it
// removes the entries whose user-torrent record is gone and whose version
// is older than the window (orphan_user.lua compares each version again);
// for each listing of passkeys, the stale ones (checkListing).
func (c *Cleaner) userPage(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error) {
	keys, next, err := src.node.Scan(ctx, cursor, btstore.UserOwnKeyPattern, int64(c.cfg.Policy.ScanCount)).Result()
	if err != nil {
		return 0, err
	}
	report.Scanned += len(keys)
	now := c.nowMillis()
	for _, key := range keys {
		if user, ok := btstore.UserFromVersionsKey(key); ok {
			if err := c.cleanUser(ctx, user, now, report); err != nil {
				return 0, err
			}
		} else if user, ok := btstore.UserFromPasskeysKey(key); ok {
			if err := c.checkListing(ctx, user, now, report); err != nil {
				return 0, err
			}
		}
	}
	return next, nil
}

// cleanUser checks one user's entries in pages of the versions hash.
func (c *Cleaner) cleanUser(ctx context.Context, user string, now int64, report *Report) error {
	var cursor uint64
	for {
		pairs, next, err := c.rdb.HScan(ctx, btstore.UserVersionsKey(user), cursor, "", int64(c.cfg.Policy.ScanCount)).Result()
		if err != nil {
			return err
		}
		report.Scanned += len(pairs) / 2
		var torrents []string
		versions := map[string]string{}
		for i := 0; i+1 < len(pairs); i += 2 {
			v, err := strconv.ParseInt(pairs[i+1], 10, 64)
			if err == nil && c.stale(now, v) {
				torrents = append(torrents, pairs[i])
				versions[pairs[i]] = pairs[i+1]
			}
		}
		if len(torrents) > 0 {
			if err := c.cleanUserEntries(ctx, user, torrents, versions, report); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

func (c *Cleaner) cleanUserEntries(ctx context.Context, user string, torrents []string, versions map[string]string, report *Report) error {
	hexes, err := c.rdb.HMGet(ctx, btstore.UserTorrentsKey(user), torrents...).Result()
	if err != nil {
		return err
	}
	type candidate struct {
		torrent string
		exists  *redis.IntCmd
	}
	var candidates []candidate
	pipe := c.rdb.Pipeline()
	for i, torrent := range torrents {
		text, _ := hexes[i].(string)
		hash, err := swarm.ParseInfoHash(text)
		if err != nil {
			continue // written before entries named their torrent: unknown, kept
		}
		candidates = append(candidates, candidate{torrent, pipe.Exists(ctx, btstore.UserTorrentKey(hash, user))})
	}
	if len(candidates) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	var args []any
	for _, cand := range candidates {
		if cand.exists.Val() == 0 {
			args = append(args, cand.torrent, versions[cand.torrent])
		}
	}
	if len(args) == 0 {
		return nil
	}
	n, err := btstore.DropUserEntries(ctx, c.rdb, user, args)
	report.UserEntries += n
	return err
}

// registryPage reads one HSCAN page of the registry and removes entries
// whose torrent record has no id and is older than the window (or is
// gone), then puts back any a registration raced with.
func (c *Cleaner) registryPage(ctx context.Context, _ source, cursor uint64, report *Report) (uint64, error) {
	pairs, next, err := c.rdb.HScan(ctx, btstore.RegistryKey, cursor, "", int64(c.cfg.Policy.ScanCount)).Result()
	if err != nil {
		return 0, err
	}
	report.Scanned += len(pairs) / 2
	return next, c.checkRegistry(ctx, pairs, report)
}

// checkRegistry removes the registry entries of pairs (hex info-hash,
// id) whose torrent record has no id and is older than the window (or is
// gone), then puts back any a registration raced with.
func (c *Cleaner) checkRegistry(ctx context.Context, pairs []string, report *Report) error {
	type entry struct {
		hex, id string
		fields  *redis.SliceCmd
	}
	var entries []entry
	pipe := c.rdb.Pipeline()
	for i := 0; i+1 < len(pairs); i += 2 {
		hash, err := swarm.ParseInfoHash(pairs[i])
		if err != nil {
			continue
		}
		entries = append(entries, entry{pairs[i], pairs[i+1],
			pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "registered", "unregistered", "created", "last_action")})
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	now := c.nowMillis()
	var args []any
	for _, e := range entries {
		v := e.fields.Val()
		if v[0] != nil {
			continue
		}
		var newest int64
		for _, f := range v[1:] {
			text, _ := f.(string)
			n, _ := strconv.ParseInt(text, 10, 64)
			newest = max(newest, n)
		}
		if c.stale(now, newest) {
			args = append(args, e.hex, e.id)
		}
	}
	if len(args) == 0 {
		return nil
	}
	deleted, err := btstore.DropRegistryEntries(ctx, c.rdb, args)
	if err != nil {
		return err
	}
	report.RegistryEntries += len(deleted)
	// A registration writes the record, then the registry: one that wrote
	// its record after our read may have had its entry deleted just now.
	for _, hexHash := range deleted {
		hash, _ := swarm.ParseInfoHash(hexHash)
		id, err := c.rdb.HGet(ctx, btstore.TorrentKey(hash), "id").Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return err
		}
		if err := c.rdb.HSet(ctx, btstore.RegistryKey, hexHash, id).Err(); err != nil {
			return err
		}
		report.RegistryEntries--
		report.RegistryRestored++
	}
	return nil
}

// revsPage reads one HSCAN page of a score index shard's revisions and
// removes those (with any index entry) whose score record is gone and
// whose revision is older than the window.
func (c *Cleaner) revsPage(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error) {
	pairs, next, err := c.rdb.HScan(ctx, btstore.ScoreIndexRevsKey(src.shard), cursor, "", int64(c.cfg.Policy.ScanCount)).Result()
	if err != nil {
		return 0, err
	}
	report.Scanned += len(pairs) / 2
	return next, c.checkRevs(ctx, src.shard, pairs, report)
}

// checkRevs removes the revisions of pairs (hex info-hash, revision) in
// a score index shard, with any index entry, whose score record is gone
// and whose revision is older than the window.
func (c *Cleaner) checkRevs(ctx context.Context, shard int, pairs []string, report *Report) error {
	now := c.nowMillis()
	type entry struct {
		hex, rev string
		exists   *redis.IntCmd
	}
	var entries []entry
	pipe := c.rdb.Pipeline()
	for i := 0; i+1 < len(pairs); i += 2 {
		hash, err := swarm.ParseInfoHash(pairs[i])
		rev, perr := strconv.ParseInt(pairs[i+1], 10, 64)
		if err != nil || perr != nil || !c.stale(now, rev) {
			continue
		}
		entries = append(entries, entry{pairs[i], pairs[i+1], pipe.Exists(ctx, btstore.ScoreKey(hash))})
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	var args []any
	for _, e := range entries {
		if e.exists.Val() == 0 {
			args = append(args, e.hex, e.rev)
		}
	}
	if len(args) == 0 {
		return nil
	}
	n, err := btstore.DropScoreRevisions(ctx, c.rdb, shard, args)
	report.ScoreRevisions += n
	return err
}
