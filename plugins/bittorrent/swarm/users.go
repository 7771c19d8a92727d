package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A user is a site's user id with the passkeys that map to it. Its
// records (its sets, versions, totals, and its record on every torrent it
// announced) stay while it has a passkey. RemoveUser marks a user with no
// passkey left as removed; orphan cleanup (package orphans) purges it a
// protection window later, and a passkey added before then (a rotation)
// undoes the mark and keeps everything. Added after the purge began, the
// user comes back as a new one: AddUser finishes the purge first.
//
// The user's listing of its passkeys (btstore.UserPasskeysKey) is what cleanup
// trusts, so it always covers the passkeys that map to the user: AddUser
// lists before it maps, RemoveUser unmaps after it unlists, and cleanup's
// passkeys walk lists any mapped passkey it finds unlisted (those mapped
// before listings existed, or a call cut off between its two steps). A
// purge begins only after a whole pass of that walk that began after the
// removal.

// purgeChunk is how many of a user's torrents one purge step handles.
const purgeChunk = 500

// maxPurgeSteps bounds the steps AddUser spends finishing a purge.
const maxPurgeSteps = 10_000

// AddUser maps a passkey to a user id, replacing any previous mapping.
// A passkey is MinPasskeyLen to 64 characters of A-Z a-z 0-9 _ -: checked
// here, so every admin path that adds one is held to it. (RemoveUser
// takes shorter ones, so passkeys registered before the rule can go.)
// Adding a passkey to a user removed less than a protection window ago
// keeps all of its records; to one being purged, it finishes the purge
// first and the user starts afresh.
func (s *Store) AddUser(ctx context.Context, passkey, userID string) error {
	if !validPasskey(passkey) {
		return fmt.Errorf("swarm: passkey: want %s: %w", passkeyRule, ErrInvalid)
	}
	if !validName(userID) {
		return fmt.Errorf("swarm: user id %q: want 1-%d characters of A-Z a-z 0-9 _ -: %w", userID, maxNameLen, ErrInvalid)
	}
	previous, err := s.rdb.Get(ctx, btstore.PasskeyKey(passkey)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("swarm.AddUser: %w", err)
	}
	for attempt := 0; ; attempt++ {
		state, err := userAddScript.Run(ctx, s.rdb, userListKeys(userID), passkey, s.nowMillis()).Text()
		if err != nil {
			return fmt.Errorf("swarm.AddUser: %w", err)
		}
		if state == "listed" {
			break
		}
		if attempt == 2 {
			return fmt.Errorf("swarm.AddUser: user %q: its purge does not finish", userID)
		}
		if err := s.finishPurge(ctx, userID); err != nil {
			return fmt.Errorf("swarm.AddUser: finishing the purge of user %q: %w", userID, err)
		}
	}
	if err := s.rdb.Set(ctx, btstore.PasskeyKey(passkey), userID, 0).Err(); err != nil {
		return fmt.Errorf("swarm.AddUser: %w", err)
	}
	s.passkeys.invalidate(passkey)
	s.publishHint(ctx, hintPasskeyPrefix+passkey)
	if previous != "" && previous != userID {
		if err := s.unlist(ctx, previous, passkey); err != nil {
			return fmt.Errorf("swarm.AddUser: the passkey's previous user: %w", err)
		}
	}
	return nil
}

// RemoveUser forgets a passkey. A user left without a passkey is marked
// removed, and orphan cleanup purges its records a protection window
// later, unless a passkey is added to it before then.
func (s *Store) RemoveUser(ctx context.Context, passkey string) error {
	if !validName(passkey) {
		return fmt.Errorf("swarm: passkey: %w", ErrInvalid)
	}
	userID, err := s.rdb.Get(ctx, btstore.PasskeyKey(passkey)).Result()
	if errors.Is(err, redis.Nil) {
		s.passkeys.invalidate(passkey)
		return nil
	}
	if err != nil {
		return fmt.Errorf("swarm.RemoveUser: %w", err)
	}
	if err := s.unlist(ctx, userID, passkey); err != nil {
		return fmt.Errorf("swarm.RemoveUser: %w", err)
	}
	// Unmapped after the unlisting: a call cut off in between leaves a
	// mapped, unlisted passkey, which the passkeys walk lists again.
	if err := passkeyDropScript.Run(ctx, s.rdb, []string{btstore.PasskeyKey(passkey)}, userID).Err(); err != nil {
		return fmt.Errorf("swarm.RemoveUser: %w", err)
	}
	s.passkeys.invalidate(passkey)
	s.publishHint(ctx, hintPasskeyPrefix+passkey)
	return nil
}

// unlist takes a passkey off a user's listing, marking the user removed
// when none is left. The index of removed users is written first: it is
// a hint, and an entry for a user that turns out live is dropped by the
// walk, while a mark without an entry would never be found. It is written
// again after the mark: the walk may have found the user live just before
// the mark and dropped the first entry (see ForgetRemovedUsers).
func (s *Store) unlist(ctx context.Context, userID, passkey string) error {
	now := s.nowMillis()
	if err := s.rdb.ZAdd(ctx, btstore.RemovedUsersKey, redis.Z{Score: float64(now), Member: userID}).Err(); err != nil {
		return err
	}
	removedAt, err := userRemoveScript.Run(ctx, s.rdb, userListKeys(userID), passkey, now, "").Int64()
	if err != nil || removedAt <= 0 {
		return err
	}
	return s.rdb.ZAdd(ctx, btstore.RemovedUsersKey, redis.Z{Score: float64(removedAt), Member: userID}).Err()
}

// UnlistStale drops a listed passkey that no longer maps to the user
// (orphan cleanup), only if its listing time is still listedAt, and
// indexes the user as removed when it has none left. It returns whether
// it dropped the listing.
func (s *Store) UnlistStale(ctx context.Context, userID, passkey, listedAt string, now int64) (bool, error) {
	if err := s.rdb.ZAddNX(ctx, btstore.RemovedUsersKey, redis.Z{Score: float64(now), Member: userID}).Err(); err != nil {
		return false, err
	}
	removedAt, err := userRemoveScript.Run(ctx, s.rdb, userListKeys(userID), passkey, now, listedAt).Int64()
	if err != nil {
		return false, err
	}
	if removedAt > 0 {
		// again after the mark, as unlist does; the score is the removal
		// time, which is earlier than now when the user lost its last
		// mapped passkey before the stale listing was written
		if err := s.rdb.ZAdd(ctx, btstore.RemovedUsersKey, redis.Z{Score: float64(removedAt), Member: userID}).Err(); err != nil {
			return false, err
		}
	}
	return removedAt >= 0, nil
}

// userListKeys are the KEYS of user_add.lua, user_remove.lua,
// user_list.lua and user_purge_start.lua.
func userListKeys(userID string) []string {
	return []string{btstore.UserPasskeysKey(userID), btstore.UserGoneKey(userID)}
}

// ListPasskey lists a passkey found mapped to userID on the user's
// listing (orphan cleanup's passkeys walk); true when it was not listed.
func (s *Store) ListPasskey(ctx context.Context, userID, passkey string, now int64) (bool, error) {
	n, err := userListScript.Run(ctx, s.rdb, []string{btstore.UserPasskeysKey(userID)}, passkey, now).Int()
	return n == 1, err
}

// UserPurge is where a removed user's purge stands.
type UserPurge struct {
	// State is "live" (a passkey, or no removal mark), "waiting" (marked,
	// not purged yet) or "purging".
	State       string
	RemovedAt   int64 // ms, 0 when live
	PurgeBefore int64 // ms, when the purge began; 0 unless purging
}

// StartUserPurge begins purging a user if it has no passkey, was removed
// longer than window ago, and coveredFrom (the start of the passkeys
// walk's last finished pass, ms) is after the removal; it reports where
// the purge stands.
func (s *Store) StartUserPurge(ctx context.Context, userID string, now, window, coveredFrom int64) (UserPurge, error) {
	reply, err := userPurgeStartScript.Run(ctx, s.rdb, userListKeys(userID), now, window, coveredFrom).StringSlice()
	if err != nil {
		return UserPurge{}, fmt.Errorf("swarm: user_purge_start.lua: %w", err)
	}
	if len(reply) != 3 {
		return UserPurge{}, fmt.Errorf("swarm: user_purge_start.lua: %w", errBadReply)
	}
	removed, _ := strconv.ParseInt(reply[1], 10, 64)
	before, _ := strconv.ParseInt(reply[2], 10, 64)
	return UserPurge{State: reply[0], RemovedAt: removed, PurgeBefore: before}, nil
}

// PurgeProgress counts one purge step.
type PurgeProgress struct {
	Records  int  // user-torrent records deleted
	Kept     int  // records kept (a peer still counted): they go with their torrent
	Dropped  int  // entries dropped from the user's sets
	Finished bool // the user's own keys are deleted: the purge is over
}

// PurgeUserStep deletes up to one chunk of a purging user's records (in
// the torrents' slots), drops them from the user's sets, and deletes the
// user's keys once none is left. Each call checks the purge is still the
// one that began at purgeBefore.
func (s *Store) PurgeUserStep(ctx context.Context, userID string, purgeBefore int64) (PurgeProgress, error) {
	var progress PurgeProgress
	pairs, _, err := s.rdb.HScan(ctx, btstore.UserTorrentsKey(userID), 0, "", purgeChunk).Result()
	if err != nil {
		return progress, err
	}
	var torrents []string
	var calls []scriptCall
	for i := 0; i+1 < len(pairs); i += 2 {
		torrents = append(torrents, pairs[i])
		hash, err := ParseInfoHash(pairs[i+1])
		if err != nil {
			continue // not a torrent: only its entry goes
		}
		calls = append(calls, scriptCall{
			keys: []string{btstore.UserTorrentKey(hash, userID), btstore.TorrentUsersKey(hash)},
			args: []any{userID, purgeBefore},
		})
	}
	var deleted []deletedRecord
	for i, cmd := range s.runScriptsPipelined(ctx, userPurgeRecordScript, calls) {
		reply, err := cmd.Slice()
		if err != nil {
			return progress, fmt.Errorf("swarm: user_purge_record.lua: %w", err)
		}
		if len(reply) == 0 || replyInt(reply[0]) != 1 {
			progress.Kept++
			continue
		}
		progress.Records++
		if len(reply) == 11 {
			hash, _ := btstore.HashFromKey(calls[i].keys[0])
			deleted = append(deleted, deletedRecord{hash: hash, user: userID, fields: reply[1:]})
		}
	}
	// Before the step reports the records gone: a writer killed with
	// their rows in memory would otherwise lose them (decision 5).
	s.feedDeleted(ctx, deleted)
	args := make([]any, 0, len(torrents)+1)
	args = append(args, purgeBefore)
	for _, t := range torrents {
		args = append(args, t)
	}
	keys := []string{btstore.UserGoneKey(userID), btstore.UserTorrentsKey(userID), btstore.UserVersionsKey(userID),
		btstore.UserSetKey(userID, btstore.UserActive), btstore.UserSetKey(userID, btstore.UserComplete), btstore.UserSetKey(userID, btstore.UserIncomplete),
		btstore.UserSetKey(userID, btstore.UserHnR), btstore.UserStatsKey(userID)}
	reply, err := userPurgeDropScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return progress, fmt.Errorf("swarm: user_purge_drop.lua: %w", err)
	}
	if len(reply) != 2 {
		return progress, fmt.Errorf("swarm: user_purge_drop.lua: %w", errBadReply)
	}
	progress.Dropped, progress.Finished = int(reply[0]), reply[1] == 1
	return progress, nil
}

// finishPurge runs a purging user's steps to the end (AddUser).
func (s *Store) finishPurge(ctx context.Context, userID string) error {
	before, err := s.rdb.HGet(ctx, btstore.UserGoneKey(userID), "purge_before").Int64()
	if errors.Is(err, redis.Nil) {
		return nil // finished meanwhile
	}
	if err != nil {
		return err
	}
	for range maxPurgeSteps {
		progress, err := s.PurgeUserStep(ctx, userID, before)
		if err != nil {
			return err
		}
		if progress.Finished {
			return nil
		}
		if progress.Dropped == 0 {
			return nil // finished by another caller meanwhile: the caller looks again
		}
	}
	return errors.New("too many steps")
}

// ForgetRemovedUsers drops users from the index of removed users whose
// score is still the one read (pairs of user id and score), after the
// caller found them live or purged.
//
// A user found live can be marked removed just after: RemoveUser writes
// the entry, then the mark (unlist), and the caller may have looked in
// between. When that entry is old enough to be read (the removal stalled
// for a window between its steps, or a test's clock jumped), its score is
// the one read, and the drop would leave a mark that nothing finds. So
// each user dropped is looked at again, and put back when it is marked
// with nothing listed: either this look comes after the mark, or the
// drop came before RemoveUser writes the entry a second time.
func (s *Store) ForgetRemovedUsers(ctx context.Context, pairs []any) (int, error) {
	if len(pairs) == 0 {
		return 0, nil
	}
	n, err := zremUnchangedScript.Run(ctx, s.rdb, []string{btstore.RemovedUsersKey}, pairs...).Int()
	if err != nil || n == 0 {
		return n, err
	}
	type look struct {
		user    string
		listed  *redis.IntCmd
		removed *redis.StringCmd
	}
	looks := make([]look, 0, len(pairs)/2)
	// The listing is read before the mark (one node keeps a pipeline's
	// order): a look after RemoveUser's second entry write sees both.
	pipe := s.rdb.Pipeline()
	for i := 0; i < len(pairs); i += 2 {
		user, _ := pairs[i].(string)
		if !validName(user) {
			continue
		}
		looks = append(looks, look{user, pipe.HLen(ctx, btstore.UserPasskeysKey(user)), pipe.HGet(ctx, btstore.UserGoneKey(user), "removed_at")})
	}
	if len(looks) == 0 {
		return n, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return n, err
	}
	var back []redis.Z
	for _, l := range looks {
		removedAt, err := l.removed.Int64()
		if err == nil && removedAt > 0 && l.listed.Val() == 0 {
			back = append(back, redis.Z{Score: float64(removedAt), Member: l.user})
		}
	}
	if len(back) == 0 {
		return n, nil
	}
	// NX: an entry RemoveUser wrote again meanwhile is the same or newer.
	// A caller paging by offset may skip an entry this pass for each put
	// back (rare); the next pass reads it.
	return n, s.rdb.ZAddNX(ctx, btstore.RemovedUsersKey, back...).Err()
}
