package swarm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The deny lists refuse info-hashes and clients (peer_id prefixes) in
// either mode, as chihaya's approval middleware and opentracker's
// blacklist do: an announce of a denied torrent, or from a denied client,
// gets a failure reason naming why, and a scrape gets zero counts for a
// denied torrent. Every frontend caches both lists (Config.CacheTTL); a
// change made through a Store drops that copy and publishes a hint, so
// the next announce on every frontend sees it.

// Denied is one entry of a deny list: an info-hash (hex) or a peer_id
// prefix, and the reason clients read ("" when none was given).
type Denied struct {
	Key    string
	Reason string
}

// ErrNotListed: the entry to take off a deny list is not on it.
var ErrNotListed = errors.New("not on the deny list")

type denyLists struct {
	torrents map[bittorrent.InfoHash]string
	clients  []Denied // prefix -> reason
}

type denyCache struct{ refreshed[denyLists] }

func (s *Store) loadDenyLists(ctx context.Context) (denyLists, error) {
	pipe := s.rdb.Pipeline()
	torrents := pipe.HGetAll(ctx, btstore.DenyTorrentsKey)
	clients := pipe.HGetAll(ctx, btstore.DenyClientsKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return denyLists{}, fmt.Errorf("swarm: deny lists: %w", err)
	}
	lists := denyLists{torrents: make(map[bittorrent.InfoHash]string, len(torrents.Val()))}
	for hexHash, reason := range torrents.Val() {
		if hash, ok := btstore.ParseHexInfoHash(hexHash); ok {
			lists.torrents[hash] = reason
		}
	}
	for prefix, reason := range clients.Val() {
		lists.clients = append(lists.clients, Denied{Key: prefix, Reason: reason})
	}
	return lists, nil
}

func (s *Store) denyLists(ctx context.Context) (denyLists, error) {
	return s.deny.get(ctx, s.clock.Now(), s.cfg.CacheTTL, s.loadDenyLists)
}

// denied refuses an announce of a denied torrent or from a denied client.
func (s *Store) denied(ctx context.Context, hash bittorrent.InfoHash, peer bittorrent.PeerID) error {
	lists, err := s.denyLists(ctx)
	if err != nil {
		return err
	}
	if reason, ok := lists.torrents[hash]; ok {
		s.counters.denied.Add(1)
		return &bittorrent.ClientError{Reason: withReason("this torrent is not allowed on this tracker", reason)}
	}
	id := string(peer[:])
	for _, c := range lists.clients {
		if strings.HasPrefix(id, c.Key) {
			s.counters.denied.Add(1)
			return &bittorrent.ClientError{Reason: withReason("your client is not allowed on this tracker", c.Reason)}
		}
	}
	return nil
}

func withReason(refusal, reason string) string {
	if reason == "" {
		return refusal
	}
	return refusal + ": " + reason
}

// Denials counts the announces this Store refused by a deny list.
func (s *Store) Denials() int64 { return s.counters.denied.Load() }

// DenyTorrent puts an info-hash on the deny list (again: changes its
// reason). reason may be empty.
func (s *Store) DenyTorrent(ctx context.Context, hash bittorrent.InfoHash, reason string) error {
	return s.denyAdd(ctx, btstore.DenyTorrentsKey, btstore.HexInfoHash(hash), reason)
}

// AllowTorrent takes an info-hash off the deny list, or ErrNotListed.
func (s *Store) AllowTorrent(ctx context.Context, hash bittorrent.InfoHash) error {
	return s.denyRemove(ctx, btstore.DenyTorrentsKey, btstore.HexInfoHash(hash))
}

// DenyClient puts a peer_id prefix (1-20 bytes, e.g. "-XL0012-") on the
// deny list. reason may be empty.
func (s *Store) DenyClient(ctx context.Context, prefix, reason string) error {
	if prefix == "" || len(prefix) > maxPrefixLen {
		return fmt.Errorf("swarm: client prefix must be 1-%d bytes: %w", maxPrefixLen, ErrInvalid)
	}
	return s.denyAdd(ctx, btstore.DenyClientsKey, prefix, reason)
}

// AllowClient takes a peer_id prefix off the deny list, or ErrNotListed.
func (s *Store) AllowClient(ctx context.Context, prefix string) error {
	return s.denyRemove(ctx, btstore.DenyClientsKey, prefix)
}

func (s *Store) denyAdd(ctx context.Context, key, field, reason string) error {
	if reason != "" {
		if err := CheckReason(reason); err != nil {
			return err
		}
	}
	if err := s.rdb.HSet(ctx, key, field, reason).Err(); err != nil {
		return fmt.Errorf("swarm: deny: %w", err)
	}
	s.deny.invalidate()
	s.publishHint(ctx, hintDeny)
	return nil
}

func (s *Store) denyRemove(ctx context.Context, key, field string) error {
	n, err := s.rdb.HDel(ctx, key, field).Result()
	if err != nil {
		return fmt.Errorf("swarm: deny: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("swarm: %q: %w", field, ErrNotListed)
	}
	s.deny.invalidate()
	s.publishHint(ctx, hintDeny)
	return nil
}

// DenyLists reads both deny lists from Redis (not the cache), each
// sorted: torrents by hex info-hash, clients by prefix.
func (s *Store) DenyLists(ctx context.Context) (torrents, clients []Denied, err error) {
	pipe := s.rdb.Pipeline()
	t := pipe.HGetAll(ctx, btstore.DenyTorrentsKey)
	c := pipe.HGetAll(ctx, btstore.DenyClientsKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, fmt.Errorf("swarm.DenyLists: %w", err)
	}
	list := func(m map[string]string) []Denied {
		out := make([]Denied, 0, len(m))
		for k, v := range m {
			out = append(out, Denied{Key: k, Reason: v})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
		return out
	}
	return list(t.Val()), list(c.Val()), nil
}
