package ipmetrics

import (
	"encoding/hex"
	"hash/fnv"
	"net/netip"
	"strconv"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Key layout. Every key one script touches shares one hash tag:
//
//   - global metrics live in Shards shards, {ipm:<n>}, an IP in the shard
//     of a hash of its bytes: the IP's markers and the shard's counters
//     are one slot, and the registrations of all IPs spread over Shards
//     slots instead of pinning the tracker to one. A global count is the
//     sum over the shards (an IP is in exactly one, so nothing is counted
//     twice);
//   - per-torrent metrics live under the torrent's own tag, {<info-hash
//     hex>}, beside its swarm (swarm.TorrentKey).
//
// Markers are one HASH per IP (per shard or per torrent), a field per
// metric; counters are one HASH per scope and period, a field per metric.
// All key names are built here.

const keyPrefix = "hoard:bt:"

// Shards is how many global shards there are. It is fixed: changing it
// would move IPs to shards whose markers do not know them, counting them
// again.
const Shards = 16

// ipBytes is the IP as stored: 4 bytes for IPv4 (and IPv4-mapped IPv6),
// 16 for IPv6.
func ipBytes(ip netip.Addr) []byte { return ip.Unmap().AsSlice() }

// shardOf is the global shard of an IP.
func shardOf(ip netip.Addr) int {
	h := fnv.New32a()
	_, _ = h.Write(ipBytes(ip))
	return int(h.Sum32() % Shards)
}

func shardPrefix(shard int) string { return keyPrefix + "{ipm:" + strconv.Itoa(shard) + "}:" }

func torrentPrefix(hash bittorrent.InfoHash) string {
	return keyPrefix + "{" + hex.EncodeToString(hash[:]) + "}:ipm:"
}

// The raw IP bytes follow the hash tag's closing brace, so a brace among
// them cannot change the slot. Markers ("m:") and counters ("n") never
// collide: the IP has 4 or 16 bytes after "m:".

// GlobalMarkersKey is an IP's global markers (HASH marker field -> expiry).
func GlobalMarkersKey(ip netip.Addr) string {
	return shardPrefix(shardOf(ip)) + "m:" + string(ipBytes(ip))
}

// GlobalTotalKey is a shard's all-time counters (HASH metric -> IPs).
func GlobalTotalKey(shard int) string { return shardPrefix(shard) + "n" }

// GlobalMonthKey is a shard's counters of one month (HASH metric -> IPs);
// month is "YYYY-MM".
func GlobalMonthKey(shard int, month string) string { return shardPrefix(shard) + "n:" + month }

// TorrentMarkersKey is an IP's markers on one torrent.
func TorrentMarkersKey(hash bittorrent.InfoHash, ip netip.Addr) string {
	return torrentPrefix(hash) + "m:" + string(ipBytes(ip))
}

// TorrentTotalKey is a torrent's all-time counters.
func TorrentTotalKey(hash bittorrent.InfoHash) string { return torrentPrefix(hash) + "n" }

// TorrentMonthKey is a torrent's counters of one month.
func TorrentMonthKey(hash bittorrent.InfoHash, month string) string {
	return torrentPrefix(hash) + "n:" + month
}

// globalKeys and torrentKeys are ipm_register.lua's KEYS.
func globalKeys(ip netip.Addr, month string) []string {
	shard := shardOf(ip)
	return []string{GlobalMarkersKey(ip), GlobalTotalKey(shard), GlobalMonthKey(shard, month)}
}

func torrentKeys(hash bittorrent.InfoHash, ip netip.Addr, month string) []string {
	return []string{TorrentMarkersKey(hash, ip), TorrentTotalKey(hash), TorrentMonthKey(hash, month)}
}
