package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Errors of the admin API, for errors.Is.
var (
	// ErrInvalid: an argument is malformed (a bad id, passkey or prefix).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: the torrent has no record.
	ErrNotFound = errors.New("not found")
)

// maxPrefixLen bounds a whitelisted peer_id prefix: a peer_id is 20 bytes.
const maxPrefixLen = len(bittorrent.PeerID{})

// admit checks a private-mode announce: a known passkey and a whitelisted
// client. It returns the user id ("" in open mode). Both lookups are
// cached, so the common case costs no round trip; the torrent's
// registration is checked inside the announce script itself.
func (s *Store) admit(ctx context.Context, passkey string, peer bittorrent.PeerID) (string, error) {
	if !s.cfg.Private {
		return "", nil
	}
	userID, err := s.userForPasskey(ctx, passkey)
	if err != nil {
		return "", err
	}
	allowed, err := s.whitelist.allows(ctx, s, peer)
	if err != nil {
		return "", err
	}
	if !allowed {
		return "", &bittorrent.ClientError{Reason: "your client is not whitelisted"}
	}
	return userID, nil
}

// whitelistCache is a frontend's copy of the client whitelist's
// prefixes.
type whitelistCache struct{ refreshed[[]string] }

func (c *whitelistCache) allows(ctx context.Context, s *Store, peer bittorrent.PeerID) (bool, error) {
	prefixes, err := c.get(ctx, s.clock.Now(), s.cfg.CacheTTL, func(ctx context.Context) ([]string, error) {
		return s.rdb.HKeys(ctx, btstore.WhitelistKey).Result()
	})
	if err != nil {
		return false, fmt.Errorf("swarm: whitelist: %w", err)
	}
	id := string(peer[:])
	for _, prefix := range prefixes {
		if strings.HasPrefix(id, prefix) {
			return true, nil
		}
	}
	return false, nil
}

// RegisterTorrent registers an info-hash under the site's torrent id
// (private mode accepts announces only for registered torrents). It may
// be called again to change the id. Each call stamps the record's
// "registered" field (ms), which tells scoring a torrent it had removed
// was registered again.
func (s *Store) RegisterTorrent(ctx context.Context, hash bittorrent.InfoHash, torrentID string) error {
	return s.Register(ctx, hash, Registration{ID: torrentID})
}

// Registration is what a site tells the tracker about one of its
// uploads. The reaper needs the uploader (it notifies them, and its caps
// count per uploader) and the creation time (a never-seeded upload is
// reaped by its age).
type Registration struct {
	ID       string    // the site's torrent id (required)
	Uploader string    // the site's user id of the uploader; "" keeps the stored one
	Created  time.Time // the upload's creation time; zero keeps the stored one, or now for a new record
	// Value is what the upload is worth to the site (e.g. its size in
	// GiB): the reaper rewards a reseed with reward_factor x Value, 1 when
	// never given. Zero keeps the stored one.
	Value float64
	// Size is the torrent's size in bytes: the over-download cheat signal
	// compares a user's download with it (WatchConfig.DownloadFactor); no
	// size, no check. Zero keeps the stored one.
	Size int64
}

// maxTorrentSize bounds Registration.Size: the scripts compare it as a
// Lua number, exact below 2^53 bytes (8 PiB).
const maxTorrentSize = 1 << 53

// Register registers an info-hash as RegisterTorrent does, with the
// uploader and creation time when given.
func (s *Store) Register(ctx context.Context, hash bittorrent.InfoHash, reg Registration) error {
	if !validName(reg.ID) {
		return fmt.Errorf("swarm: torrent id %q: want 1-%d characters of A-Z a-z 0-9 _ -: %w", reg.ID, maxNameLen, ErrInvalid)
	}
	if reg.Uploader != "" && !validName(reg.Uploader) {
		return fmt.Errorf("swarm: uploader %q: want 1-%d characters of A-Z a-z 0-9 _ -: %w", reg.Uploader, maxNameLen, ErrInvalid)
	}
	now := s.nowMillis()
	if !reg.Created.IsZero() && (reg.Created.UnixMilli() <= 0 || reg.Created.UnixMilli() > now) {
		return fmt.Errorf("swarm: creation time %s: want a time after 1970 and not in the future: %w",
			reg.Created.UTC().Format(time.RFC3339), ErrInvalid)
	}
	if reg.Value < 0 || math.IsNaN(reg.Value) || math.IsInf(reg.Value, 0) || reg.Value > 1e12 {
		return fmt.Errorf("swarm: value %v: want a positive number (0 keeps the stored one): %w", reg.Value, ErrInvalid)
	}
	if reg.Size < 0 || reg.Size > maxTorrentSize {
		return fmt.Errorf("swarm: size %d: want bytes from 1 to 2^53 (0 keeps the stored one): %w", reg.Size, ErrInvalid)
	}
	key := btstore.TorrentKey(hash)
	pipe := s.rdb.TxPipeline() // one key: MULTI is fine on a cluster
	fields := []any{"id", reg.ID, "registered", now}
	if reg.Uploader != "" {
		fields = append(fields, "uploader", reg.Uploader)
	}
	if !reg.Created.IsZero() {
		fields = append(fields, "created", reg.Created.UnixMilli())
	}
	if reg.Value > 0 {
		fields = append(fields, "value", strconv.FormatFloat(reg.Value, 'g', -1, 64))
	}
	if reg.Size > 0 {
		fields = append(fields, "size", reg.Size)
	}
	pipe.HSet(ctx, key, fields...)
	pipe.HSetNX(ctx, key, "created", now)
	pipe.Persist(ctx, key) // it may have been an expiring open-mode record
	pipe.Del(ctx, btstore.DeletedKey(hash))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("swarm.RegisterTorrent: %w", err)
	}
	if err := s.rdb.HSet(ctx, btstore.RegistryKey, btstore.HexInfoHash(hash), reg.ID).Err(); err != nil {
		return fmt.Errorf("swarm.RegisterTorrent: registry: %w", err)
	}
	return nil
}

// UnregisterTorrent makes a torrent unknown: announces are refused from
// now on and its peers leave as their deadlines pass. Its record (the
// counters) is kept until its swarm has been empty for
// OpenTorrentRetention, like any unregistered torrent's; its index
// entries go now. Unregistering an unknown torrent is not an error.
func (s *Store) UnregisterTorrent(ctx context.Context, hash bittorrent.InfoHash) error {
	return s.unregister(ctx, hash, "")
}

// DeleteTorrent unregisters a torrent as UnregisterTorrent does, and
// for Config.DeletedReasonTTL answers its announces with the site's
// reason ("torrent deleted: Trumped") instead of "unregistered torrent",
// so its users learn why. An empty reason is UnregisterTorrent.
func (s *Store) DeleteTorrent(ctx context.Context, hash bittorrent.InfoHash, reason string) error {
	if reason != "" {
		if err := CheckReason(reason); err != nil {
			return err
		}
	}
	return s.unregister(ctx, hash, reason)
}

func (s *Store) unregister(ctx context.Context, hash bittorrent.InfoHash, reason string) error {
	// The "unregistered" stamp is the record's timestamp of interest for
	// orphan cleanup (package orphans): it is removed a protection window
	// after this, once its swarm is empty. One key: MULTI is fine on a
	// cluster. Cleanup's due entry is written first, so a call cut off
	// after the unregistering still left one (a stale one, of a call cut
	// off before, is looked at and dropped).
	if err := btstore.MarkTorrentDue(ctx, s.rdb, hash, s.nowMillis()); err != nil {
		return fmt.Errorf("swarm.UnregisterTorrent: %w", err)
	}
	pipe := s.rdb.TxPipeline()
	pipe.HDel(ctx, btstore.TorrentKey(hash), "id")
	pipe.HSet(ctx, btstore.TorrentKey(hash), "unregistered", s.nowMillis())
	if reason != "" {
		pipe.Set(ctx, btstore.DeletedKey(hash), reason, s.cfg.DeletedReasonTTL)
	} else {
		pipe.Del(ctx, btstore.DeletedKey(hash))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("swarm.UnregisterTorrent: %w", err)
	}
	// Plain re-announces answered from a view must be refused now, here
	// and on the other frontends, not when their views age out.
	s.dropView(hash)
	s.publishHint(ctx, hintTorrentPrefix+btstore.HexInfoHash(hash))
	pipe = s.rdb.Pipeline()
	pipe.HDel(ctx, btstore.RegistryKey, btstore.HexInfoHash(hash))
	for _, index := range []btstore.Index{btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches} {
		pipe.ZRem(ctx, btstore.IndexKey(index), btstore.HexInfoHash(hash))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("swarm.UnregisterTorrent: %w", err)
	}
	return nil
}

// PurgeTorrent unregisters a torrent and deletes every record it owns at
// once, by one script in its slot (btstore.RemoveTorrent), instead of a
// protection window later by orphan cleanup: an operator's "delete this
// torrent now". While its swarm has peers it is refused with
// btstore.ErrHasPeers and stays unregistered (cleanup removes it a
// window after they left). Its users' set entries naming it are recorded
// in cleanup's due set first, and go a window later: a frontend's batched
// copy of a user's state can still write them meanwhile. The rows of the
// users' records whose writer's "fed up to" is before their last change
// are delivered before it returns (feedDeleted).
func (s *Store) PurgeTorrent(ctx context.Context, hash bittorrent.InfoHash, reason string) (int, error) {
	if err := s.DeleteTorrent(ctx, hash, reason); err != nil {
		return 0, err
	}
	users, err := s.rdb.SMembers(ctx, btstore.TorrentUsersKey(hash)).Result()
	if err != nil {
		return 0, fmt.Errorf("swarm.PurgeTorrent: %w", err)
	}
	pipe := s.rdb.Pipeline()
	for _, user := range users {
		if err := btstore.MarkUserDue(ctx, pipe, user, s.nowMillis()); err != nil {
			return 0, err
		}
	}
	if len(users) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("swarm.PurgeTorrent: %w", err)
		}
	}
	n, gone, err := btstore.RemoveTorrentFed(ctx, s.rdb, hash)
	if err != nil {
		return n, err
	}
	// Before the purge is reported done: a writer killed with these
	// records' rows only in its memory would otherwise lose them, and no
	// backstop finds a deleted record (decision 5).
	s.FeedDeletedRecords(ctx, hash, gone)
	return n, nil
}

// FeedDeletedRecords delivers the feed's rows of hash's user records that
// a delete script removed (btstore.RemoveTorrentFed, orphan cleanup's
// orphan_torrent.lua) when their writer's "fed up to" is before their last
// change (the lead's decision 5): a writer killed with the rows only in
// its memory would lose them, and no backstop finds a deleted record. A
// record of another torrent, or not a user's, is ignored. Without a feed
// it does nothing; a failed delivery holds the rows for this frontend's
// next round (feedDeleted).
func (s *Store) FeedDeletedRecords(ctx context.Context, hash bittorrent.InfoHash, gone []btstore.DeletedUserRecord) {
	prefix := btstore.UserTorrentKey(hash, "")
	deleted := make([]deletedRecord, 0, len(gone))
	for _, d := range gone {
		if len(d.Key) > len(prefix) && d.Key[:len(prefix)] == prefix && len(d.Fields) == 10 {
			deleted = append(deleted, deletedRecord{hash: hash, user: d.Key[len(prefix):], fields: d.Fields})
		}
	}
	s.feedDeleted(ctx, deleted)
}

// TorrentInfo is a torrent's record.
type TorrentInfo struct {
	InfoHash   bittorrent.InfoHash
	ID         string    // "" when not registered
	Uploader   string    // the site's uploader, "" when not given
	Created    time.Time // first registration or announce
	LastAction time.Time // last time it had a seeder; zero if never
	Announces  int64
	Seeders    int64
	Leechers   int64
	Snatches   int64
	Value      float64 // the site's value of the upload, 0 when never given
	Size       int64   // the site's size of it (bytes), 0 when never given
	Credit     Credit  // the site's credit status for it (SetTorrentCredit)
}

// Torrent returns a torrent's record, or ErrNotFound.
func (s *Store) Torrent(ctx context.Context, hash bittorrent.InfoHash) (TorrentInfo, error) {
	fields, err := s.rdb.HGetAll(ctx, btstore.TorrentKey(hash)).Result()
	if err != nil {
		return TorrentInfo{}, fmt.Errorf("swarm.Torrent: %w", err)
	}
	if len(fields) == 0 {
		return TorrentInfo{}, fmt.Errorf("swarm.Torrent %s: %w", btstore.HexInfoHash(hash), ErrNotFound)
	}
	num := func(name string) int64 { n, _ := strconv.ParseInt(fields[name], 10, 64); return n }
	value, _ := strconv.ParseFloat(fields["value"], 64)
	at := func(name string) time.Time {
		if ms := num(name); ms > 0 {
			return time.UnixMilli(ms)
		}
		return time.Time{}
	}
	return TorrentInfo{
		InfoHash:   hash,
		ID:         fields["id"],
		Uploader:   fields["uploader"],
		Created:    at("created"),
		LastAction: at("last_action"),
		Announces:  num("announces"),
		Seeders:    num("seeders"),
		Leechers:   num("leechers"),
		Snatches:   num("snatches"),
		Value:      value,
		Size:       num("size"),
		Credit:     creditOf(fields),
	}, nil
}

// Client is one whitelisted client: a peer_id prefix and a readable name.
type Client struct {
	Prefix string // e.g. "-TR3", "-qB4", "A2-"
	Name   string // e.g. "Transmission 3.x"
}

// AddClient whitelists a peer_id prefix (1-20 bytes).
func (s *Store) AddClient(ctx context.Context, prefix, name string) error {
	if prefix == "" || len(prefix) > maxPrefixLen {
		return fmt.Errorf("swarm: client prefix must be 1-%d bytes: %w", maxPrefixLen, ErrInvalid)
	}
	if len(name) > 200 {
		return fmt.Errorf("swarm: client name is longer than 200 bytes: %w", ErrInvalid)
	}
	if err := s.rdb.HSet(ctx, btstore.WhitelistKey, prefix, name).Err(); err != nil {
		return fmt.Errorf("swarm.AddClient: %w", err)
	}
	s.whitelist.invalidate()
	s.publishHint(ctx, hintWhitelist)
	return nil
}

// RemoveClient takes a prefix off the whitelist.
func (s *Store) RemoveClient(ctx context.Context, prefix string) error {
	if err := s.rdb.HDel(ctx, btstore.WhitelistKey, prefix).Err(); err != nil {
		return fmt.Errorf("swarm.RemoveClient: %w", err)
	}
	s.whitelist.invalidate()
	s.publishHint(ctx, hintWhitelist)
	return nil
}

// Clients lists the whitelist, sorted by prefix. In private mode an empty
// whitelist refuses every client.
func (s *Store) Clients(ctx context.Context) ([]Client, error) {
	all, err := s.rdb.HGetAll(ctx, btstore.WhitelistKey).Result()
	if err != nil {
		return nil, fmt.Errorf("swarm.Clients: %w", err)
	}
	clients := make([]Client, 0, len(all))
	for prefix, name := range all {
		clients = append(clients, Client{Prefix: prefix, Name: name})
	}
	sort.Slice(clients, func(i, j int) bool { return clients[i].Prefix < clients[j].Prefix })
	return clients, nil
}

// Stats are the global counters (see btstore.StatsKey). They lag by up to one
// FlushInterval per frontend.
type Stats struct {
	Announces int64
	Scrapes   int64
	Requests  int64 // announces and scrapes, refused ones included
	Seeders   int64
	Leechers  int64
	Snatches  int64
}

// Stats returns the global counters.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	v, err := s.rdb.HMGet(ctx, btstore.StatsKey, statNames[:]...).Result()
	if err != nil {
		return Stats{}, fmt.Errorf("swarm.Stats: %w", err)
	}
	return Stats{
		Announces: replyInt(v[statAnnounces]),
		Scrapes:   replyInt(v[statScrapes]),
		Requests:  replyInt(v[statRequests]),
		Seeders:   replyInt(v[statSeeders]),
		Leechers:  replyInt(v[statLeechers]),
		Snatches:  replyInt(v[statSnatches]),
	}, nil
}

// Ranked is one torrent in an index.
type Ranked struct {
	InfoHash bittorrent.InfoHash
	Count    int64
}

// Top returns up to n torrents with the highest count in an index.
func (s *Store) Top(ctx context.Context, index btstore.Index, n int) ([]Ranked, error) {
	switch index {
	case btstore.IndexSeeders, btstore.IndexLeechers, btstore.IndexSnatches:
	default:
		return nil, fmt.Errorf("swarm: index %q: %w", index, ErrInvalid)
	}
	if n <= 0 {
		return nil, nil
	}
	zs, err := s.rdb.ZRevRangeWithScores(ctx, btstore.IndexKey(index), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("swarm.Top: %w", err)
	}
	out := make([]Ranked, 0, len(zs))
	for _, z := range zs {
		hash, ok := btstore.ParseHexInfoHash(fmt.Sprint(z.Member))
		if !ok {
			continue
		}
		out = append(out, Ranked{InfoHash: hash, Count: int64(z.Score)})
	}
	return out, nil
}

// UserSummary is what the store knows of one user over all torrents.
type UserSummary struct {
	Active     []string // torrent ids the user has a peer in
	Complete   []string // torrent ids the user has had complete
	Incomplete []string // torrent ids the user announced and never completed
	HnR        []string // hit-and-runs (see HnRPolicy)
	Uploaded   int64    // bytes, summed over announces
	Downloaded int64
	// UpCredited and DownCredited are the credited transfer (Credit).
	UpCredited   int64
	DownCredited int64
}

// User returns a user's sets (sorted) and transfer totals. They lag by up
// to one FlushInterval per frontend.
func (s *Store) User(ctx context.Context, userID string) (UserSummary, error) {
	if !validName(userID) {
		return UserSummary{}, fmt.Errorf("swarm: user id %q: %w", userID, ErrInvalid)
	}
	pipe := s.rdb.Pipeline()
	sets := []btstore.UserSet{btstore.UserActive, btstore.UserComplete, btstore.UserIncomplete, btstore.UserHnR}
	cmds := make([]*redis.StringSliceCmd, len(sets))
	for i, set := range sets {
		cmds[i] = pipe.SMembers(ctx, btstore.UserSetKey(userID, set))
	}
	totals := pipe.HMGet(ctx, btstore.UserStatsKey(userID), transferFields[:]...)
	if _, err := pipe.Exec(ctx); err != nil {
		return UserSummary{}, fmt.Errorf("swarm.User: %w", err)
	}
	members := make([][]string, len(sets))
	for i, cmd := range cmds {
		members[i] = cmd.Val()
		sort.Strings(members[i])
	}
	return UserSummary{
		Active: members[0], Complete: members[1], Incomplete: members[2], HnR: members[3],
		Uploaded: replyInt(totals.Val()[0]), Downloaded: replyInt(totals.Val()[1]),
		// The totals keep the credited figures as their difference from the
		// raw ones (transferFields).
		UpCredited:   s.creditOf(replyInt(totals.Val()[0]), replyInt(totals.Val()[2])),
		DownCredited: s.creditOf(replyInt(totals.Val()[1]), replyInt(totals.Val()[3])),
	}, nil
}

// ParseInfoHash reads a 40-character hex info-hash, for the admin API and
// CLI.
func ParseInfoHash(s string) (bittorrent.InfoHash, error) {
	hash, ok := btstore.ParseHexInfoHash(strings.ToLower(s))
	if !ok {
		return hash, fmt.Errorf("swarm: info-hash %q: want 40 hex characters: %w", s, ErrInvalid)
	}
	return hash, nil
}
