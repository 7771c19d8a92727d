package btstore

import (
	"crypto/sha1"
	"encoding/hex"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Every key name of the BitTorrent plugin is built here and nowhere else
// (internal/layering fails on a "hoard:bt:" literal in any other package);
// scripts receive them in KEYS. The layout is the one the domain packages
// built before they had one owner, byte for byte, so existing data reads
// as before.
//
// Hash tags: every key of a torrent carries the torrent's tag, its
// info-hash in lower-case hex ("{<40 hex>}"), so each script touches a
// single slot and the same code runs on one Redis and on Redis Cluster.
// A user's own keys carry "{<user id>}"; the outbox is one slot,
// "{outbox}"; sharded indexes ({due:<n>}, {score:<n>}, {ipm:<n>}) spread
// over slots. Keys under no tag (the registry, passkeys, the whitelist,
// global counters, indexes) are never touched by a script.

// Prefix starts every key of the plugin.
const Prefix = "hoard:bt:"

// HexInfoHash is an info-hash as the registry and key names spell it:
// 40 lower-case hex characters.
func HexInfoHash(hash bittorrent.InfoHash) string { return hex.EncodeToString(hash[:]) }

// ParseHexInfoHash reads a lower-case hex info-hash.
func ParseHexInfoHash(s string) (bittorrent.InfoHash, bool) {
	var hash bittorrent.InfoHash
	if len(s) != 40 {
		return hash, false
	}
	if _, err := hex.Decode(hash[:], []byte(s)); err != nil {
		return hash, false
	}
	return hash, true
}

// torrentPrefix is "hoard:bt:{<hex info-hash>}:", the start of every key
// of the torrent.
func torrentPrefix(hash bittorrent.InfoHash) string {
	return Prefix + "{" + HexInfoHash(hash) + "}:"
}

// TorrentKeys are one torrent's swarm key names, built once per request
// from the hex info-hash.
type TorrentKeys struct {
	prefix    string
	Torrent   string
	Seeders   string
	Leechers  string
	Deadlines string
}

// KeysOf builds a torrent's swarm key names.
func KeysOf(hash bittorrent.InfoHash) TorrentKeys {
	prefix := torrentPrefix(hash)
	return TorrentKeys{
		prefix:    prefix,
		Torrent:   prefix + sufTorrent,
		Seeders:   prefix + sufSeeders,
		Leechers:  prefix + sufLeechers,
		Deadlines: prefix + sufDeadlines,
	}
}

// Peer is the peer record's name (see PeerKey).
func (k TorrentKeys) Peer(peer []byte) string { return k.prefix + sufPeer + hex.EncodeToString(peer) }

// Timeout is the peer's timeout key's name (see TimeoutKey).
func (k TorrentKeys) Timeout(peer []byte, userID string) string {
	key := k.prefix + sufTimeout + hex.EncodeToString(peer)
	if userID != "" {
		key += ":" + userID
	}
	return key
}

// User is the user-torrent record's name (see UserTorrentKey).
func (k TorrentKeys) User(userID string) string { return k.prefix + sufUser + userID }

// The suffixes after a torrent's "{<hex>}:", one per kind of record
// (torrentRecords lists them with what owns each).
const (
	sufTorrent         = "torrent"
	sufSeeders         = "seeders"
	sufLeechers        = "leechers"
	sufDeadlines       = "deadlines"
	sufOwners          = "owners"
	sufUsers           = "users"
	sufReaper          = "reaper"
	sufReaperClaims    = "reaper:claims"
	sufSnatchers       = "snatchers"
	sufScore           = "score"
	sufScoreSeen       = "score:seen"
	sufScoreTrackers   = "score:trackers"
	sufScoreTrackersAt = "score:trackers_at"
	sufScoreHistory    = "score:history"
	sufDeleted         = "deleted"
	sufFeedRows        = "feed:rows"
	// families: the prefix is followed by a peer id, a user id, a source
	// id or the unique-IP metric's rest
	sufPeer         = "peer:"
	sufTimeout      = "timeout:"
	sufUser         = "user:"
	sufSourceSeen   = "score:seen:"
	sufScorePending = "score:pending:"
	sufIPM          = "ipm:"
)

// AnnounceKeys are announce.lua's KEYS: for an open-mode announce (no
// user) only the first eight, since the script touches the rest for a
// user only and every key is a string Redis reads into the script's KEYS.
func AnnounceKeys(hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string) []string {
	const open = len(sufTorrent+sufSeeders+sufLeechers+sufDeadlines+sufPeer+sufReaper+sufReaperClaims+sufOwners) + 2*len(peer)
	var k keyRun
	if userID == "" {
		k.start(hash, 8, open)
	} else {
		k.start(hash, 12, open+len(sufUser+sufSnatchers+sufUsers+sufDeleted)+len(userID))
	}
	k.add(sufTorrent, "")
	k.add(sufSeeders, "")
	k.add(sufLeechers, "")
	k.add(sufDeadlines, "")
	k.addHex(sufPeer, peer[:])
	k.add(sufReaper, "")
	k.add(sufReaperClaims, "")
	k.add(sufOwners, "")
	if userID != "" {
		k.add(sufUser, userID)
		k.add(sufSnatchers, "")
		k.add(sufUsers, "")
		k.add(sufDeleted, "")
	}
	return k.names()
}

// keyRun lays one script call's key names, all of one torrent, end to end
// in a single string and slices each name out of it: announce.lua's keys
// cost two allocations this way (the string and the slice) where building
// each name alone cost one or two (the hex included), 14 per announce.
type keyRun struct {
	prefix [len(Prefix) + 2*len(bittorrent.InfoHash{}) + len("{}:")]byte // "<Prefix>{<hex>}:"
	b      *strings.Builder                                              // apart, so that its self-pointer leaves the rest on the stack
	ends   [16]int                                                       // where each name ends, the first 16 (announce.lua has 13 keys)
	more   []int                                                         // and the rest's (a refresh of many peers)
	count  int
}

// start begins the names of hash's keys: count of them, their suffixes
// suffixBytes long in all.
func (k *keyRun) start(hash bittorrent.InfoHash, count, suffixBytes int) {
	p := append(k.prefix[:0], Prefix+"{"...)
	p = hex.AppendEncode(p, hash[:])
	_ = append(p, "}:"...)
	k.b = new(strings.Builder)
	k.b.Grow(count*len(k.prefix) + suffixBytes)
}

// add appends the name prefix+suffix+tail.
func (k *keyRun) add(suffix, tail string) {
	k.b.Write(k.prefix[:])
	k.b.WriteString(suffix)
	k.b.WriteString(tail)
	k.ended()
}

// addHex appends the name prefix+suffix+<id in lower-case hex>.
func (k *keyRun) addHex(suffix string, id []byte) {
	var hexID [2 * len(bittorrent.PeerID{})]byte
	k.b.Write(k.prefix[:])
	k.b.WriteString(suffix)
	k.b.Write(hex.AppendEncode(hexID[:0], id))
	k.ended()
}

// ended records that a name ends here.
func (k *keyRun) ended() {
	if k.count < len(k.ends) {
		k.ends[k.count] = k.b.Len()
	} else {
		k.more = append(k.more, k.b.Len())
	}
	k.count++
}

// names returns the names in the order added.
func (k *keyRun) names() []string {
	all, start := k.b.String(), 0
	names := make([]string, k.count)
	for i := range names {
		end := 0
		if i < len(k.ends) {
			end = k.ends[i]
		} else {
			end = k.more[i-len(k.ends)]
		}
		names[i] = all[start:end]
		start = end
	}
	return names
}

// FeedRowsKey held the torrent's feed rows not yet fed to the site
// (HASH "<user id>:<seq>" -> "seq,uploaded,downloaded,up_credit,
// down_credit,seed_ms,leech_ms,snatched,last_announce"), written by the
// announce scripts until S5 (s43). Since S5 no script writes it: the
// scripts return the row and the frontend that answered holds it (swarm's
// feedbuf.go). Rows an earlier build left are delivered once, by the
// drain a feed loop runs at start (swarm's drainLegacyFeed), through the
// index (FeedIndexKey) and feed_settle.lua as before. Rows an earlier
// build wrote under the user id alone are deleted by feed_settle.lua.
func FeedRowsKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufFeedRows }

// FeedRowsPattern matches every torrent's feed rows: the drain at start
// scans for rows an earlier build left unindexed (its mark lost).
const FeedRowsPattern = Prefix + "{*}:" + sufFeedRows

// FeedLegacyScannedKey marks (STRING FeedLegacyScanned) that a frontend
// has scanned the keyspace for feed rows an earlier build left with their
// index mark lost (FeedRowsPattern; swarm's drainLegacyFeed) and indexed
// them, so later starts skip that scan and drain the index alone. Only an
// earlier build writes rows, and only a frontend of one killed before its
// flush loses a mark: an operator who ran such a build beside this one
// after the scan deletes the key, and the next start scans again. No
// script reads it.
const FeedLegacyScannedKey = Prefix + "feed:legacy"

// FeedLegacyScanned is FeedLegacyScannedKey's value once the scan is done.
const FeedLegacyScanned = "scanned"

// FeedShards is how many shards the feed's index has. It is fixed:
// changing it would strand the entries of the shards that went away.
const FeedShards = 16

// FeedShard is the feed index shard of a torrent.
func FeedShard(hash bittorrent.InfoHash) int { return int(hash[0]) % FeedShards }

// FeedIndexKey is one shard of the feed's index (ZSET hex info-hash ->
// ms it was marked, and FeedIndexKeeper at 0): the torrents whose feed
// rows may have entries. A hint, written until S5 (s43) by the frontends'
// batched flush after announce.lua reported a mark; the rows are the
// truth (FeedRowsPattern). Since S5 only the drain at start reads it.
func FeedIndexKey(shard int) string { return Prefix + "{feed:" + strconv.Itoa(shard) + "}" }

// FeedIndexKeeper is a member every write of a FeedIndexKey shard adds at
// score 0 (FeedIndexKeeperScore), and nothing removes, so that the shard
// is a skiplist, never a listpack. Redis keeps a sorted set of up to 128
// members of up to 64 bytes (zset-max-listpack-*) as a listpack, which
// every ZADD, ZSCORE and ZREM walks end to end; a shard holds about that
// many torrents, and the walks cost some 20k Redis instructions per
// private announce with accounting on (BenchmarkFeedSticky, by callgrind:
// docs/bittorrent-site.md, "The feed's index as a skiplist"). A member
// longer than zset-max-listpack-value converts the set, and Redis 7 never
// converts one back while it has members; so the shard stays a skiplist
// (a hash table and a skiplist: each of those O(1) or O(log n)). It is
// no info-hash, so a feed round skips it, and its score 0 puts it first.
const FeedIndexKeeper = "~keeper: a member longer than zset-max-listpack-value (64 bytes) keeps this index a skiplist~"

// FeedIndexKeeperScore is FeedIndexKeeper's score: below every mark (ms).
const FeedIndexKeeperScore = 0

// RefreshKeys are refresh.lua's KEYS for the given peers, in order, with
// their users (users nil: open mode): the torrent's keys (in private
// mode the users set and the feed's rows among them), then per peer its
// record and, in private mode, its user's record.
func RefreshKeys(hash bittorrent.InfoHash, peers []bittorrent.PeerID, users []string) []string {
	const fixed = len(sufTorrent + sufSeeders + sufLeechers + sufDeadlines + sufReaper + sufReaperClaims)
	const peerName = len(sufPeer) + 2*len(bittorrent.PeerID{})
	var k keyRun
	if users == nil {
		k.start(hash, 6+len(peers), fixed+len(peers)*peerName)
	} else {
		suffixes := fixed + len(sufUsers+sufFeedRows) + len(peers)*(peerName+len(sufUser))
		for _, user := range users {
			suffixes += len(user)
		}
		k.start(hash, 8+2*len(peers), suffixes)
	}
	k.add(sufTorrent, "")
	k.add(sufSeeders, "")
	k.add(sufLeechers, "")
	k.add(sufDeadlines, "")
	k.add(sufReaper, "")
	k.add(sufReaperClaims, "")
	if users == nil {
		for i := range peers {
			k.addHex(sufPeer, peers[i][:])
		}
		return k.names()
	}
	k.add(sufUsers, "")
	k.add(sufFeedRows, "")
	for i := range peers {
		k.addHex(sufPeer, peers[i][:])
		k.add(sufUser, users[i])
	}
	return k.names()
}

// DeletedKey holds the reason the site gave when it removed the torrent
// ("Trumped", "Dupe", …) (STRING), with a TTL of the configured time the
// reason is shown (swarm.Config.DeletedReasonTTL): announce.lua answers
// it, instead of "unregistered torrent", to announces of the torrent
// while it lasts, reading it only on that refusal. A registration deletes
// it. It expires by itself, so cleanup need not know it.
func DeletedKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufDeleted }

// ExpireKeys are expire.lua's KEYS for the given deadlines members
// (20-byte peer id followed by the user id).
func ExpireKeys(hash bittorrent.InfoHash, members []string) []string {
	k := KeysOf(hash)
	keys := make([]string, 0, 5+2*len(members))
	keys = append(keys, k.Torrent, k.Seeders, k.Leechers, k.Deadlines, k.prefix+sufOwners)
	for _, member := range members {
		keys = append(keys, k.Peer([]byte(member[:20])), k.User(member[20:]))
	}
	return keys
}

// OwnersKey counts, in open mode, each address's peers in the torrent's
// swarm (HASH: 4 IPv4 address bytes, or the 8 bytes of an IPv6 /64 ->
// count), so announce.lua can bound them (Config.MaxPeersPerOwner). A
// field goes when its count reaches 0, and the key with the last one, so
// an empty swarm leaves nothing for cleanup.
func OwnersKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufOwners }

// TorrentUsersKey lists the user ids that have a record on the torrent
// (SET), added by the announce that creates the record. Orphan cleanup
// reads it to delete a removed torrent's user records in the same script
// as its record, so no announce ever sees half of a removed torrent.
// Records older than this key are not in it; cleanup finds those by
// scanning.
func TorrentUsersKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufUsers }

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
func ReaperKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufReaper }

// ReaperClaimsKey holds the torrent's reseed invitations and claims
// (HASH user id -> "i:<gen>" invited by the initial notice of generation
// gen, "c:<ms>" claimed at ms with its reward not granted yet, "r:<ms>"
// claimed and rewarded). Claimed entries are never deleted: one person
// claims one upload once, ever.
func ReaperClaimsKey(hash bittorrent.InfoHash) string {
	return torrentPrefix(hash) + sufReaperClaims
}

// SnatchersKey holds the users who snatched the torrent (SET of user ids,
// private mode), added by the announce that counts the snatch; the reaper
// invites them to reseed and tells them of a removal.
func SnatchersKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufSnatchers }

// TorrentKey holds the torrent's record (HASH): id (registered torrents),
// uploader (the site's user id, when registered with one), registered
// (ms of the last registration), unregistered (ms of the last
// unregistration or reaper removal: orphan cleanup's timestamp of
// interest once the id is gone), created and last_action (ms;
// last_action is the last time it had a seeder), announces, seeders,
// leechers, snatches, value (what the site says it is worth: the
// reaper's reward base), credit_up and credit_down (the site's credit
// multipliers for it, percent; absent: 100, see credit_torrent.lua).
func TorrentKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufTorrent }

// SeedersKey maps each seeder's 20-byte peer id to its compact address
// (HASH); its length is the seeder count.
func SeedersKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufSeeders }

// LeechersKey maps each leecher's 20-byte peer id to its compact address
// (HASH); its length is the leecher count.
func LeechersKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufLeechers }

// DeadlinesKey scores every peer in the swarm by its deadline in ms
// (ZSET). Members are the 20-byte peer id followed by the user id ("" in
// open mode), so an expiry finds every key it touches from the member.
func DeadlinesKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufDeadlines }

// PeerKey holds one peer's record (HASH): user, addr, uploaded,
// downloaded, left, speed_up, speed_down (bytes/s), completed,
// first_announce, last_announce (ms), total_time (ms), active. It lives
// while the peer is in the swarm, then Config.PeerRetention longer.
func PeerKey(hash bittorrent.InfoHash, peer bittorrent.PeerID) string {
	return KeysOf(hash).Peer(peer[:])
}

// TimeoutKey is the peer's timeout key (STRING, PX) as builds before
// issue 27's cut wrote it beside the deadline index, for its expiry event
// to remove the peer promptly; no script writes it now (the sweep of the
// deadline index expires peers), and one left by an older build expires
// by its TTL. The user id is part of the name so the event alone says
// which keys the removal touches: the expiry listener still acts on
// such events during a rolling upgrade, and orphan cleanup still knows
// the kind.
func TimeoutKey(hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string) string {
	return KeysOf(hash).Timeout(peer[:], userID)
}

// IsTimeoutEvent says, cheaply, whether an expired key's name may be a
// timeout key (ParseTimeoutKey decides).
func IsTimeoutEvent(key string) bool {
	return strings.HasPrefix(key, Prefix+"{") && strings.Contains(key, "}:"+sufTimeout)
}

// ParseTimeoutKey reads the info-hash, peer id and user id back from a
// TimeoutKey name; ok is false for any other key. validUser says whether
// a user id is one the tracker gives out.
func ParseTimeoutKey(key string, validUser func(string) bool) (hash bittorrent.InfoHash, peer bittorrent.PeerID, userID string, ok bool) {
	rest, found := strings.CutPrefix(key, Prefix+"{")
	if !found || len(rest) < 40+2+len(sufTimeout)+40 {
		return hash, peer, "", false
	}
	if rest[40:42] != "}:" || rest[42:42+len(sufTimeout)] != sufTimeout {
		return hash, peer, "", false
	}
	if _, err := hex.Decode(hash[:], []byte(rest[:40])); err != nil {
		return hash, peer, "", false
	}
	rest = rest[42+len(sufTimeout):]
	if _, err := hex.Decode(peer[:], []byte(rest[:40])); err != nil {
		return hash, peer, "", false
	}
	rest = rest[40:]
	if rest == "" {
		return hash, peer, "", true
	}
	userID, found = strings.CutPrefix(rest, ":")
	if !found || !validUser(userID) {
		return hash, peer, "", false
	}
	return hash, peer, userID, true
}

// UserTorrentKey holds one user's record on one torrent (HASH): uploaded,
// downloaded (bytes, summed over the user's peers), seed_ms, leech_ms,
// peers (active now), complete, snatched (ms of the first completed
// event), first_announce, last_announce, bits and ver (the state last
// copied to the user's sets), up_extra and down_extra (the credited
// transfer less the raw one: credited = uploaded + up_extra; absent: 0),
// token, token_used and token_ended (the user's personal
// freeleech token on the torrent: see token_set.lua) and seq (the feed's
// numbering of the fed figures; FeedRowsKey).
// Private mode only; it is the hit-and-run truth, so it has no TTL.
func UserTorrentKey(hash bittorrent.InfoHash, userID string) string {
	// One string, built in place: the flush names a record per ledger
	// write and cheat check, and KeysOf would build the torrent's four
	// other names with it.
	var buf [128]byte
	b := append(buf[:0], Prefix+"{"...)
	b = hex.AppendEncode(b, hash[:])
	b = append(b, "}:"+sufUser...)
	return string(append(b, userID...))
}

// ParseUserTorrentKey reads the info-hash and user id back from a
// UserTorrentKey name (what a SCAN of UserTorrentPattern finds); ok is
// false for any other key. validUser says whether a user id is one the
// tracker gives out.
func ParseUserTorrentKey(key string, validUser func(string) bool) (hash bittorrent.InfoHash, userID string, ok bool) {
	hash, ok = HashFromKey(key)
	if !ok {
		return hash, "", false
	}
	userID, ok = strings.CutPrefix(key, UserTorrentKey(hash, ""))
	if !ok || userID == "" || !validUser(userID) {
		return hash, "", false
	}
	return hash, userID, true
}

// DueShards is how many shards the due index has. It is fixed: changing
// it would strand the entries of the shards that went away.
const DueShards = 16

// DueShard is the due-index shard of a torrent.
func DueShard(hash bittorrent.InfoHash) int { return int(hash[0]) % DueShards }

// DueKey is one shard of the due index (ZSET): every swarm with peers,
// scored at or before its earliest peer deadline (ms). The sweep reads
// the due ones with a range query instead of scanning keys. Each shard is
// its own slot so the index spreads over a cluster.
func DueKey(shard int) string { return Prefix + "{due:" + strconv.Itoa(shard) + "}" }

// DueLeaseKey lets one frontend at a time sweep a shard (STRING, PX).
func DueLeaseKey(shard int) string { return DueKey(shard) + ":lease" }

// RegistryKey maps every registered torrent's hex info-hash to its id
// (HASH), for listing. The announce script reads the id from the
// torrent's own record, never from here.
const RegistryKey = Prefix + "registry"

// PasskeyKey maps a passkey to its user id (STRING). One key per passkey
// spreads users over a cluster; frontends cache lookups (Config.CacheTTL).
func PasskeyKey(passkey string) string { return passkeyPrefix + passkey }

const passkeyPrefix = Prefix + "passkey:"

// PasskeyPattern matches every passkey key, for the walk that lists
// passkeys missing from their user's listing.
const PasskeyPattern = passkeyPrefix + "*"

// PasskeyFromKey reads the passkey back from a PasskeyKey name.
func PasskeyFromKey(key string) (string, bool) {
	passkey, ok := strings.CutPrefix(key, passkeyPrefix)
	return passkey, ok && passkey != ""
}

// WhitelistKey maps each allowed peer_id prefix to a client name (HASH).
const WhitelistKey = Prefix + "whitelist"

// DenyTorrentsKey maps each denied info-hash (hex) to the reason shown
// to clients (HASH), in either mode; DenyClientsKey maps each denied
// peer_id prefix to its reason (HASH). No script reads them: frontends
// cache both (swarm.Config.CacheTTL) and drop their copy on a hint.
const (
	DenyTorrentsKey = Prefix + "deny:torrents"
	DenyClientsKey  = Prefix + "deny:clients"
)

// CreditWindowsKey holds the site-wide credit windows (HASH window id ->
// JSON {"kind", "percent_off", "start", "end"}, times in ms). No script
// reads it: frontends cache it (swarm.Config.CacheTTL), drop their copy
// on a hint, and pass the rates of the windows open at each announce in
// announce.lua's ARGV.
const CreditWindowsKey = Prefix + "credit:windows"

// FrontendsKey lists the frontends that stamp the records they write for
// the feed (HASH frontend id -> "fed up to", ms: what the frontend answered
// before that time has been delivered to the site). FrontendHeartbeatKey
// is a frontend's heartbeat (STRING, PX: swarm's heartbeatTTL), kept only
// while the frontend holds feed changes not yet delivered: an idle
// frontend writes nothing (s43's step 2a wrote it every second, and Redis
// never went quiet). A registered frontend whose heartbeat is gone is dead
// or idle; the feed's backstop finds the records it stamped after its "fed
// up to" (s43, step 2). Both keys are in one slot, "{frontends}", so that
// a beat writes them in one transaction and frontend_forget.lua reads and
// changes them in one step.
const FrontendsKey = Prefix + "{frontends}"

// FrontendHeartbeatKey is frontend id's heartbeat (see FrontendsKey).
func FrontendHeartbeatKey(id string) string { return FrontendsKey + ":beat:" + id }

// FrontendKeys are frontend_forget.lua's KEYS.
func FrontendKeys(id string) []string { return []string{FrontendsKey, FrontendHeartbeatKey(id)} }

// CreditFormKey marks (STRING "extra") that every user-torrent record and
// every user's totals store the credited transfer as its difference from
// the raw one (up_extra, down_extra), not whole (up_credit, down_credit,
// builds before s43). A frontend converts them (credit_convert.lua) before
// it serves an announce, unless this is set; no script reads it.
const CreditFormKey = Prefix + "credit:form"

// CreditFormDone is CreditFormKey's value once the conversion is done.
const CreditFormDone = "extra"

// CreditConvertKeys are credit_convert.lua's KEYS: a user-torrent record
// or a user's totals.
func CreditConvertKeys(record string) []string { return []string{record} }

// CreditTorrentKeys are credit_torrent.lua's KEYS.
func CreditTorrentKeys(hash bittorrent.InfoHash) []string { return []string{TorrentKey(hash)} }

// TokenSetKeys are token_set.lua's KEYS.
func TokenSetKeys(hash bittorrent.InfoHash, userID string) []string {
	k := KeysOf(hash)
	return []string{k.Torrent, k.User(userID), k.prefix + sufUsers}
}

// CacheHintChannel is the Pub/Sub channel on which a frontend that
// changed a passkey or the whitelist tells the others to drop their
// cached copy. Not a key: it carries no data, and a lost hint costs at
// most Config.CacheTTL.
const CacheHintChannel = Prefix + "cache-hints"

// StatsKey holds the global counters (HASH): announces, scrapes,
// requests, seeders, leechers, snatches. Only the batched flush writes it.
const StatsKey = Prefix + "stats"

// Index names the sorted indexes of torrents.
type Index string

// The indexes, each a ZSET of hex info-hash -> count.
const (
	IndexSeeders  Index = "seeders"
	IndexLeechers Index = "leechers"
	IndexSnatches Index = "snatches"
)

// IndexKey is one sorted index of torrents (ZSET hex info-hash -> count).
func IndexKey(index Index) string { return Prefix + "index:" + string(index) }

// RepairLeaseKey lets one frontend at a time run the periodic repair.
const RepairLeaseKey = Prefix + "repair:lease"

// UserSet names a user's sets of torrent ids.
type UserSet string

// The user sets (see user_sets.lua for what each holds).
const (
	UserActive     UserSet = "active"
	UserComplete   UserSet = "complete"
	UserIncomplete UserSet = "incomplete"
	UserHnR        UserSet = "hnr"
)

// UserSets lists every user set, in the order orphan_user.lua takes them.
var UserSets = []UserSet{UserActive, UserComplete, UserIncomplete, UserHnR}

func userPrefix(userID string) string { return Prefix + "user:{" + userID + "}:" }

// UserSetKey is one of a user's sets of torrent ids (SET).
func UserSetKey(userID string, set UserSet) string { return userPrefix(userID) + string(set) }

// UserVersionsKey maps a torrent id to the version of the user's state on
// it that the sets show (HASH), so reordered copies never regress.
func UserVersionsKey(userID string) string { return userPrefix(userID) + sufUserVersions }

// UserTorrentsKey maps a torrent id in the user's sets to the hex
// info-hash whose user-torrent record the state came from (HASH), so
// orphan cleanup can find that record from the user's side.
func UserTorrentsKey(userID string) string { return userPrefix(userID) + "torrents" }

// UserStatsKey holds the user's transfer totals over all torrents (HASH:
// uploaded, downloaded, up_extra, down_extra: the credited totals less
// the raw ones), summed from announce deltas by the flush.
func UserStatsKey(userID string) string { return userPrefix(userID) + "stats" }

// UserPasskeysKey lists the passkeys that map to a user (HASH passkey ->
// when listed, ms): orphan cleanup purges a user only when it is empty.
func UserPasskeysKey(userID string) string { return userPrefix(userID) + sufUserPasskeys }

// UserGoneKey marks a user with no passkey left (HASH removed_at, and
// purge_before once orphan cleanup began purging it).
func UserGoneKey(userID string) string { return userPrefix(userID) + "gone" }

// UserAddressesKey holds the addresses (an IPv4 address, an IPv6 /64)
// the user's passkeys announced from lately, across torrents (ZSET
// address -> last seen, ms), for the many-addresses cheat signal
// (cheat_addrs.lua). It expires a window after its last write.
func UserAddressesKey(userID string) string { return userPrefix(userID) + sufUserAddresses }

// UserAddressesReportedKey is set when the many-addresses signal fired
// for the user (STRING), and expires after the signal's period, so the
// signal fires once per user and period.
func UserAddressesReportedKey(userID string) string {
	return userPrefix(userID) + sufUserAddressesReported
}

// CheatAddrsKeys are the KEYS of cheat_addrs.lua.
func CheatAddrsKeys(userID string) []string {
	return []string{UserAddressesKey(userID), UserAddressesReportedKey(userID)}
}

const (
	sufUserVersions          = "versions"
	sufUserPasskeys          = "passkeys"
	sufUserAddresses         = "addresses"
	sufUserAddressesReported = "addresses_reported"
)

// RemovedUsersKey indexes the users marked removed (ZSET user id ->
// removal time, ms) so orphan cleanup finds them without a scan. It is a
// hint: the mark in the user's slot is the truth.
const RemovedUsersKey = Prefix + "users:removed"

// Patterns the repair and orphan cleanup scan for, one per master.
const (
	TorrentRecordPattern = Prefix + "{*}:" + sufTorrent
	UserTorrentPattern   = Prefix + "{*}:" + sufUser + "*"
	TorrentKeyPattern    = Prefix + "{*}:*"
	UserOwnKeyPattern    = Prefix + "user:{*}:*"
	UserStatsPattern     = Prefix + "user:{*}:stats"
)

// HashFromKey reads the info-hash back from any torrent key.
func HashFromKey(key string) (bittorrent.InfoHash, bool) {
	var hash bittorrent.InfoHash
	rest, found := strings.CutPrefix(key, Prefix+"{")
	if !found || len(rest) < 42 || rest[40] != '}' {
		return hash, false
	}
	if _, err := hex.Decode(hash[:], []byte(rest[:40])); err != nil {
		return hash, false
	}
	return hash, true
}

// UserFromVersionsKey reads the user id from a UserVersionsKey name.
func UserFromVersionsKey(key string) (string, bool) { return userFromKey(key, sufUserVersions) }

// UserFromPasskeysKey reads the user id from a UserPasskeysKey name.
func UserFromPasskeysKey(key string) (string, bool) { return userFromKey(key, sufUserPasskeys) }

func userFromKey(key, suffix string) (string, bool) {
	rest, found := strings.CutPrefix(key, Prefix+"user:{")
	if !found {
		return "", false
	}
	user, found := strings.CutSuffix(rest, "}:"+suffix)
	if !found || user == "" || strings.ContainsAny(user, "{}") {
		return "", false
	}
	return user, userPrefix(user)+suffix == key
}

// ---- scoring (package scoring) ----
//
// A torrent's scoring keys carry its hash tag, like the swarm's, so
// score_apply.lua reads the swarm and writes the score in one slot. The
// score index is sharded: ScoreIndexShards ZSETs, each its own hash tag,
// a torrent in the shard of its info-hash's first byte, so no one key
// pins the tracker to one cluster slot.

// ScoreKey is a torrent's score record (HASH); score_apply.lua lists its
// fields.
func ScoreKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufScore }

// ScoreSeenKey maps each IP seen on the torrent to when it was last seen
// (ZSET of 4- or 16-byte IPs -> ms), trimmed to the "new" window.
func ScoreSeenKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufScoreSeen }

// ScoreTrackersKey holds the external trackers registered for the
// torrent (HASH announce URL -> max peers).
func ScoreTrackersKey(hash bittorrent.InfoHash) string {
	return torrentPrefix(hash) + sufScoreTrackers
}

// ScoreTrackersAtKey is when the torrent's list of external trackers was
// last written (STRING, ms): the list's timestamp of interest for orphan
// cleanup, kept beside it so readers of the list see only trackers.
func ScoreTrackersAtKey(hash bittorrent.InfoHash) string {
	return torrentPrefix(hash) + sufScoreTrackersAt
}

// ScoreHistoryKey is the torrent's last rounds, newest first (LIST of
// JSON, trimmed to the history setting).
func ScoreHistoryKey(hash bittorrent.InfoHash) string {
	return torrentPrefix(hash) + sufScoreHistory
}

// SourceID names an external tracker in key and field names: the first 8
// bytes of the SHA-1 of its URL, in hex (a URL may be 512 bytes and hold
// any character a key should not).
func SourceID(url string) string {
	sum := sha1.Sum([]byte(url))
	return hex.EncodeToString(sum[:8])
}

// SourceSeenKey maps each IP an external tracker gave for the torrent to
// when it was last seen there (ZSET, like ScoreSeenKey), expiring after
// the "new" window once nothing refreshes it.
func SourceSeenKey(hash bittorrent.InfoHash, source string) string {
	return torrentPrefix(hash) + sufSourceSeen + source
}

// ScorePendingKey holds the IPs a worker got from an external tracker,
// each with the round it got them in (ZSET IP -> round), until the round
// is applied and moves them into SourceSeenKey: the worker never writes
// what a round decides, and a result carries no IP lists.
func ScorePendingKey(hash bittorrent.InfoHash, source string) string {
	return torrentPrefix(hash) + sufScorePending + source
}

// ScoreIndexShards is how many shards the score index has. It is fixed:
// changing it would strand the entries of the shards that went away.
const ScoreIndexShards = 16

// ScoreShard is a torrent's score index shard.
func ScoreShard(hash bittorrent.InfoHash) int { return int(hash[0]) % ScoreIndexShards }

func scoreShardPrefix(shard int) string { return Prefix + "{score:" + strconv.Itoa(shard) + "}" }

// ScoreIndexKey is one shard of the score index (ZSET hex info-hash ->
// score).
func ScoreIndexKey(shard int) string { return scoreShardPrefix(shard) }

// ScoreIndexRevsKey maps each hex info-hash of the shard to the revision
// of the torrent's score its entry shows (HASH), so a late step never
// moves it back.
func ScoreIndexRevsKey(shard int) string { return scoreShardPrefix(shard) + ":revs" }

// ScoreProcessedKey counts the results applied per minute (HASH unix
// minute -> count) for the torrents of the shard: torrents.processed over
// the last hour sums the last 60 minutes of every shard.
func ScoreProcessedKey(shard int) string { return scoreShardPrefix(shard) + ":processed" }

// ScoreCycleKey holds the rounds the shard's torrents are queued with in
// the current scoring cycle (HASH "cycle" -> the cycle's id, hex info-hash
// -> round), so a cycle run again after a crash queues the same items
// (score_cycle.lua).
func ScoreCycleKey(shard int) string { return scoreShardPrefix(shard) + ":cycle" }

// ScoreApplyKeys are score_apply.lua's KEYS for the given external
// trackers' source ids.
func ScoreApplyKeys(hash bittorrent.InfoHash, sources []string) []string {
	keys := []string{ScoreKey(hash), TorrentKey(hash), SeedersKey(hash), LeechersKey(hash), ScoreSeenKey(hash),
		ScoreTrackersKey(hash), ScoreHistoryKey(hash)}
	for _, id := range sources {
		keys = append(keys, SourceSeenKey(hash, id), ScorePendingKey(hash, id))
	}
	return keys
}

// ScoreCountKeys are score_count.lua's KEYS.
func ScoreCountKeys(hash bittorrent.InfoHash) []string {
	return []string{SeedersKey(hash), LeechersKey(hash), ScoreSeenKey(hash), ScoreTrackersKey(hash)}
}

// ScoreTrackKeys are score_track.lua's KEYS.
func ScoreTrackKeys(hash bittorrent.InfoHash) []string {
	return []string{ScoreKey(hash), TorrentKey(hash), ScoreHistoryKey(hash)}
}

// ScoreIndexKeys are score_index.lua's KEYS.
func ScoreIndexKeys(shard int) []string {
	return []string{ScoreIndexKey(shard), ScoreIndexRevsKey(shard), ScoreProcessedKey(shard)}
}

// ---- the reaper (package reaper) ----

// ReaperCountsKey holds the reaper's counts (HASH): the torrents in each
// state at the last run (never_initial, never_final, unseeded_initial,
// unseeded_final, claim_windows, rewards_waiting, counted_at ms) and the
// steps done since the start (initial_done, final_done, removed, invited,
// claims, rewards, extensions, notices). Written with HSET and HINCRBY
// after each step's script: a crash between the two may lose one count,
// never a step.
const ReaperCountsKey = Prefix + "reaper:counts"

// ---- the outbox (package outbox) ----
//
// Every key of the outbox shares the hash tag {outbox}, so each script
// touches one slot. The outbox is one slot: its traffic (reaper notices,
// a few per torrent per month) is far below what one slot serves.

const outboxPrefix = Prefix + "{outbox}:"

// OutboxSeqKey is the last event id given (STRING).
func OutboxSeqKey() string { return outboxPrefix + "seq" }

// OutboxEventsKey maps an event id to its record (HASH id -> JSON key,
// kind, body, at), for pending, dead and the kept delivered events.
func OutboxEventsKey() string { return outboxPrefix + "events" }

// OutboxPendingKey holds the events not delivered and not dead (ZSET id
// -> id), in id order for polling sites.
func OutboxPendingKey() string { return outboxPrefix + "pending" }

// OutboxDueKey is when a deliverer may next try each pending event (ZSET
// id -> ms): now when appended, the lease's end while a request is out,
// the backoff's end after a failure.
func OutboxDueKey() string { return outboxPrefix + "due" }

// OutboxAttemptsKey counts the attempts begun per pending event (HASH id
// -> n).
func OutboxAttemptsKey() string { return outboxPrefix + "attempts" }

// OutboxErrorsKey keeps each failing event's last failure in words (HASH
// id -> text), for the dead list.
func OutboxErrorsKey() string { return outboxPrefix + "errors" }

// OutboxDeadKey holds the events whose attempts ran out (ZSET id -> id,
// in id order for listing). They are kept until an operator retries them.
func OutboxDeadKey() string { return outboxPrefix + "dead" }

// OutboxDeliveredKey holds the newest delivered events (ZSET id -> ms
// delivered), trimmed to keep_delivered.
func OutboxDeliveredKey() string { return outboxPrefix + "delivered" }

// OutboxDedupKey is the bounded record of recent idempotency keys (ZSET
// key -> ms appended).
func OutboxDedupKey() string { return outboxPrefix + "dedup" }

// OutboxStatsKey holds the counters (HASH appended, duplicates, attempts,
// failures, delivered, dead, retried).
func OutboxStatsKey() string { return outboxPrefix + "stats" }

// OutboxConfigKey holds the settings every process that acknowledges
// must agree on (HASH keep_delivered), saved by the plugin.
func OutboxConfigKey() string { return outboxPrefix + "config" }

// OutboxAppendKeys are outbox_append.lua's KEYS.
func OutboxAppendKeys() []string {
	return []string{OutboxSeqKey(), OutboxEventsKey(), OutboxPendingKey(), OutboxDueKey(), OutboxDedupKey(), OutboxStatsKey()}
}

// OutboxClaimKeys are outbox_claim.lua's KEYS.
func OutboxClaimKeys() []string {
	return []string{OutboxDueKey(), OutboxEventsKey(), OutboxAttemptsKey(), OutboxPendingKey(), OutboxDeadKey(),
		OutboxErrorsKey(), OutboxStatsKey()}
}

// OutboxAckKeys are outbox_ack.lua's KEYS.
func OutboxAckKeys() []string {
	return []string{OutboxPendingKey(), OutboxDueKey(), OutboxAttemptsKey(), OutboxErrorsKey(), OutboxEventsKey(),
		OutboxDeliveredKey(), OutboxConfigKey(), OutboxStatsKey(), OutboxSeqKey(), OutboxDeadKey()}
}

// OutboxFailKeys are outbox_fail.lua's KEYS.
func OutboxFailKeys() []string {
	return []string{OutboxPendingKey(), OutboxDueKey(), OutboxAttemptsKey(), OutboxDeadKey(), OutboxErrorsKey(),
		OutboxStatsKey()}
}

// OutboxRetryKeys are outbox_retry.lua's KEYS.
func OutboxRetryKeys() []string {
	return []string{OutboxDeadKey(), OutboxPendingKey(), OutboxDueKey(), OutboxAttemptsKey(), OutboxStatsKey()}
}

// ---- unique-IP metrics (package ipmetrics) ----
//
// Global metrics live in IPMShards shards, {ipm:<n>}, an IP in the shard
// of a hash of its bytes: the IP's markers and the shard's counters are
// one slot, and the registrations of all IPs spread over IPMShards slots
// instead of pinning the tracker to one. Per-torrent metrics live under
// the torrent's own tag, beside its swarm. Markers are one HASH per IP
// (per shard or per torrent), a field per metric; counters are one HASH
// per scope and period, a field per metric. The raw IP bytes follow the
// hash tag's closing brace, so a brace among them cannot change the
// slot; markers ("m:") and counters ("n") never collide: the IP has 4 or
// 16 bytes after "m:".

// IPMShards is how many global shards there are. It is fixed: changing
// it would move IPs to shards whose markers do not know them, counting
// them again.
const IPMShards = 16

// ipBytes is the IP as stored: 4 bytes for IPv4 (and IPv4-mapped IPv6),
// 16 for IPv6.
func ipBytes(ip netip.Addr) []byte { return ip.Unmap().AsSlice() }

// IPMShard is the global shard of an IP.
func IPMShard(ip netip.Addr) int {
	h := fnv.New32a()
	_, _ = h.Write(ipBytes(ip))
	return int(h.Sum32() % IPMShards)
}

func ipmShardPrefix(shard int) string { return Prefix + "{ipm:" + strconv.Itoa(shard) + "}:" }

func ipmTorrentPrefix(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + sufIPM }

// IPMGlobalMarkersKey is an IP's global markers (HASH marker field ->
// expiry).
func IPMGlobalMarkersKey(ip netip.Addr) string {
	return ipmShardPrefix(IPMShard(ip)) + "m:" + string(ipBytes(ip))
}

// IPMGlobalTotalKey is a shard's all-time counters (HASH metric -> IPs).
func IPMGlobalTotalKey(shard int) string { return ipmShardPrefix(shard) + "n" }

// IPMGlobalMonthKey is a shard's counters of one month (HASH metric ->
// IPs); month is "YYYY-MM".
func IPMGlobalMonthKey(shard int, month string) string {
	return ipmShardPrefix(shard) + "n:" + month
}

// IPMTorrentMarkersKey is an IP's markers on one torrent.
func IPMTorrentMarkersKey(hash bittorrent.InfoHash, ip netip.Addr) string {
	return ipmTorrentPrefix(hash) + "m:" + string(ipBytes(ip))
}

// IPMTorrentTotalKey is a torrent's all-time counters.
func IPMTorrentTotalKey(hash bittorrent.InfoHash) string { return ipmTorrentPrefix(hash) + "n" }

// IPMTorrentMonthKey is a torrent's counters of one month.
func IPMTorrentMonthKey(hash bittorrent.InfoHash, month string) string {
	return ipmTorrentPrefix(hash) + "n:" + month
}

// IPMGlobalKeys are ipm_register.lua's KEYS for the global scope.
func IPMGlobalKeys(ip netip.Addr, month string) []string {
	shard := IPMShard(ip)
	return []string{IPMGlobalMarkersKey(ip), IPMGlobalTotalKey(shard), IPMGlobalMonthKey(shard, month)}
}

// IPMTorrentKeys are ipm_register.lua's KEYS for a torrent's scope.
func IPMTorrentKeys(hash bittorrent.InfoHash, ip netip.Addr, month string) []string {
	return []string{IPMTorrentMarkersKey(hash, ip), IPMTorrentTotalKey(hash), IPMTorrentMonthKey(hash, month)}
}

// ---- orphan cleanup (package orphans) ----
//
// Cleanup's own keys are global: no script touches them.

// OrphanCursorsKey holds each walk's cursor (HASH "<walk>:<node>" ->
// cursor), so a pass goes on where the last tick stopped, on any
// frontend. Two cleanups sharing a cursor at worst read a page twice.
const OrphanCursorsKey = Prefix + "orphans:cursors"

// OrphanPassesKey counts each walk's finished passes (HASH "<walk>" ->
// n).
const OrphanPassesKey = Prefix + "orphans:passes"

// ---- orphan cleanup's due sets (package orphans, btstore/due.go) ----

// OrphanDueShards is how many shards each orphan due set has. It is
// fixed: changing it would strand the entries of the shards that went.
const OrphanDueShards = 16

// OrphanDueShard is the shard of a torrent's entry in the torrents' due set.
func OrphanDueShard(hash bittorrent.InfoHash) int { return int(hash[0]) % OrphanDueShards }

// OrphanUserDueShard is the shard of a user's entry in the users' due set.
func OrphanUserDueShard(userID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(userID))
	return int(h.Sum32() % OrphanDueShards)
}

// OrphanDueKey is one shard of the torrents that may have become orphans
// (ZSET hex info-hash -> when cleanup should look, ms). Each shard is its
// own slot; no script touches it, so it needs no torrent's tag.
func OrphanDueKey(shard int) string { return Prefix + "{orphans:due:" + strconv.Itoa(shard) + "}" }

// OrphanUserDueKey is one shard of the users whose set entries may name
// a record that went (ZSET user id -> when cleanup should look, ms).
func OrphanUserDueKey(shard int) string {
	return Prefix + "{orphans:udue:" + strconv.Itoa(shard) + "}"
}
