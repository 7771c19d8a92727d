package swarm

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Every key of a torrent carries the torrent's hash tag, its info-hash in
// lower-case hex ("{<40 hex>}"), so each script touches a single slot and
// the same code runs on one Redis and on Redis Cluster. Keys that are not
// a torrent's (the registry, users, the whitelist, global counters,
// indexes, user sets) are never touched by a torrent's script: see
// flush.go for how they are kept up to date. All key names are built here
// and nowhere else; scripts receive them in KEYS.

const keyPrefix = "hoard:bt:"

// swarmKeys are one torrent's key names, built once per request from the
// hex info-hash.
type swarmKeys struct {
	prefix    string // "hoard:bt:{<hex info-hash>}:"
	torrent   string
	seeders   string
	leechers  string
	deadlines string
}

func keysOf(hash bittorrent.InfoHash) swarmKeys {
	prefix := keyPrefix + "{" + hexHash(hash) + "}:"
	return swarmKeys{
		prefix:    prefix,
		torrent:   prefix + "torrent",
		seeders:   prefix + "seeders",
		leechers:  prefix + "leechers",
		deadlines: prefix + "deadlines",
	}
}

func hexHash(hash bittorrent.InfoHash) string { return hex.EncodeToString(hash[:]) }

func (k swarmKeys) peer(peer []byte) string { return k.prefix + "peer:" + hex.EncodeToString(peer) }

// timeoutMarker separates a torrent's prefix from the peer part of a
// timeout key; parseTimeoutKey relies on it.
const timeoutMarker = "timeout:"

func (k swarmKeys) timeout(peer []byte, userID string) string {
	key := k.prefix + timeoutMarker + hex.EncodeToString(peer)
	if userID != "" {
		key += ":" + userID
	}
	return key
}

func (k swarmKeys) user(userID string) string { return k.prefix + "user:" + userID }

// announceKeys are announce.lua's KEYS.
func announceKeys(hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string) []string {
	k := keysOf(hash)
	return []string{k.torrent, k.seeders, k.leechers, k.deadlines,
		k.peer(peer[:]), k.timeout(peer[:], userID), k.user(userID), k.prefix + reaperSuffix,
		k.prefix + snatchersSuffix, k.prefix + reaperClaimsSuffix, k.prefix + usersSuffix, k.prefix + ownersSuffix}
}

const (
	reaperSuffix       = "reaper"
	reaperClaimsSuffix = "reaper:claims"
	snatchersSuffix    = "snatchers"
	usersSuffix        = "users"
	ownersSuffix       = "owners"
)

// OwnersKey counts, in open mode, each address's peers in the torrent's
// swarm (HASH: 4 IPv4 address bytes, or the 8 bytes of an IPv6 /64 ->
// count), so announce.lua can bound them (Config.MaxPeersPerOwner). A
// field goes when its count reaches 0, and the key with the last one, so
// an empty swarm leaves nothing for cleanup.
func OwnersKey(hash bittorrent.InfoHash) string { return keysOf(hash).prefix + ownersSuffix }

// TorrentUsersKey lists the user ids that have a record on the torrent
// (SET), added by the announce that creates the record. Orphan cleanup
// reads it to delete a removed torrent's user records in the same script
// as its record, so no announce ever sees half of a removed torrent.
// Records older than this key are not in it; cleanup finds those by
// scanning.
func TorrentUsersKey(hash bittorrent.InfoHash) string { return keysOf(hash).prefix + usersSuffix }

// ReaperKey holds the torrent's unseeded-reaper state (HASH), written by
// package reaper: state (never, unseeded), notify (initial, final,
// removed), unseeded_date, initial_at, final_at, removed_at (ms), since
// (the last_action the spell began from, 0 when never seeded), gen (the
// epoch of the row's later steps: initial_at, moved by an extension),
// pending and pending_at (the step queued last, and the run that queued
// it). A seeder's announce ends the spell: it deletes the row, or, when
// someone other than the uploader reseeded, replaces it by the claim
// window (claim_until, saved_at, saved_state; rewards while rewards wait
// to be granted), which the reaper deletes when it is over.
func ReaperKey(hash bittorrent.InfoHash) string { return keysOf(hash).prefix + reaperSuffix }

// ReaperClaimsKey holds the torrent's reseed invitations and claims
// (HASH user id -> "i:<gen>" invited by the initial notice of generation
// gen, "c:<ms>" claimed at ms with its reward not granted yet, "r:<ms>"
// claimed and rewarded). Claimed entries are never deleted: one person
// claims one upload once, ever.
func ReaperClaimsKey(hash bittorrent.InfoHash) string {
	return keysOf(hash).prefix + reaperClaimsSuffix
}

// SnatchersKey holds the users who snatched the torrent (SET of user ids,
// private mode), added by the announce that counts the snatch; the reaper
// invites them to reseed and tells them of a removal.
func SnatchersKey(hash bittorrent.InfoHash) string { return keysOf(hash).prefix + snatchersSuffix }

// expireKeys are expire.lua's KEYS for the given deadlines members (20-byte
// peer id followed by the user id).
func expireKeys(hash bittorrent.InfoHash, members []string) []string {
	k := keysOf(hash)
	keys := make([]string, 0, 5+3*len(members))
	keys = append(keys, k.torrent, k.seeders, k.leechers, k.deadlines, k.prefix+ownersSuffix)
	for _, member := range members {
		peer, userID := []byte(member[:20]), member[20:]
		keys = append(keys, k.peer(peer), k.timeout(peer, userID), k.user(userID))
	}
	return keys
}

// TorrentKey holds the torrent's record (HASH): id (registered torrents),
// uploader (the site's user id, when registered with one), registered
// (ms of the last registration), unregistered (ms of the last
// unregistration or reaper removal: orphan cleanup's timestamp of
// interest once the id is gone), created and last_action (ms;
// last_action is the last time it had a seeder), announces, seeders,
// leechers, snatches, value (what the site says it is worth: the
// reaper's reward base).
func TorrentKey(hash bittorrent.InfoHash) string { return keysOf(hash).torrent }

// SeedersKey maps each seeder's 20-byte peer id to its compact address
// (HASH); its length is the seeder count.
func SeedersKey(hash bittorrent.InfoHash) string { return keysOf(hash).seeders }

// LeechersKey maps each leecher's 20-byte peer id to its compact address
// (HASH); its length is the leecher count.
func LeechersKey(hash bittorrent.InfoHash) string { return keysOf(hash).leechers }

// DeadlinesKey scores every peer in the swarm by its deadline in ms
// (ZSET). Members are the 20-byte peer id followed by the user id ("" in
// open mode), so an expiry finds every key it touches from the member.
func DeadlinesKey(hash bittorrent.InfoHash) string { return keysOf(hash).deadlines }

// PeerKey holds one peer's record (HASH): user, addr, uploaded,
// downloaded, left, speed_up, speed_down (bytes/s), completed,
// first_announce, last_announce (ms), total_time (ms), active. It lives
// while the peer is in the swarm, then Config.PeerRetention longer.
func PeerKey(hash bittorrent.InfoHash, peer bittorrent.PeerID) string {
	return keysOf(hash).peer(peer[:])
}

// TimeoutKey expires at the peer's deadline (STRING, PX); its expiry
// event is what removes the peer promptly. The user id is part of the
// name so the event alone says which keys the removal touches.
func TimeoutKey(hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string) string {
	return keysOf(hash).timeout(peer[:], userID)
}

// parseTimeoutKey reads the info-hash, peer id and user id back from a
// TimeoutKey name; ok is false for any other key.
func parseTimeoutKey(key string) (hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string, ok bool) {
	rest, found := strings.CutPrefix(key, keyPrefix+"{")
	if !found || len(rest) < 40+2+len(timeoutMarker)+40 {
		return hash, peer, "", false
	}
	if rest[40:42] != "}:" || rest[42:42+len(timeoutMarker)] != timeoutMarker {
		return hash, peer, "", false
	}
	if _, err := hex.Decode(hash[:], []byte(rest[:40])); err != nil {
		return hash, peer, "", false
	}
	rest = rest[42+len(timeoutMarker):]
	if _, err := hex.Decode(peer[:], []byte(rest[:40])); err != nil {
		return hash, peer, "", false
	}
	rest = rest[40:]
	if rest == "" {
		return hash, peer, "", true
	}
	userID, found = strings.CutPrefix(rest, ":")
	if !found || !validName(userID) {
		return hash, peer, "", false
	}
	return hash, peer, userID, true
}

// UserTorrentKey holds one user's record on one torrent (HASH): uploaded,
// downloaded (bytes, summed over the user's peers), seed_ms, leech_ms,
// peers (active now), complete, snatched (ms of the first completed
// event), first_announce, last_announce, bits and ver (the state last
// copied to the user's sets). Private mode only; it is the hit-and-run
// truth, so it has no TTL.
func UserTorrentKey(hash bittorrent.InfoHash, userID string) string {
	return keysOf(hash).user(userID)
}

// DueShards is how many shards the due index has. It is fixed: changing
// it would strand the entries of the shards that went away.
const DueShards = 16

// dueShard is the due-index shard of a torrent.
func dueShard(hash bittorrent.InfoHash) int { return int(hash[0]) % DueShards }

// DueKey is one shard of the due index (ZSET): every swarm with peers,
// scored at or before its earliest peer deadline (ms). The sweep reads
// the due ones with a range query instead of scanning keys. Each shard is
// its own slot so the index spreads over a cluster.
func DueKey(shard int) string { return keyPrefix + "{due:" + strconv.Itoa(shard) + "}" }

// dueLeaseKey lets one frontend at a time sweep a shard (STRING, PX).
func dueLeaseKey(shard int) string { return keyPrefix + "{due:" + strconv.Itoa(shard) + "}:lease" }

// RegistryKey maps every registered torrent's hex info-hash to its id
// (HASH), for listing. The announce script reads the id from the
// torrent's own record, never from here.
const RegistryKey = keyPrefix + "registry"

// PasskeyKey maps a passkey to its user id (STRING). One key per passkey
// spreads users over a cluster; frontends cache lookups (Config.CacheTTL).
func PasskeyKey(passkey string) string { return keyPrefix + "passkey:" + passkey }

// WhitelistKey maps each allowed peer_id prefix to a client name (HASH).
const WhitelistKey = keyPrefix + "whitelist"

// CacheHintChannel is the Pub/Sub channel on which a frontend that
// changed a passkey or the whitelist tells the others to drop their
// cached copy (hints.go). Not a key: it carries no data, and a lost hint
// costs at most Config.CacheTTL.
const CacheHintChannel = keyPrefix + "cache-hints"

// StatsKey holds the global counters (HASH): announces, scrapes,
// requests, seeders, leechers, snatches. Only the batched flush writes it.
const StatsKey = keyPrefix + "stats"

// Index names the sorted indexes of torrents.
type Index string

// The indexes, each a ZSET of hex info-hash -> count.
const (
	IndexSeeders  Index = "seeders"
	IndexLeechers Index = "leechers"
	IndexSnatches Index = "snatches"
)

// IndexKey is one sorted index of torrents (ZSET hex info-hash -> count).
func IndexKey(index Index) string { return keyPrefix + "index:" + string(index) }

// repairLeaseKey lets one frontend at a time run the periodic repair.
const repairLeaseKey = keyPrefix + "repair:lease"

// UserSet names a user's sets of torrent ids.
type UserSet string

// The user sets (see user_sets.lua for what each holds).
const (
	UserActive     UserSet = "active"
	UserComplete   UserSet = "complete"
	UserIncomplete UserSet = "incomplete"
	UserHnR        UserSet = "hnr"
)

func userPrefix(userID string) string { return keyPrefix + "user:{" + userID + "}:" }

// UserSetKey is one of a user's sets of torrent ids (SET).
func UserSetKey(userID string, set UserSet) string { return userPrefix(userID) + string(set) }

// UserVersionsKey maps a torrent id to the version of the user's state on
// it that the sets show (HASH), so reordered copies never regress.
func UserVersionsKey(userID string) string { return userPrefix(userID) + "versions" }

// UserTorrentsKey maps a torrent id in the user's sets to the hex
// info-hash whose user-torrent record the state came from (HASH), so
// orphan cleanup can find that record from the user's side.
func UserTorrentsKey(userID string) string { return userPrefix(userID) + "torrents" }

// UserStatsKey holds the user's transfer totals over all torrents (HASH:
// uploaded, downloaded), summed from announce deltas by the flush.
func UserStatsKey(userID string) string { return userPrefix(userID) + "stats" }

// UserPasskeysKey lists the passkeys that map to a user (HASH passkey ->
// when listed, ms): orphan cleanup purges a user only when it is empty.
func UserPasskeysKey(userID string) string { return userPrefix(userID) + "passkeys" }

// UserGoneKey marks a user with no passkey left (HASH removed_at, and
// purge_before once orphan cleanup began purging it).
func UserGoneKey(userID string) string { return userPrefix(userID) + "gone" }

// RemovedUsersKey indexes the users marked removed (ZSET user id ->
// removal time, ms) so orphan cleanup finds them without a scan. It is a
// hint: the mark in the user's slot is the truth.
const RemovedUsersKey = keyPrefix + "users:removed"

// Patterns the repair scans for, one per master.
const (
	torrentKeyPattern     = keyPrefix + "{*}:torrent"
	userTorrentKeyPattern = keyPrefix + "{*}:user:*"
)

// parseHexHash reads a lower-case hex info-hash.
func parseHexHash(s string) (bittorrent.InfoHash, bool) {
	var hash bittorrent.InfoHash
	if len(s) != 40 {
		return hash, false
	}
	if _, err := hex.Decode(hash[:], []byte(s)); err != nil {
		return hash, false
	}
	return hash, true
}

// hashFromKey reads the info-hash back from any torrent key.
func hashFromKey(key string) (bittorrent.InfoHash, bool) {
	var hash bittorrent.InfoHash
	rest, found := strings.CutPrefix(key, keyPrefix+"{")
	if !found || len(rest) < 42 || rest[40] != '}' {
		return hash, false
	}
	if _, err := hex.Decode(hash[:], []byte(rest[:40])); err != nil {
		return hash, false
	}
	return hash, true
}

// HexInfoHash is an info-hash as the registry and key names spell it:
// 40 lower-case hex characters.
func HexInfoHash(hash bittorrent.InfoHash) string { return hexHash(hash) }
