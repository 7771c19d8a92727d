package btstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// The codes torrent_remove.lua returns when it refuses, named once here
// and handed to the script as the Lua table R.
const (
	codeRegistered = -1
	codePeers      = -2
)

var removeCodes = map[string]int64{"REGISTERED": codeRegistered, "PEERS": codePeers}

// LuaCodes is the Lua table R of a script's result codes, prepended to
// the script (Script's parts), so Go and Lua name each code once.
func LuaCodes(codes map[string]int64) string {
	names := make([]string, 0, len(codes))
	for name := range codes {
		names = append(names, name)
	}
	sort.Strings(names)
	fields := make([]string, len(names))
	for i, name := range names {
		fields[i] = fmt.Sprintf("%s = %d", name, codes[name])
	}
	return "local R = {" + strings.Join(fields, ", ") + "}\n"
}

var removeScript = Script("torrent_remove.lua", LuaCodes(removeCodes), FedRecord())

// Errors RemoveTorrent refuses with; nothing was deleted.
var (
	ErrRegistered = errors.New("the torrent is registered")
	ErrHasPeers   = errors.New("the torrent's swarm has peers")
)

// RecordKey is one stored record: its kind and its key.
type RecordKey struct {
	Kind Kind
	Key  string
}

// nodeFor is the server that holds key: the cluster's master for its
// slot, or the one server.
func nodeFor(ctx context.Context, rdb redis.UniversalClient, key string) (redis.UniversalClient, error) {
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.MasterForKey(ctx, key)
	}
	return rdb, nil
}

// ListTorrentRecords lists every record a torrent owns, of every kind in
// torrentRecords, sorted by kind then key. It scans the torrent's node
// for its hash tag, so it costs a walk of that node's keyspace: it is
// for operators and tests, not for a hot path.
func ListTorrentRecords(ctx context.Context, rdb redis.UniversalClient, hash bittorrent.InfoHash) ([]RecordKey, error) {
	node, err := nodeFor(ctx, rdb, TorrentKey(hash))
	if err != nil {
		return nil, fmt.Errorf("btstore.ListTorrentRecords: %w", err)
	}
	var records []RecordKey
	iter := node.Scan(ctx, 0, TorrentPattern(hash), 1000).Iterator()
	for iter.Next(ctx) {
		got, kind, ok := ParseTorrentKey(iter.Val())
		if ok && got == hash {
			records = append(records, RecordKey{Kind: kind, Key: iter.Val()})
		}
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("btstore.ListTorrentRecords: %w", err)
	}
	slices.SortFunc(records, func(a, b RecordKey) int {
		if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return records, nil
}

// ListUserRecords lists a user's keys in its own slot and its records on
// torrents that its torrents map names (UserTorrentsKey: every torrent
// whose state reached the user's sets). A record older than that map, or
// whose state never reached the sets, is found only by a scan of every
// node (UserRecordsPattern).
func ListUserRecords(ctx context.Context, rdb redis.UniversalClient, userID string) ([]string, error) {
	own := UserOwnKeys(userID)
	pipe := rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(own))
	for i, key := range own {
		exists[i] = pipe.Exists(ctx, key)
	}
	torrents := pipe.HVals(ctx, UserTorrentsKey(userID))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("btstore.ListUserRecords: %w", err)
	}
	var keys []string
	for i, key := range own {
		if exists[i].Val() == 1 {
			keys = append(keys, key)
		}
	}
	var candidates []string
	seen := map[string]bool{}
	for _, hexHash := range torrents.Val() {
		hash, ok := ParseHexInfoHash(hexHash)
		if key := UserTorrentKey(hash, userID); ok && !seen[key] {
			seen[key] = true
			candidates = append(candidates, key)
		}
	}
	pipe = rdb.Pipeline()
	exists = exists[:0]
	for _, key := range candidates {
		exists = append(exists, pipe.Exists(ctx, key))
	}
	if len(candidates) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("btstore.ListUserRecords: %w", err)
		}
	}
	for i, key := range candidates {
		if exists[i].Val() == 1 {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// RemoveTorrent deletes a torrent that is not registered and has no peers,
// with every record ListTorrentRecords finds, in one script in its slot;
// it returns how many keys went. A registered torrent (ErrRegistered) or
// one with peers (ErrHasPeers) is left whole. Index entries outside the
// slot (the registry, the sorted and score indexes, the due index) are
// not the torrent's records: their owners drop entries whose torrent is
// gone.
func RemoveTorrent(ctx context.Context, rdb redis.UniversalClient, hash bittorrent.InfoHash) (int, error) {
	n, _, err := RemoveTorrentFed(ctx, rdb, hash)
	return n, err
}

// DeletedUserRecord is a user's record on a torrent that a delete removed,
// with what the delete script read of it as it went: Fields are w,
// last_announce, seq, uploaded, downloaded, up_extra, down_extra, seed_ms,
// leech_ms and snatched, as stored. Only records with a numbered change
// (seq > 0) are reported: swarm delivers their rows when their writer's
// "fed up to" is before last_announce (the lead's decision 5, s43).
type DeletedUserRecord struct {
	Key    string
	Fields []any
}

// RemoveTorrentFed is RemoveTorrent, and returns the users' records it
// deleted (DeletedUserRecord).
func RemoveTorrentFed(ctx context.Context, rdb redis.UniversalClient, hash bittorrent.InfoHash) (int, []DeletedUserRecord, error) {
	records, err := ListTorrentRecords(ctx, rdb, hash)
	if err != nil {
		return 0, nil, err
	}
	keys := []string{TorrentKey(hash), SeedersKey(hash), LeechersKey(hash)}
	var users []string
	for _, r := range records {
		// The site's deletion reason outlives the records on purpose:
		// clients read it until it expires by itself.
		if r.Kind == KindDeleted {
			continue
		}
		if r.Key == keys[0] || r.Key == keys[1] || r.Key == keys[2] {
			continue
		}
		if r.Kind == KindUser {
			users = append(users, r.Key) // last: torrent_remove.lua reads them
			continue
		}
		keys = append(keys, r.Key)
	}
	first := len(keys) + 1
	keys = append(keys, users...)
	reply, err := luascript.Run(ctx, rdb, removeScript, keys, first)
	if err != nil {
		return 0, nil, fmt.Errorf("btstore.RemoveTorrent: %w", err)
	}
	switch code, _ := reply.(int64); code {
	case codeRegistered:
		return 0, nil, fmt.Errorf("btstore.RemoveTorrent %s: %w", HexInfoHash(hash), ErrRegistered)
	case codePeers:
		return 0, nil, fmt.Errorf("btstore.RemoveTorrent %s: %w", HexInfoHash(hash), ErrHasPeers)
	}
	out, ok := reply.([]any)
	if !ok || len(out)%2 != 1 {
		return 0, nil, fmt.Errorf("btstore.RemoveTorrent: a reply of %T", reply)
	}
	n, _ := out[0].(int64)
	var deleted []DeletedUserRecord
	for i := 1; i+1 < len(out); i += 2 {
		at, _ := out[i].(int64)
		fields, _ := out[i+1].([]any)
		if at < 1 || int(at) > len(keys) || len(fields) != 10 {
			return int(n), deleted, fmt.Errorf("btstore.RemoveTorrent: a record's reply at %d", at)
		}
		deleted = append(deleted, DeletedUserRecord{Key: keys[at-1], Fields: fields})
	}
	return int(n), deleted, nil
}
