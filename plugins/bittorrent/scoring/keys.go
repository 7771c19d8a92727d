package scoring

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// A torrent's scoring keys carry its hash tag, like the swarm store's
// (swarm.TorrentKey), so score_apply.lua reads the swarm and writes the
// score in one slot. The score index is sharded: IndexShards ZSETs, each
// its own hash tag, a torrent in the shard of its info-hash's first byte,
// so no one key pins the tracker to one cluster slot.

const keyPrefix = "hoard:bt:"

func torrentPrefix(hash bittorrent.InfoHash) string {
	return keyPrefix + "{" + hex.EncodeToString(hash[:]) + "}:"
}

// ScoreKey is a torrent's score record (HASH); score_apply.lua lists its
// fields.
func ScoreKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + "score" }

// SeenKey maps each IP seen on the torrent to when it was last seen (ZSET
// of 4- or 16-byte IPs -> ms), trimmed to the "new" window.
func SeenKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + "score:seen" }

// TrackersKey holds the external trackers registered for the torrent
// (HASH announce URL -> max peers).
func TrackersKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + "score:trackers" }

// TrackersAtKey is when the torrent's list of external trackers was last
// written (STRING, ms): the list's timestamp of interest for orphan
// cleanup, kept beside it so readers of the list see only trackers.
func TrackersAtKey(hash bittorrent.InfoHash) string {
	return torrentPrefix(hash) + "score:trackers_at"
}

// HistoryKey is the torrent's last rounds, newest first (LIST of JSON,
// trimmed to the history setting).
func HistoryKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + "score:history" }

// SourceID names an external tracker in key and field names: the first 8
// bytes of the SHA-1 of its URL, in hex (a URL may be 512 bytes and hold
// any character a key should not).
func SourceID(url string) string {
	sum := sha1.Sum([]byte(url))
	return hex.EncodeToString(sum[:8])
}

// SourceSeenKey maps each IP an external tracker gave for the torrent to
// when it was last seen there (ZSET, like SeenKey), expiring after the
// "new" window once nothing refreshes it.
func SourceSeenKey(hash bittorrent.InfoHash, source string) string {
	return torrentPrefix(hash) + "score:seen:" + source
}

// PendingKey holds the IPs a worker got from an external tracker, each
// with the round it got them in (ZSET IP -> round), until the round is
// applied and moves them into SourceSeenKey: the worker never writes what
// a round decides, and a result carries no IP lists.
func PendingKey(hash bittorrent.InfoHash, source string) string {
	return torrentPrefix(hash) + "score:pending:" + source
}

// IndexShards is how many shards the score index has. It is fixed:
// changing it would strand the entries of the shards that went away.
const IndexShards = 16

// shardOf is a torrent's index shard.
func shardOf(hash bittorrent.InfoHash) int { return int(hash[0]) % IndexShards }

func shardPrefix(shard int) string { return keyPrefix + "{score:" + strconv.Itoa(shard) + "}" }

// IndexKey is one shard of the score index (ZSET hex info-hash -> score).
func IndexKey(shard int) string { return shardPrefix(shard) }

// IndexRevsKey maps each hex info-hash of the shard to the revision of the
// torrent's score its entry shows (HASH), so a late step never moves it
// back.
func IndexRevsKey(shard int) string { return shardPrefix(shard) + ":revs" }

// ProcessedKey counts the results applied per minute (HASH unix minute ->
// count) for the torrents of the shard: torrents.processed over the last
// hour sums the last 60 minutes of every shard.
func ProcessedKey(shard int) string { return shardPrefix(shard) + ":processed" }

// scriptKeys builds the keys of the per-torrent scripts.
func applyKeys(hash bittorrent.InfoHash, trackers []TrackerResult) []string {
	keys := []string{ScoreKey(hash), swarm.TorrentKey(hash), swarm.SeedersKey(hash), swarm.LeechersKey(hash), SeenKey(hash),
		TrackersKey(hash), HistoryKey(hash)}
	for _, t := range trackers {
		id := SourceID(t.URL)
		keys = append(keys, SourceSeenKey(hash, id), PendingKey(hash, id))
	}
	return keys
}

func countKeys(hash bittorrent.InfoHash) []string {
	return []string{swarm.SeedersKey(hash), swarm.LeechersKey(hash), SeenKey(hash), TrackersKey(hash)}
}

func trackKeys(hash bittorrent.InfoHash) []string {
	return []string{ScoreKey(hash), swarm.TorrentKey(hash), HistoryKey(hash)}
}

func indexKeys(shard int) []string {
	return []string{IndexKey(shard), IndexRevsKey(shard), ProcessedKey(shard)}
}
