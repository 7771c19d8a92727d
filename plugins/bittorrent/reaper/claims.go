package reaper

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Claim is one user's claim on a torrent.
type Claim struct {
	User     string
	At       time.Time
	Rewarded bool
}

// Claims lists a torrent's claims (sorted by user) and its open
// invitations (users invited to reseed who have not).
func (r *Reaper) Claims(ctx context.Context, hash bittorrent.InfoHash) (claims []Claim, invited []string, err error) {
	all, err := r.rdb.HGetAll(ctx, btstore.ReaperClaimsKey(hash)).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("reaper.Claims: %w", err)
	}
	for user, v := range all {
		kind, rest, _ := strings.Cut(v, ":")
		ms, _ := strconv.ParseInt(rest, 10, 64)
		switch kind {
		case "i":
			invited = append(invited, user)
		case "c", "r":
			claims = append(claims, Claim{User: user, At: time.UnixMilli(ms).UTC(), Rewarded: kind == "r"})
		}
	}
	slices.SortFunc(claims, func(a, b Claim) int { return strings.Compare(a.User, b.User) })
	slices.Sort(invited)
	return claims, invited, nil
}

// settle grants the rewards of a torrent's claims recorded since the last
// run: it publishes a claim and a reward event per claim (keys per
// torrent and user, so a repeat after a crash is the same event), then
// acknowledges them with one script (reaper_rewards.lua), which also ends
// a claim window that is over. It returns how many were granted now.
func (r *Reaper) settle(ctx context.Context, hash bittorrent.InfoHash) (int, error) {
	pipe := r.rdb.Pipeline()
	claimsCmd := pipe.HGetAll(ctx, btstore.ReaperClaimsKey(hash))
	torrentCmd := pipe.HMGet(ctx, btstore.TorrentKey(hash), "id", "value")
	rowCmd := pipe.HMGet(ctx, btstore.ReaperKey(hash), "saved_at", "saved_state")
	snatchersCmd := pipe.SMembers(ctx, btstore.SnatchersKey(hash))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("reaper: reading claims: %w", err)
	}
	text := func(v []any, i int) string { s, _ := v[i].(string); return s }
	torrent, row := torrentCmd.Val(), rowCmd.Val()
	value, err := strconv.ParseFloat(text(torrent, 1), 64)
	if err != nil || value <= 0 {
		value = 1
	}
	savedAt := text(row, 0)
	snatched := map[string]bool{}
	for _, u := range snatchersCmd.Val() {
		snatched[u] = true
	}
	var users []string
	var events []Event
	for user, v := range claimsCmd.Val() {
		if strings.HasPrefix(v, "c:") {
			users = append(users, user)
		}
	}
	slices.Sort(users)
	for _, user := range users {
		at := strings.TrimPrefix(claimsCmd.Val()[user], "c:")
		ms, _ := strconv.ParseInt(at, 10, 64)
		events = append(events,
			newEvent(KindClaim, eventKey(KindClaim, hash, user), ClaimBody{
				InfoHash: btstore.HexInfoHash(hash), TorrentID: text(torrent, 0), User: user, At: time.UnixMilli(ms).UTC(),
				First: at == savedAt, Snatched: snatched[user], State: text(row, 1),
			}),
			newEvent(KindReward, eventKey(KindReward, hash, user), RewardBody{
				InfoHash: btstore.HexInfoHash(hash), TorrentID: text(torrent, 0), User: user,
				Points: r.cfg.Policy.RewardFactor * value, Factor: r.cfg.Policy.RewardFactor, Value: value,
			}))
	}
	if err := r.publish(ctx, events); err != nil {
		return 0, err
	}
	args := []any{r.cfg.Now().UnixMilli()}
	for _, u := range users {
		args = append(args, u)
	}
	reply, err := luascript.RunList(ctx, r.rdb, rewardsScript, []string{btstore.ReaperKey(hash), btstore.ReaperClaimsKey(hash)}, args...)
	if err != nil {
		return 0, fmt.Errorf("reaper: acknowledging rewards: %w", err)
	}
	granted, _ := reply[0].(int64)
	if granted > 0 {
		r.count(ctx, "claims", granted)
		r.count(ctx, "rewards", granted)
		r.cfg.Logger.Info("reaper: rewarded reseeders", "info_hash", btstore.HexInfoHash(hash), "users", users)
	}
	return int(granted), nil
}

// MaxExtensionDays bounds one extension (ten years).
const MaxExtensionDays = 3650

// Extension is one torrent's extension.
type Extension struct {
	InfoHash     bittorrent.InfoHash
	Notify       string    // the notice it had: initial or final
	UnseededDate time.Time // the new unseeded_date
}

// Extend gives a torrent in the reaper's process days more before its
// next step (Orpheus's extendGracePeriod): its unseeded_date becomes
// max(unseeded_date, now) + days, atomically (reaper_extend.lua), and the
// steps queued for it do nothing. Errors: ErrInvalid (days not 1 to
// MaxExtensionDays), ErrNotFound (not registered), ErrNoNotice.
func (r *Reaper) Extend(ctx context.Context, hash bittorrent.InfoHash, days int) (Extension, error) {
	if days < 1 || days > MaxExtensionDays {
		return Extension{}, fmt.Errorf("reaper: days %d: want a whole number from 1 to %d: %w", days, MaxExtensionDays, ErrInvalid)
	}
	id, err := r.rdb.HGet(ctx, btstore.TorrentKey(hash), "id").Result()
	if err != nil || id == "" {
		if err == nil || isNil(err) {
			return Extension{}, fmt.Errorf("reaper: torrent %s is not registered: %w", btstore.HexInfoHash(hash), ErrNotFound)
		}
		return Extension{}, fmt.Errorf("reaper.Extend: %w", err)
	}
	reply, err := luascript.RunList(ctx, r.rdb, extendScript, []string{btstore.ReaperKey(hash)},
		r.cfg.Now().UnixMilli(), (time.Duration(days) * 24 * time.Hour).Milliseconds())
	if err != nil {
		return Extension{}, fmt.Errorf("reaper.Extend: %w", err)
	}
	if code, _ := reply[0].(int64); code != 1 {
		why, _ := reply[1].(string)
		return Extension{}, fmt.Errorf("reaper: torrent %s is not in the reaper's process (%s): nothing to extend: %w", btstore.HexInfoHash(hash), why, ErrNoNotice)
	}
	date, _ := reply[1].(string)
	ms, _ := strconv.ParseInt(date, 10, 64)
	notify, _ := reply[2].(string)
	r.count(ctx, "extensions", 1)
	return Extension{InfoHash: hash, Notify: notify, UnseededDate: time.UnixMilli(ms).UTC()}, nil
}

// ExtendUser extends every torrent of an uploader that is in the reaper's
// process, each atomically. ErrNotFound when they have none.
func (r *Reaper) ExtendUser(ctx context.Context, user string, days int) ([]Extension, error) {
	if days < 1 || days > MaxExtensionDays {
		return nil, fmt.Errorf("reaper: days %d: want a whole number from 1 to %d: %w", days, MaxExtensionDays, ErrInvalid)
	}
	if user == "" || len(user) > 64 || strings.ContainsAny(user, "{}") {
		return nil, fmt.Errorf("reaper: user id %q: %w", user, ErrInvalid)
	}
	hashes, err := r.uploadsInProcess(ctx, user)
	if err != nil {
		return nil, err
	}
	if len(hashes) == 0 {
		return nil, fmt.Errorf("reaper: user %s has no upload in the reaper's process: %w", user, ErrNotFound)
	}
	var out []Extension
	for _, hash := range hashes {
		ext, err := r.Extend(ctx, hash, days)
		if err != nil {
			// A reseed or removal between the scan and here: skip it.
			r.cfg.Logger.Info("reaper: not extended", "info_hash", btstore.HexInfoHash(hash), "error", err)
			continue
		}
		out = append(out, ext)
	}
	return out, nil
}

// uploadsInProcess lists a user's registered uploads that have a notice
// (initial or final), sorted by info-hash.
func (r *Reaper) uploadsInProcess(ctx context.Context, user string) ([]bittorrent.InfoHash, error) {
	var out []bittorrent.InfoHash
	var cursor uint64
	for {
		pairs, next, err := r.rdb.HScan(ctx, btstore.RegistryKey, cursor, "", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("reaper: registry: %w", err)
		}
		var hashes []bittorrent.InfoHash
		pipe := r.rdb.Pipeline()
		var cmds [][2]interface{ Val() []any }
		for i := 0; i+1 < len(pairs); i += 2 {
			hash, err := swarm.ParseInfoHash(pairs[i])
			if err != nil {
				continue
			}
			hashes = append(hashes, hash)
			cmds = append(cmds, [2]interface{ Val() []any }{
				pipe.HMGet(ctx, btstore.TorrentKey(hash), "uploader"),
				pipe.HMGet(ctx, btstore.ReaperKey(hash), "state", "notify"),
			})
		}
		if len(hashes) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
				return nil, fmt.Errorf("reaper: reading uploads: %w", err)
			}
		}
		for i, hash := range hashes {
			up, _ := cmds[i][0].Val()[0].(string)
			notify, _ := cmds[i][1].Val()[1].(string)
			if up == user && (notify == "initial" || notify == "final") && !slices.Contains(out, hash) {
				out = append(out, hash)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b bittorrent.InfoHash) int { return strings.Compare(string(a[:]), string(b[:])) })
	return out, nil
}
