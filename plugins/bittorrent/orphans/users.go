package orphans

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// walkPasskeys names the passkeys walk; the purge needs the start of its
// last finished pass.
const walkPasskeys = "passkeys"

// maxPurgeStepsPerUser bounds one tick's work on one removed user; a user
// with more records goes on in the next tick.
const maxPurgeStepsPerUser = 4

// passkeyPage reads one SCAN page of passkeys and lists on its user's
// listing every passkey found missing there (mapped before listings
// existed, or a RemoveUser cut off between its steps), so that a user
// with a passkey is never purged.
//
// A listing is dated when the page read the mapping, not when it is
// written: a RemoveUser can unlist and unmap the passkey between the two,
// and such a stale listing is dropped a window after its date
// (checkListing). Dated by its writing, it would keep the removed user
// up to a window longer than the removal's own window.
func (c *Cleaner) passkeyPage(ctx context.Context, src source, cursor uint64, report *Report) (uint64, error) {
	readAt := c.nowMillis()
	keys, next, err := src.node.Scan(ctx, cursor, btstore.PasskeyPattern, int64(c.cfg.Policy.ScanCount)).Result()
	if err != nil {
		return 0, err
	}
	report.Scanned += len(keys)
	if len(keys) == 0 {
		return next, nil
	}
	pipe := c.rdb.Pipeline()
	users := make([]*redis.StringCmd, len(keys))
	for i, key := range keys {
		users[i] = pipe.Get(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	type mapped struct{ passkey, user string }
	var found []mapped
	pipe = c.rdb.Pipeline()
	var listed []*redis.BoolCmd
	for i, key := range keys {
		passkey, ok := btstore.PasskeyFromKey(key)
		user := users[i].Val()
		if !ok || user == "" {
			continue
		}
		found = append(found, mapped{passkey, user})
		listed = append(listed, pipe.HExists(ctx, btstore.UserPasskeysKey(user), passkey))
	}
	if len(found) == 0 {
		return next, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	for i, m := range found {
		if listed[i].Val() {
			continue
		}
		added, err := c.store.ListPasskey(ctx, m.user, m.passkey, readAt)
		if err != nil {
			return 0, err
		}
		if added {
			report.PasskeysListed++
		}
	}
	return next, nil
}

// removedPage reads one page of the index of removed users, those marked
// longer than the window ago, and purges each that may be: the cursor is
// an offset in the index.
func (c *Cleaner) removedPage(ctx context.Context, _ source, cursor uint64, report *Report) (uint64, error) {
	now := c.nowMillis()
	count := int64(c.cfg.Policy.ScanCount)
	entries, err := c.rdb.ZRangeByScoreWithScores(ctx, btstore.RemovedUsersKey, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now-c.windowMillis()-1, 10), Offset: int64(cursor), Count: count,
	}).Result()
	if err != nil {
		return 0, err
	}
	report.Scanned += len(entries)
	next := cursor + uint64(len(entries))
	if int64(len(entries)) < count {
		next = 0
	}
	covered, err := c.rdb.HGet(ctx, btstore.OrphanPassesKey, walkPasskeys+":covered").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var forget []any
	for _, e := range entries {
		user, _ := e.Member.(string)
		done, err := c.purgeUser(ctx, user, now, covered, report)
		if err != nil {
			return 0, err
		}
		if done {
			forget = append(forget, user, strconv.FormatFloat(e.Score, 'f', -1, 64))
		}
	}
	n, err := c.store.ForgetRemovedUsers(ctx, forget)
	if err != nil {
		return 0, err
	}
	if n > 0 && next > 0 {
		next -= uint64(min(int64(n), int64(next))) // the entries after them moved up
	}
	return next, nil
}

// purgeUser begins or goes on with the purge of one removed user; done
// says its index entry can go (the user is live again, or purged).
func (c *Cleaner) purgeUser(ctx context.Context, user string, now, covered int64, report *Report) (bool, error) {
	if !swarm.ValidName(user) { // written by hand: only dropped
		return true, nil
	}
	state, err := c.store.StartUserPurge(ctx, user, now, c.windowMillis(), covered)
	if err != nil {
		return false, err
	}
	switch state.State {
	case "live":
		return true, nil
	case "waiting":
		return false, nil
	}
	for range maxPurgeStepsPerUser {
		progress, err := c.store.PurgeUserStep(ctx, user, state.PurgeBefore)
		if err != nil {
			return false, err
		}
		report.UserRecords += progress.Records
		report.PurgeKept += progress.Kept
		report.UserEntries += progress.Dropped
		report.Scanned += progress.Records + progress.Kept
		if progress.Finished {
			report.UsersPurged++
			c.logger.Info("orphans: removed user purged", "user", user, "removed_at", state.RemovedAt)
			return true, nil
		}
		if progress.Dropped == 0 {
			return false, nil // finished or begun again by another caller: the next tick looks again
		}
	}
	return false, nil
}

// checkListing drops a user's listed passkeys that no longer map to it
// and were listed longer than the window ago: the passkeys walk can list
// a passkey just as a RemoveUser unmaps it, and such a listing would keep
// a removed user for ever. The drop is conditional on the listing time
// read, so a passkey listed again since (AddUser) stays.
func (c *Cleaner) checkListing(ctx context.Context, user string, now int64, report *Report) error {
	listing, err := c.rdb.HGetAll(ctx, btstore.UserPasskeysKey(user)).Result()
	if err != nil {
		return err
	}
	report.Scanned += len(listing)
	type listed struct {
		passkey, at string
		user        *redis.StringCmd
	}
	var old []listed
	pipe := c.rdb.Pipeline()
	for passkey, at := range listing {
		ms, err := strconv.ParseInt(at, 10, 64)
		if err != nil || !c.stale(now, ms) || !swarm.ValidName(passkey) {
			continue
		}
		old = append(old, listed{passkey, at, pipe.Get(ctx, btstore.PasskeyKey(passkey))})
	}
	if len(old) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for _, l := range old {
		if l.user.Val() == user {
			continue
		}
		dropped, err := c.store.UnlistStale(ctx, user, l.passkey, l.at, now)
		if err != nil {
			return err
		}
		if dropped {
			report.StaleListings++
		}
	}
	return nil
}
