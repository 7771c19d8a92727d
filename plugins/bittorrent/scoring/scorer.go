package scoring

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/announcer"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var (
	countScript = loadScript("score_count.lua")
	applyScript = loadScript("score_apply.lua")
	trackScript = loadScript("score_track.lua")
	indexScript = loadScript("score_index.lua")
	cycleScript = loadScript("score_cycle.lua")
)

func loadScript(name string) *luascript.Script { return btstore.Script(name) }

// ItemPrefix starts every score item's name: "score:<hex info-hash>:<round>".
const ItemPrefix = "score:"

// ItemName is the item of a torrent's round.
func ItemName(hash bittorrent.InfoHash, round int64) string {
	return ItemPrefix + hex.EncodeToString(hash[:]) + ":" + strconv.FormatInt(round, 10)
}

// NextItem names the item of the torrent's next round, the one Round
// queues: a record's rounds count from its round_base (score_track.lua).
func (s *Scorer) NextItem(ctx context.Context, hash bittorrent.InfoHash) (string, error) {
	round, err := s.rdb.HGet(ctx, btstore.ScoreKey(hash), "round").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("scoring.NextItem: %w", err)
	}
	return ItemName(hash, round+1), nil
}

// ErrInvalid marks bad input (a malformed item name or result): retrying
// it can never succeed.
var ErrInvalid = errors.New("invalid")

// ParseItem reads a score item's info-hash and round.
func ParseItem(item string) (bittorrent.InfoHash, int64, error) {
	var hash bittorrent.InfoHash
	rest, ok := strings.CutPrefix(item, ItemPrefix)
	hexHash, roundText, found := strings.Cut(rest, ":")
	if !ok || !found {
		return hash, 0, fmt.Errorf("score item %q is not score:<info-hash>:<round>: %w", item, ErrInvalid)
	}
	parsed, err := swarm.ParseInfoHash(hexHash)
	if err != nil {
		return hash, 0, fmt.Errorf("score item %q: %w (%w)", item, ErrInvalid, err)
	}
	round, err := strconv.ParseInt(roundText, 10, 64)
	if err != nil || round < 1 {
		return hash, 0, fmt.Errorf("score item %q: round %q is not a positive integer: %w", item, roundText, ErrInvalid)
	}
	return parsed, round, nil
}

// Result is what a worker reports for one torrent: the peers it counted
// in hoard's own swarm, how many of them were new, and the swarm's max
// peers; and the same for each external tracker registered for the
// torrent.
type Result struct {
	Peers    int64           `json:"peers"`
	New      int64           `json:"new"`
	Max      int64           `json:"max"`
	Trackers []TrackerResult `json:"trackers,omitempty"`
}

// TrackerResult is one external tracker's part of a Result. Error is set
// when the tracker could not be reached or answered badly; its counts
// are then 0.
type TrackerResult struct {
	URL   string `json:"url"`
	Peers int64  `json:"peers"`
	New   int64  `json:"new"`
	Max   int64  `json:"max"`
	Error string `json:"error,omitempty"`
}

// maxErrorLen bounds a tracker's error text in a result (results travel
// through the host's event log, at most 16 KiB).
const maxErrorLen = 120

func (r Result) validate() error {
	if r.Peers < 0 || r.New < 0 || r.New > r.Peers || r.Max <= 0 {
		return fmt.Errorf("score result %+v: want 0 <= new <= peers and max > 0: %w", r, ErrInvalid)
	}
	if len(r.Trackers) > announcer.MaxTrackers {
		return fmt.Errorf("score result: %d trackers, at most %d: %w", len(r.Trackers), announcer.MaxTrackers, ErrInvalid)
	}
	for _, t := range r.Trackers {
		if t.URL == "" || len(t.URL) > announcer.MaxURLLen || t.Peers < 0 || t.New < 0 || t.New > t.Peers ||
			t.Max <= 0 || t.Max > announcer.MaxMaxPeers || len(t.Error) > maxErrorLen || (t.Error != "" && t.Peers != 0) {
			return fmt.Errorf("score result: tracker %.100q: want a URL, 0 <= new <= peers, 1 <= max <= %d, a short error and no peers with it: %w",
				t.URL, announcer.MaxMaxPeers, ErrInvalid)
		}
	}
	return nil
}

// Clock tells the scorer the time (swarm.Clock and queues.FakeClock fit).
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Scorer keeps the torrents' scores in Redis: it tracks torrents, counts a
// torrent's peers for a worker, applies results, and lists a cycle's
// items. It is safe for concurrent use.
type Scorer struct {
	rdb       redis.UniversalClient
	policy    Policy
	clock     Clock
	logger    *slog.Logger
	announcer *announcer.Client

	applied atomic.Int64 // results this process applied (torrents_processed)
}

// New returns a Scorer; a nil clock is the wall clock.
func New(rdb redis.UniversalClient, policy Policy, clock Clock, logger *slog.Logger) *Scorer {
	if clock == nil {
		clock = systemClock{}
	}
	if logger == nil {
		logger = slog.Default()
	}
	// A policy's -1 retries is none, as a negative count is the
	// announcer's.
	client := announcer.New(announcer.Config{Timeout: policy.TrackerTimeout, Retries: policy.TrackerRetries,
		NumWant: policy.TrackerNumWant, MaxPeers: maxTrackerPeers, Targets: policy.Targets})
	return &Scorer{rdb: rdb, policy: policy, clock: clock, logger: logger, announcer: client}
}

// Policy returns the scorer's policy.
func (s *Scorer) Policy() Policy { return s.policy }

func (s *Scorer) nowMillis() int64 { return s.clock.Now().UnixMilli() }

// Count counts a torrent's peers in hoard's own swarm and how many of
// their IPs are new on it. It only reads.
func (s *Scorer) Count(ctx context.Context, hash bittorrent.InfoHash) (Result, error) {
	r, _, err := s.count(ctx, hash)
	return r, err
}

// count is Count and the torrent's external trackers, in one round trip.
func (s *Scorer) count(ctx context.Context, hash bittorrent.InfoHash) (Result, []Tracker, error) {
	reply, err := countScript.Run(ctx, s.rdb, btstore.ScoreCountKeys(hash), s.nowMillis(), s.policy.NewWindow.Milliseconds()).Slice()
	if err != nil {
		return Result{}, nil, fmt.Errorf("scoring.Count: %w", err)
	}
	if len(reply) < 2 || len(reply)%2 != 0 {
		return Result{}, nil, fmt.Errorf("scoring.Count: script replied %v", reply)
	}
	peers, _ := reply[0].(int64)
	new, _ := reply[1].(int64)
	trackers := make([]Tracker, 0, len(reply)/2-1)
	for i := 2; i+1 < len(reply); i += 2 {
		url, _ := reply[i].(string)
		max, _ := reply[i+1].(string)
		trackers = append(trackers, trackerOf(url, max))
	}
	sort.Slice(trackers, func(i, j int) bool { return trackers[i].URL < trackers[j].URL })
	return Result{Peers: peers, New: new, Max: int64(s.policy.MaxPeers)}, trackers, nil
}

// Process is a worker's step for one item: count the torrent's peers in
// its own swarm and at each external tracker registered for it, and
// return the result to report with Done. It writes no score: only the
// IPs an external tracker gave, staged for the round (btstore.ScorePendingKey).
func (s *Scorer) Process(ctx context.Context, item string) (json.RawMessage, error) {
	hash, round, err := ParseItem(item)
	if err != nil {
		return nil, &itemError{err}
	}
	r, trackers, err := s.count(ctx, hash)
	if err != nil {
		return nil, err
	}
	if r.Trackers, err = s.announceAll(ctx, hash, round, trackers); err != nil {
		return nil, err
	}
	return marshalResult(r)
}

// marshalResult writes a result without HTML escaping: a URL's '&' stays
// one byte, so 16 trackers with 512-byte URLs and errors fit the host's
// 16 KiB result limit.
func marshalResult(r Result) (json.RawMessage, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return json.RawMessage(strings.TrimSuffix(b.String(), "\n")), nil
}

// ParseResult reads a worker's JSON result; unknown fields and trailing
// data are refused.
func ParseResult(raw json.RawMessage) (Result, error) {
	var r Result
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || dec.More() {
		return r, fmt.Errorf("score result %q: not {\"peers\":N,\"new\":M,\"max\":MAX}: %w", raw, ErrInvalid)
	}
	return r, r.validate()
}

// Outcome is what applying one result did.
type Outcome int

// Outcomes.
const (
	// NotApplied: an old round, or a torrent not being scored.
	NotApplied Outcome = iota
	// Kept: applied, the torrent stays with its new score.
	Kept
	// Removed: applied, the torrent left scoring.
	Removed
)

// Apply applies a worker's result for item to the torrent's score: one
// script in the torrent's slot (score_apply.lua), then the index entry in
// its shard's slot (score_index.lua). Both steps are idempotent, so a
// redelivered result, or one whose second step a crash cut off, settles
// the same way.
func (s *Scorer) Apply(ctx context.Context, item string, r Result) (Outcome, error) {
	hash, round, err := ParseItem(item)
	if err != nil {
		return NotApplied, err
	}
	if err := r.validate(); err != nil {
		return NotApplied, err
	}
	p := s.policy
	untrack := "0"
	if p.Untrack {
		untrack = "1"
	}
	now := s.nowMillis()
	args := []any{round, r.Peers, r.New, r.Max,
		p.NoPeers, p.FewPeers, p.Growing, p.Stale, p.NewFraction, p.MinScore,
		now, p.NewWindow.Milliseconds(), untrack, p.TombstoneTTL.Milliseconds(),
		p.TrackerGrace, p.History, len(r.Trackers)}
	sources := make([]string, len(r.Trackers))
	for i, t := range r.Trackers {
		sources[i] = btstore.SourceID(t.URL)
		args = append(args, sources[i], t.URL, t.Peers, t.New, t.Max, t.Error)
	}
	reply, err := applyScript.Run(ctx, s.rdb, btstore.ScoreApplyKeys(hash, sources), args...).Slice()
	if err != nil {
		return NotApplied, fmt.Errorf("scoring.Apply: %w", err)
	}
	code, score, rev, err := stateReply(reply)
	if err != nil {
		return NotApplied, fmt.Errorf("scoring.Apply: %w", err)
	}
	outcome := Outcome(code)
	if err := s.settleIndex(ctx, hash, rev, score, outcome != NotApplied); err != nil {
		return outcome, err
	}
	if outcome != NotApplied {
		s.applied.Add(1)
	}
	return outcome, nil
}

func stateReply(reply []any) (code int64, score string, rev int64, err error) {
	if len(reply) != 3 {
		return 0, "", 0, fmt.Errorf("script replied %v, want {code, score, rev}", reply)
	}
	code, _ = reply[0].(int64)
	score, _ = reply[1].(string)
	rev, _ = reply[2].(int64)
	return code, score, rev, nil
}

// settleIndex moves the torrent's index entry to score ("" removes it) at
// revision rev; counted says a result was applied now.
func (s *Scorer) settleIndex(ctx context.Context, hash bittorrent.InfoHash, rev int64, score string, counted bool) error {
	now := s.clock.Now().Unix() / 60
	flag := "0"
	if counted {
		flag = "1"
	}
	err := indexScript.Run(ctx, s.rdb, btstore.ScoreIndexKeys(btstore.ScoreShard(hash)), hex.EncodeToString(hash[:]), rev, score, flag, now, now-120).Err()
	if err != nil {
		return fmt.Errorf("scoring: index of %x: %w", hash, err)
	}
	return nil
}

// Track puts a torrent into scoring at 1.0 when it is new, or when it was
// removed and has been registered or announced since. It reports whether
// the torrent is scored now.
func (s *Scorer) Track(ctx context.Context, hash bittorrent.InfoHash) (bool, error) {
	private := "0"
	if s.policy.Private {
		private = "1"
	}
	reply, err := trackScript.Run(ctx, s.rdb, btstore.ScoreTrackKeys(hash), s.nowMillis(), private).Slice()
	if err != nil {
		return false, fmt.Errorf("scoring.Track: %w", err)
	}
	code, score, rev, err := stateReply(reply)
	if err != nil || code == 0 {
		return false, err
	}
	return true, s.settleIndex(ctx, hash, rev, score, false)
}

// Record is a torrent's score record, for tests, the admin API and logs.
type Record struct {
	State     string // "active", "removed" or "" (never scored)
	Score     float64
	Round     int64 // rounds applied (the item names count from RoundBase)
	RoundBase int64 // where the record's rounds began (see score_track.lua)
	Rev       int64
	LastPeers int64
	LastNew   int64
	Indexed   bool    // in its index shard
	IndexedAt float64 // the score the index shows
}

// Record reads a torrent's score record and its index entry.
func (s *Scorer) Record(ctx context.Context, hash bittorrent.InfoHash) (Record, error) {
	v, err := s.rdb.HMGet(ctx, btstore.ScoreKey(hash), "state", "score", "round", "rev", "last_peers", "last_new", "round_base").Result()
	if err != nil {
		return Record{}, fmt.Errorf("scoring.Record: %w", err)
	}
	str := func(i int) string { t, _ := v[i].(string); return t }
	num := func(i int) int64 { n, _ := strconv.ParseInt(str(i), 10, 64); return n }
	score, _ := strconv.ParseFloat(str(1), 64)
	rec := Record{State: str(0), Score: score, Round: num(2) - num(6), RoundBase: num(6), Rev: num(3), LastPeers: num(4), LastNew: num(5)}
	indexed, err := s.rdb.ZScore(ctx, btstore.ScoreIndexKey(btstore.ScoreShard(hash)), hex.EncodeToString(hash[:])).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return rec, fmt.Errorf("scoring.Record: %w", err)
	default:
		rec.Indexed, rec.IndexedAt = true, indexed
	}
	return rec, nil
}

// Scored counts the torrents in scoring: the index shards' sizes.
func (s *Scorer) Scored(ctx context.Context) (int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, btstore.ScoreIndexShards)
	for shard := range btstore.ScoreIndexShards {
		cmds[shard] = pipe.ZCard(ctx, btstore.ScoreIndexKey(shard))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("scoring.Scored: %w", err)
	}
	var n int64
	for _, cmd := range cmds {
		n += cmd.Val()
	}
	return n, nil
}

// ProcessedLastHour sums the results applied in the last 60 minutes by
// every frontend.
func (s *Scorer) ProcessedLastHour(ctx context.Context) (int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, btstore.ScoreIndexShards)
	for shard := range btstore.ScoreIndexShards {
		cmds[shard] = pipe.HGetAll(ctx, btstore.ScoreProcessedKey(shard))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("scoring.ProcessedLastHour: %w", err)
	}
	since := s.clock.Now().Unix()/60 - 59
	var n int64
	for _, cmd := range cmds {
		for minute, count := range cmd.Val() {
			m, _ := strconv.ParseInt(minute, 10, 64)
			c, _ := strconv.ParseInt(count, 10, 64)
			if m >= since {
				n += c
			}
		}
	}
	return n, nil
}

// Applied counts the results this process applied since it started.
func (s *Scorer) Applied() int64 { return s.applied.Load() }

// discoverBatch bounds one scan page and one pipeline of the discovery.
const discoverBatch = 500

// Discover tracks the torrents the tracker knows that are missing from the
// score index: every registered torrent (btstore.RegistryKey) and every
// swarm with peers (btstore.DueKey's shards). A torrent already indexed is
// skipped with one ZMSCORE per batch; the rest go through Track, which
// starts new ones at 1.0, brings back removed ones registered or
// announced since, and re-indexes scored ones whose index step a crash
// cut off. It returns how many it tracked.
func (s *Scorer) Discover(ctx context.Context) (int, error) {
	tracked := 0
	handle := func(hexes []string) error {
		n, err := s.trackMissing(ctx, hexes)
		tracked += n
		return err
	}
	var cursor uint64
	for {
		fields, next, err := s.rdb.HScan(ctx, btstore.RegistryKey, cursor, "", discoverBatch).Result()
		if err != nil {
			return tracked, fmt.Errorf("scoring.Discover: registry: %w", err)
		}
		hexes := make([]string, 0, len(fields)/2)
		for i := 0; i < len(fields); i += 2 {
			hexes = append(hexes, fields[i])
		}
		if err := handle(hexes); err != nil {
			return tracked, err
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	for shard := range btstore.DueShards {
		for start := int64(0); ; start += discoverBatch {
			hexes, err := s.rdb.ZRange(ctx, btstore.DueKey(shard), start, start+discoverBatch-1).Result()
			if err != nil {
				return tracked, fmt.Errorf("scoring.Discover: due index: %w", err)
			}
			if err := handle(hexes); err != nil {
				return tracked, err
			}
			if len(hexes) < discoverBatch {
				break
			}
		}
	}
	return tracked, nil
}

func (s *Scorer) trackMissing(ctx context.Context, hexes []string) (int, error) {
	byShard := map[int][]bittorrent.InfoHash{}
	for _, h := range hexes {
		hash, err := swarm.ParseInfoHash(h)
		if err != nil {
			continue
		}
		byShard[btstore.ScoreShard(hash)] = append(byShard[btstore.ScoreShard(hash)], hash)
	}
	tracked := 0
	for shard, hashes := range byShard {
		members := make([]string, len(hashes))
		for i, hash := range hashes {
			members[i] = hex.EncodeToString(hash[:])
		}
		scores, err := s.rdb.ZMScore(ctx, btstore.ScoreIndexKey(shard), members...).Result()
		if err != nil {
			return tracked, fmt.Errorf("scoring.Discover: %w", err)
		}
		for i, hash := range hashes {
			if scores[i] != 0 {
				continue // indexed (a score is never 0: it is removed below 0.005)
			}
			ok, err := s.Track(ctx, hash)
			if err != nil {
				return tracked, err
			}
			if ok {
				tracked++
			}
		}
	}
	return tracked, nil
}

// Round lists one item per scored torrent for the cycle (its id: the
// run's scheduled time, the same when the host runs the cycle again),
// with its score: "score:<hex>:<last applied round + 1>". A torrent whose
// item of that round still waits is rescored by the queue, not queued
// twice. Each torrent's round is recorded for the cycle (score_cycle.lua)
// before fn queues it: a run of the same cycle again, after the plugin
// died under it, lists the same item, and none for a torrent whose round
// of the cycle is already applied, so no torrent is scored twice in one
// cycle.
func (s *Scorer) Round(ctx context.Context, cycle time.Time, fn func(items []plugins.ScoredItem) error) (int, error) {
	cycleID := strconv.FormatInt(cycle.UnixMilli(), 10)
	queued := 0
	for shard := range btstore.ScoreIndexShards {
		var cursor uint64
		for {
			pairs, next, err := s.rdb.ZScan(ctx, btstore.ScoreIndexKey(shard), cursor, "", discoverBatch).Result()
			if err != nil {
				return queued, fmt.Errorf("scoring.Round: %w", err)
			}
			type entry struct {
				hash  bittorrent.InfoHash
				score float64
				round *redis.StringCmd
			}
			entries := make([]entry, 0, len(pairs)/2)
			pipe := s.rdb.Pipeline()
			for i := 0; i+1 < len(pairs); i += 2 {
				hash, err := swarm.ParseInfoHash(pairs[i])
				if err != nil {
					continue
				}
				score, _ := strconv.ParseFloat(pairs[i+1], 64)
				entries = append(entries, entry{hash: hash, score: score, round: pipe.HGet(ctx, btstore.ScoreKey(hash), "round")})
			}
			if len(entries) > 0 {
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
					return queued, fmt.Errorf("scoring.Round: %w", err)
				}
				last := make([]int64, len(entries))
				args := make([]any, 0, 1+2*len(entries))
				args = append(args, cycleID)
				for i, e := range entries {
					last[i], _ = strconv.ParseInt(e.round.Val(), 10, 64)
					args = append(args, hex.EncodeToString(e.hash[:]), last[i]+1)
				}
				rounds, err := cycleScript.Run(ctx, s.rdb, []string{btstore.ScoreCycleKey(shard)}, args...).Int64Slice()
				if err != nil {
					return queued, fmt.Errorf("scoring.Round: %w", err)
				}
				if len(rounds) != len(entries) {
					return queued, fmt.Errorf("scoring.Round: score_cycle.lua replied %d rounds for %d torrents", len(rounds), len(entries))
				}
				items := make([]plugins.ScoredItem, 0, len(entries))
				for i, e := range entries {
					round := rounds[i]
					if round <= last[i] {
						continue // its round of this cycle is applied
					}
					items = append(items, plugins.ScoredItem{Item: ItemName(e.hash, round), Score: e.score})
				}
				if len(items) > 0 {
					if err := fn(items); err != nil {
						return queued, err
					}
				}
				queued += len(items)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return queued, nil
}

// itemError marks an item that can never be processed (a malformed name).
type itemError struct{ err error }

func (e *itemError) Error() string { return e.err.Error() }
func (e *itemError) Unwrap() error { return e.err }

func asItemError(err error, target **itemError) bool { return errors.As(err, target) }
