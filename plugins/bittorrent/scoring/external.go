package scoring

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/announcer"
)

var trackersScript = loadScript("score_trackers.lua")

// maxTrackerPeers bounds the peers kept from one tracker's reply (their
// IPs are looked up and staged); more are only counted.
const maxTrackerPeers = announcer.MaxMaxPeers

// pendingTTL is how long a worker's staged IPs wait for their round to be
// applied; staged IPs whose round never applies (a tracker taken off in
// between) go by themselves.
const pendingTTL = 24 * time.Hour

// Tracker is an external tracker registered for a torrent.
type Tracker struct {
	URL      string `json:"url"`
	MaxPeers int    `json:"max_peers"`
}

// UnmarshalJSON refuses unknown fields: a misspelt "max_peers" must not
// silently become the default.
func (t *Tracker) UnmarshalJSON(b []byte) error {
	type plain Tracker
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("a tracker is {\"url\": \"udp://host:port/announce\", \"max_peers\": 50}: %w", err)
	}
	*t = Tracker(p)
	return nil
}

// CheckTrackers validates a torrent's list of external trackers: at most
// announcer.MaxTrackers, each URL as announcer.ParseURL wants it and once,
// max peers 0 (the default, 50) to announcer.MaxMaxPeers. It returns the
// list with the defaults filled in.
func CheckTrackers(trackers []Tracker) ([]Tracker, error) {
	if len(trackers) > announcer.MaxTrackers {
		return nil, fmt.Errorf("%d trackers: a torrent has at most %d: %w", len(trackers), announcer.MaxTrackers, ErrInvalid)
	}
	out := make([]Tracker, 0, len(trackers))
	seen := map[string]bool{}
	for _, t := range trackers {
		if _, err := announcer.ParseURL(t.URL); err != nil {
			why := strings.TrimSuffix(err.Error(), ": "+announcer.ErrInvalid.Error())
			return nil, fmt.Errorf("%s: %w", why, ErrInvalid)
		}
		if seen[t.URL] {
			return nil, fmt.Errorf("tracker %q is listed twice: %w", t.URL, ErrInvalid)
		}
		seen[t.URL] = true
		switch {
		case t.MaxPeers == 0:
			t.MaxPeers = announcer.DefaultMaxPeers
		case t.MaxPeers < 0 || t.MaxPeers > announcer.MaxMaxPeers:
			return nil, fmt.Errorf("tracker %q: max peers %d is not 1 to %d: %w", t.URL, t.MaxPeers, announcer.MaxMaxPeers, ErrInvalid)
		}
		out = append(out, t)
	}
	return out, nil
}

// CheckTrackers is the package's CheckTrackers plus the scorer's target
// policy: a tracker whose host is a literal address (or localhost) the
// policy refuses is refused now, naming it. A name is checked on what it
// resolves to at each announce.
func (s *Scorer) CheckTrackers(trackers []Tracker) ([]Tracker, error) {
	checked, err := CheckTrackers(trackers)
	if err != nil {
		return nil, err
	}
	for _, t := range checked {
		u, _ := announcer.ParseURL(t.URL) // parsed by CheckTrackers
		if err := s.policy.Targets.CheckHost(u.Hostname()); err != nil {
			return nil, fmt.Errorf("tracker %q: %v: %w", t.URL, err, ErrInvalid)
		}
	}
	return checked, nil
}

// SetTrackers replaces the external trackers of a torrent (an empty list
// clears them), in one step, after checking the whole list (the scorer's
// CheckTrackers): bad input changes nothing. It returns the checked list
// and how many trackers the torrent had before.
func (s *Scorer) SetTrackers(ctx context.Context, hash bittorrent.InfoHash, trackers []Tracker) ([]Tracker, int, error) {
	checked, err := s.CheckTrackers(trackers)
	if err != nil {
		return nil, 0, err
	}
	args := make([]any, 0, 1+2*len(checked))
	args = append(args, s.nowMillis())
	for _, t := range checked {
		args = append(args, t.URL, t.MaxPeers)
	}
	before, err := trackersScript.Run(ctx, s.rdb, []string{btstore.ScoreTrackersKey(hash), btstore.ScoreTrackersAtKey(hash)}, args...).Int()
	if err != nil {
		return nil, 0, fmt.Errorf("scoring.SetTrackers: %w", err)
	}
	return checked, before, nil
}

// Trackers lists the external trackers of a torrent, by URL.
func (s *Scorer) Trackers(ctx context.Context, hash bittorrent.InfoHash) ([]Tracker, error) {
	m, err := s.rdb.HGetAll(ctx, btstore.ScoreTrackersKey(hash)).Result()
	if err != nil {
		return nil, fmt.Errorf("scoring.Trackers: %w", err)
	}
	out := make([]Tracker, 0, len(m))
	for url, max := range m {
		out = append(out, trackerOf(url, max))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URL < out[j].URL })
	return out, nil
}

// trackerOf reads a trackers field; a max peers that is not a positive
// number (never written so) is the default.
func trackerOf(url, max string) Tracker {
	n, err := strconv.Atoi(max)
	if err != nil || n < 1 {
		n = announcer.DefaultMaxPeers
	}
	return Tracker{URL: url, MaxPeers: n}
}

// announceAll announces the torrent to each of its trackers at once
// (each bounded by the tracker timeout), counts the new IPs among each
// reply's peers against that tracker's seen set, and stages them for the
// round. A tracker that fails is reported with its error; only a worker
// being stopped (ctx) or Redis failing is an error here, so the item goes
// back to the queue rather than counting as a tracker's failure.
func (s *Scorer) announceAll(ctx context.Context, hash bittorrent.InfoHash, round int64, trackers []Tracker) ([]TrackerResult, error) {
	if len(trackers) == 0 {
		return nil, nil
	}
	results := make([]TrackerResult, len(trackers))
	replies := make([]announcer.Reply, len(trackers))
	var wg sync.WaitGroup
	for i, t := range trackers {
		wg.Go(func() {
			results[i] = TrackerResult{URL: t.URL, Max: int64(t.MaxPeers)}
			reply, err := s.announcer.Announce(ctx, t.URL, hash)
			if err != nil {
				msg := err.Error()
				if len(msg) > maxErrorLen {
					msg = msg[:maxErrorLen-3] + "..."
				}
				results[i].Error = msg
				return
			}
			replies[i] = reply
			results[i].Peers = int64(reply.Total)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scoring: announcing to external trackers: %w", err)
	}
	cutoff := s.nowMillis() - s.policy.NewWindow.Milliseconds()
	for i := range results {
		if results[i].Error != "" || len(replies[i].Peers) == 0 {
			continue
		}
		ips := distinctIPs(replies[i].Peers)
		id := btstore.SourceID(results[i].URL)
		scores, err := s.rdb.ZMScore(ctx, btstore.SourceSeenKey(hash, id), ips...).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("scoring: seen IPs: %w", err)
		}
		for j := range ips {
			if j >= len(scores) || scores[j] == 0 || scores[j] <= float64(cutoff) {
				results[i].New++
			}
		}
		pending := make([]redis.Z, len(ips))
		for j, ip := range ips {
			pending[j] = redis.Z{Score: float64(round), Member: ip}
		}
		// MULTI (one key, one slot): a worker killed between the two
		// would leave the staged IPs without their TTL.
		pipe := s.rdb.TxPipeline()
		pipe.ZAdd(ctx, btstore.ScorePendingKey(hash, id), pending...)
		pipe.PExpire(ctx, btstore.ScorePendingKey(hash, id), pendingTTL)
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("scoring: staging IPs: %w", err)
		}
	}
	return results, nil
}

// distinctIPs returns each peer's IP once, as the raw 4 or 16 bytes the
// seen sets hold (the own swarm's format).
func distinctIPs(peers []netip.AddrPort) []string {
	seen := make(map[netip.Addr]bool, len(peers))
	out := make([]string, 0, len(peers))
	for _, p := range peers {
		addr := p.Addr().Unmap()
		if seen[addr] {
			continue
		}
		seen[addr] = true
		out = append(out, string(addr.AsSlice()))
	}
	return out
}
