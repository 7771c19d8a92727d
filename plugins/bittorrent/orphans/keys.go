package orphans

import (
	"encoding/hex"
	"strings"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Cleanup's own keys are global (no script touches them) and the records
// it reads are named by package swarm and package scoring; the patterns
// and suffixes below must match their key builders (keys_test.go checks).

const keyPrefix = "hoard:bt:"

// CursorsKey holds each walk's cursor (HASH "<walk>:<node>" -> cursor),
// so a pass goes on where the last tick stopped, on any frontend. Two
// cleanups sharing a cursor at worst read a page twice.
const CursorsKey = keyPrefix + "orphans:cursors"

// PassesKey counts each walk's finished passes (HASH "<walk>" -> n).
const PassesKey = keyPrefix + "orphans:passes"

// The SCAN patterns of the walks: every key under a torrent's hash tag,
// and every key of a user (the walk reads the versions hashes and the
// listings of passkeys).
const (
	torrentPattern = keyPrefix + "{*}:*"
	userKeyPattern = keyPrefix + "user:{*}:*"
)

// The kinds of torrent keys cleanup handles, by the suffix after "}:".
const (
	kindTorrent = "torrent"
	kindUsers   = "users"
	kindUser    = "user"
	kindPeer    = "peer"
	kindTimeout = "timeout"
	kindReaper  = "reaper"
	kindSeen    = "seen"
	// the reaper's snatchers set and claims
	kindSnatchers = "snatchers"
	kindClaims    = "claims"
	// scoring's record and the keys that go with it: the record, history,
	// trackers and their stamp are fixed KEYS of every call (the kinds only
	// bring the torrent to the walk); an external tracker's seen set
	// ("score:seen:<id>", not the own swarm's "score:seen") and pending IPs
	// are passed by name.
	kindScoreFixed = "score-fixed"
	kindSourceSeen = "source_seen"
	kindPending    = "pending"
	// the torrent's unique-IP metrics (package ipmetrics): counters and
	// markers under "ipm:"
	kindIPM = "ipm"
)

// parseTorrentKey reads a torrent key's info-hash and kind; ok is false
// for keys cleanup leaves alone (the swarm's role hashes and deadlines,
// anything unknown).
func parseTorrentKey(key string) (hash bittorrent.InfoHash, kind string, ok bool) {
	rest, found := strings.CutPrefix(key, keyPrefix+"{")
	if !found || len(rest) < 42 || rest[40:42] != "}:" {
		return hash, "", false
	}
	if _, err := hex.Decode(hash[:], []byte(rest[:40])); err != nil || strings.ToLower(rest[:40]) != rest[:40] {
		return hash, "", false
	}
	switch suffix := rest[42:]; {
	case suffix == "torrent":
		kind = kindTorrent
	case suffix == "users":
		kind = kindUsers
	case suffix == "reaper":
		kind = kindReaper
	case suffix == "score:seen":
		kind = kindSeen
	case suffix == "snatchers":
		kind = kindSnatchers
	case suffix == "reaper:claims":
		kind = kindClaims
	case suffix == "score" || suffix == "score:history" || suffix == "score:trackers" || suffix == "score:trackers_at":
		kind = kindScoreFixed
	case strings.HasPrefix(suffix, "score:seen:") && len(suffix) > len("score:seen:"):
		kind = kindSourceSeen
	case strings.HasPrefix(suffix, "score:pending:") && len(suffix) > len("score:pending:"):
		kind = kindPending
	case strings.HasPrefix(suffix, "ipm:"):
		kind = kindIPM
	case strings.HasPrefix(suffix, "user:"):
		kind = kindUser
	case strings.HasPrefix(suffix, "peer:"):
		kind = kindPeer
	case strings.HasPrefix(suffix, "timeout:"):
		kind = kindTimeout
	default:
		return hash, "", false
	}
	return hash, kind, true
}

// userFromKey reads the user id from a user's key with the given suffix
// (UserVersionsKey: "versions", UserPasskeysKey: "passkeys").
func userFromKey(key, suffix string) (string, bool) {
	rest, found := strings.CutPrefix(key, keyPrefix+"user:{")
	if !found {
		return "", false
	}
	user, found := strings.CutSuffix(rest, "}:"+suffix)
	if !found || user == "" || strings.ContainsAny(user, "{}") {
		return "", false
	}
	switch suffix {
	case "versions":
		return user, swarm.UserVersionsKey(user) == key
	case "passkeys":
		return user, swarm.UserPasskeysKey(user) == key
	}
	return "", false
}

// torrentFixedKeys are orphan_torrent.lua's first twelve KEYS.
func torrentFixedKeys(hash bittorrent.InfoHash) []string {
	return []string{swarm.TorrentKey(hash), swarm.SeedersKey(hash), swarm.LeechersKey(hash),
		swarm.TorrentUsersKey(hash), swarm.ReaperKey(hash), scoring.SeenKey(hash),
		swarm.SnatchersKey(hash), swarm.ReaperClaimsKey(hash),
		scoring.ScoreKey(hash), scoring.HistoryKey(hash), scoring.TrackersKey(hash), scoring.TrackersAtKey(hash)}
}

// userKeys are orphan_user.lua's KEYS.
func userKeys(user string) []string {
	return []string{swarm.UserSetKey(user, swarm.UserActive), swarm.UserSetKey(user, swarm.UserComplete),
		swarm.UserSetKey(user, swarm.UserIncomplete), swarm.UserSetKey(user, swarm.UserHnR),
		swarm.UserVersionsKey(user), swarm.UserTorrentsKey(user)}
}
