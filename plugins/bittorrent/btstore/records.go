package btstore

import (
	"strings"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Kind names a kind of record. A torrent's kinds are the names
// orphan_torrent.lua takes in its ARGV; a user's name its own keys.
type Kind string

// The kinds of a torrent's records.
const (
	KindTorrent         Kind = "torrent"
	KindSeeders         Kind = "seeders"
	KindLeechers        Kind = "leechers"
	KindUsers           Kind = "users"
	KindReaper          Kind = "reaper"
	KindSeen            Kind = "seen"
	KindSnatchers       Kind = "snatchers"
	KindClaims          Kind = "claims"
	KindScore           Kind = "score"
	KindScoreHistory    Kind = "score_history"
	KindScoreTrackers   Kind = "score_trackers"
	KindScoreTrackersAt Kind = "score_trackers_at"
	KindDeadlines       Kind = "deadlines"
	KindOwners          Kind = "owners"
	KindUser            Kind = "user"
	KindPeer            Kind = "peer"
	KindTimeout         Kind = "timeout"
	KindSourceSeen      Kind = "source_seen"
	KindPending         Kind = "pending"
	KindIPM             Kind = "ipm"
	KindDeleted         Kind = "deleted"
	KindFeedRows        Kind = "feed_rows"
)

// Record describes one kind of record a torrent owns: the suffix after
// its "{<hex>}:", and whether it is one key or a family of them (one per
// peer, user, external tracker or unique-IP counter).
type Record struct {
	Kind   Kind
	Suffix string
	// Family: Suffix is followed by a peer id, a user id, a source id or
	// the unique-IP metric's rest, so a torrent has any number of them.
	Family bool
	// Owner is the package whose logic writes the record.
	Owner string
}

// torrentRecords is every kind of record under a torrent's hash tag. The
// one-key kinds come first, in the order orphan_torrent.lua takes them
// as its fixed KEYS (OrphanTorrentFixedKeys); adding a kind of record
// means adding a row here, and cleanup, ListTorrentRecords and
// RemoveTorrent see it.
var torrentRecords = []Record{
	{Kind: KindTorrent, Suffix: sufTorrent, Owner: "swarm"},
	{Kind: KindSeeders, Suffix: sufSeeders, Owner: "swarm"},
	{Kind: KindLeechers, Suffix: sufLeechers, Owner: "swarm"},
	{Kind: KindUsers, Suffix: sufUsers, Owner: "swarm"},
	{Kind: KindReaper, Suffix: sufReaper, Owner: "reaper"},
	{Kind: KindSeen, Suffix: sufScoreSeen, Owner: "scoring"},
	{Kind: KindSnatchers, Suffix: sufSnatchers, Owner: "swarm"},
	{Kind: KindClaims, Suffix: sufReaperClaims, Owner: "reaper"},
	{Kind: KindScore, Suffix: sufScore, Owner: "scoring"},
	{Kind: KindScoreHistory, Suffix: sufScoreHistory, Owner: "scoring"},
	{Kind: KindScoreTrackers, Suffix: sufScoreTrackers, Owner: "scoring"},
	{Kind: KindScoreTrackersAt, Suffix: sufScoreTrackersAt, Owner: "scoring"},
	// not among orphan_torrent.lua's fixed KEYS
	{Kind: KindDeadlines, Suffix: sufDeadlines, Owner: "swarm"},
	{Kind: KindOwners, Suffix: sufOwners, Owner: "swarm"},
	{Kind: KindUser, Suffix: sufUser, Family: true, Owner: "swarm"},
	{Kind: KindPeer, Suffix: sufPeer, Family: true, Owner: "swarm"},
	{Kind: KindTimeout, Suffix: sufTimeout, Family: true, Owner: "swarm"},
	{Kind: KindSourceSeen, Suffix: sufSourceSeen, Family: true, Owner: "scoring"},
	{Kind: KindPending, Suffix: sufScorePending, Family: true, Owner: "scoring"},
	{Kind: KindIPM, Suffix: sufIPM, Family: true, Owner: "ipmetrics"},
	// the site's deletion reason: it expires by itself, and orphan
	// cleanup passes it by
	{Kind: KindDeleted, Suffix: sufDeleted, Owner: "swarm"},
	// the users whose figures the feed has not delivered yet
	{Kind: KindFeedRows, Suffix: sufFeedRows, Owner: "swarm"},
}

// orphanFixedKinds is how many rows of torrentRecords are
// orphan_torrent.lua's fixed KEYS.
const orphanFixedKinds = 12

// TorrentRecords lists the kinds of record a torrent owns.
func TorrentRecords() []Record { return append([]Record(nil), torrentRecords...) }

// OrphanTorrentFixedKeys are orphan_torrent.lua's first twelve KEYS.
func OrphanTorrentFixedKeys(hash bittorrent.InfoHash) []string {
	prefix := torrentPrefix(hash)
	keys := make([]string, orphanFixedKinds)
	for i, r := range torrentRecords[:orphanFixedKinds] {
		keys[i] = prefix + r.Suffix
	}
	return keys
}

// TorrentFixedKeys names every one-key record of a torrent, in
// torrentRecords' order.
func TorrentFixedKeys(hash bittorrent.InfoHash) []string {
	prefix := torrentPrefix(hash)
	var keys []string
	for _, r := range torrentRecords {
		if !r.Family {
			keys = append(keys, prefix+r.Suffix)
		}
	}
	return keys
}

// ParseTorrentKey reads a torrent key's info-hash and kind from
// torrentRecords; ok is false for a key that is not a torrent's (or is
// spelt in upper-case hex, which nothing writes) and for an unknown
// suffix.
func ParseTorrentKey(key string) (hash bittorrent.InfoHash, kind Kind, ok bool) {
	rest, found := strings.CutPrefix(key, Prefix+"{")
	if !found || len(rest) < 42 || rest[40:42] != "}:" {
		return hash, "", false
	}
	hash, ok = ParseHexInfoHash(rest[:40])
	if !ok || strings.ToLower(rest[:40]) != rest[:40] {
		return hash, "", false
	}
	suffix := rest[42:]
	for _, r := range torrentRecords {
		if !r.Family && suffix == r.Suffix {
			return hash, r.Kind, true
		}
	}
	// Families whose prefix extends another's ("score:seen:" after the
	// one-key "score:seen") are told apart by the exact match above; no
	// family prefix is a prefix of another's.
	for _, r := range torrentRecords {
		if r.Family && len(suffix) > len(r.Suffix) && strings.HasPrefix(suffix, r.Suffix) {
			return hash, r.Kind, true
		}
	}
	return hash, "", false
}

// UserKinds are a user's own keys (under "{<user id>}"), in the order
// UserOwnKeys gives them.
var userKinds = []string{
	string(UserActive), string(UserComplete), string(UserIncomplete), string(UserHnR),
	sufUserVersions, "torrents", "stats", sufUserPasskeys, "gone",
	sufUserAddresses, sufUserAddressesReported, // expire by themselves (cheat_addrs.lua)
}

// UserOwnKeys names every key in a user's own slot. A user's records on
// torrents (UserTorrentKey) live in each torrent's slot; its users set
// and its user's sets name them.
func UserOwnKeys(userID string) []string {
	keys := make([]string, len(userKinds))
	for i, k := range userKinds {
		keys[i] = userPrefix(userID) + k
	}
	return keys
}

// UserStateKeys are the KEYS of user_sets.lua and orphan_user.lua: the
// user's sets, its versions and its torrents.
func UserStateKeys(userID string) []string {
	keys := make([]string, 0, len(UserSets)+2)
	for _, set := range UserSets {
		keys = append(keys, UserSetKey(userID, set))
	}
	return append(keys, UserVersionsKey(userID), UserTorrentsKey(userID))
}

// TorrentPattern matches every key under a torrent's hash tag (SCAN
// MATCH on the torrent's node).
func TorrentPattern(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + "*" }

// UserOwnPattern matches every key in a user's own slot.
func UserOwnPattern(userID string) string { return userPrefix(userID) + "*" }

// UserRecordsPattern matches a user's records on every torrent.
func UserRecordsPattern(userID string) string { return Prefix + "{*}:" + sufUser + userID }
