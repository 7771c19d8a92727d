package scoring

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The views (the admin API's and `hoard bt score`): one torrent's score,
// its sources and its history, and the top torrents by score. They only
// read.

// SourceRound is one source's part of a round.
type SourceRound struct {
	// Source is "swarm" (hoard's own) or the external tracker's URL.
	Source string  `json:"source"`
	Peers  int64   `json:"peers"`
	New    int64   `json:"new"`
	Max    int64   `json:"max"`
	Mult   float64 `json:"mult"`
	// Line is the source's score line after the round.
	Line float64 `json:"line"`
	// Error: the tracker could not be reached or answered badly; Fails
	// counts such rounds in a row.
	Error string `json:"error,omitempty"`
	Fails int    `json:"fails,omitempty"`
}

// Round is one applied round of a torrent's history.
type Round struct {
	Round    int64         `json:"round"`
	At       time.Time     `json:"at"`
	Score    float64       `json:"score"`
	Previous float64       `json:"previous"`
	Removed  bool          `json:"removed,omitempty"`
	Sources  []SourceRound `json:"sources"`
}

// Source is one of a torrent's sources as it stands: hoard's own swarm or
// a registered external tracker, its score line, and its last round.
type Source struct {
	Source   string `json:"source"`
	MaxPeers int    `json:"max_peers"`
	// Line is nil until the source's first round.
	Line    *float64   `json:"line"`
	Peers   int64      `json:"last_peers"`
	New     int64      `json:"last_new"`
	Mult    float64    `json:"last_mult,omitempty"`
	Error   string     `json:"last_error,omitempty"`
	Fails   int        `json:"fails,omitempty"`
	Applied *time.Time `json:"last_at,omitempty"`
}

// View is a torrent's score as the admin API shows it.
type View struct {
	InfoHash string   `json:"info_hash"`
	State    string   `json:"state"` // active, removed, or "" (never scored)
	Score    float64  `json:"score"`
	Round    int64    `json:"round"`
	Indexed  bool     `json:"indexed"`
	Sources  []Source `json:"sources"`
	History  []Round  `json:"history"`
}

// lineInfo is a src:<id> field of the score record (score_apply.lua).
type lineInfo struct {
	URL   string  `json:"url"`
	Line  float64 `json:"line"`
	Peers int64   `json:"peers"`
	New   int64   `json:"new"`
	Max   int64   `json:"max"`
	Mult  float64 `json:"mult"`
	Fails int     `json:"fails"`
	Error string  `json:"error"`
	At    int64   `json:"at"`
}

// View reads a torrent's score, sources and history (newest first).
func (s *Scorer) View(ctx context.Context, hash bittorrent.InfoHash) (View, error) {
	pipe := s.rdb.Pipeline()
	recCmd := pipe.HGetAll(ctx, btstore.ScoreKey(hash))
	histCmd := pipe.LRange(ctx, btstore.ScoreHistoryKey(hash), 0, -1)
	trackersCmd := pipe.HGetAll(ctx, btstore.ScoreTrackersKey(hash))
	idxCmd := pipe.ZScore(ctx, btstore.ScoreIndexKey(btstore.ScoreShard(hash)), hex.EncodeToString(hash[:]))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return View{}, fmt.Errorf("scoring.View: %w", err)
	}
	rec := recCmd.Val()
	v := View{InfoHash: hex.EncodeToString(hash[:]), State: rec["state"], History: []Round{}}
	fmt.Sscan(rec["score"], &v.Score)
	fmt.Sscan(rec["round"], &v.Round)
	var base int64
	fmt.Sscan(rec["round_base"], &base)
	v.Round -= base // rounds applied, counted from 1
	v.Indexed = idxCmd.Err() == nil
	source := func(name string, maxPeers int, id string) Source {
		src := Source{Source: name, MaxPeers: maxPeers}
		var line float64
		if _, err := fmt.Sscan(rec["line:"+id], &line); err == nil {
			src.Line = &line
		} else if id == "swarm" && v.State != "" {
			line = v.Score // a record from before score lines
			src.Line = &line
		}
		var info lineInfo
		if json.Unmarshal([]byte(rec["src:"+id]), &info) == nil {
			src.Peers, src.New, src.Mult, src.Error, src.Fails = info.Peers, info.New, info.Mult, info.Error, info.Fails
			if id == "swarm" && info.Max > 0 {
				src.MaxPeers = int(info.Max) // the plugin's setting, as the last round used it
			}
			at := time.UnixMilli(info.At).UTC()
			src.Applied = &at
		}
		return src
	}
	v.Sources = append(v.Sources, source("swarm", s.policy.MaxPeers, "swarm"))
	urls := make([]string, 0, len(trackersCmd.Val()))
	for url := range trackersCmd.Val() {
		urls = append(urls, url)
	}
	sort.Strings(urls)
	for _, url := range urls {
		var max int
		fmt.Sscan(trackersCmd.Val()[url], &max)
		v.Sources = append(v.Sources, source(url, max, btstore.SourceID(url)))
	}
	for _, raw := range histCmd.Val() {
		var r struct {
			Round
			At int64 `json:"at"`
		}
		dec := json.NewDecoder(strings.NewReader(raw))
		if err := dec.Decode(&r); err != nil {
			continue // not ours to fail on: the rest of the history still shows
		}
		r.Round.At = time.UnixMilli(r.At).UTC()
		v.History = append(v.History, r.Round)
	}
	return v, nil
}

// Ranked is one torrent of the top list.
type Ranked struct {
	InfoHash string  `json:"info_hash"`
	Score    float64 `json:"score"`
}

// MaxTop bounds Top's n.
const MaxTop = 1000

// Top returns the n torrents with the highest scores: the top n of each
// index shard, merged (ties in info-hash order).
func (s *Scorer) Top(ctx context.Context, n int) ([]Ranked, error) {
	if n < 1 || n > MaxTop {
		return nil, fmt.Errorf("top %d: want 1 to %d: %w", n, MaxTop, ErrInvalid)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, btstore.ScoreIndexShards)
	for shard := range btstore.ScoreIndexShards {
		cmds[shard] = pipe.ZRevRangeWithScores(ctx, btstore.ScoreIndexKey(shard), 0, int64(n-1))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("scoring.Top: %w", err)
	}
	var all []Ranked
	for _, cmd := range cmds {
		for _, z := range cmd.Val() {
			member, _ := z.Member.(string)
			if _, err := swarm.ParseInfoHash(member); err != nil {
				continue
			}
			all = append(all, Ranked{InfoHash: member, Score: z.Score})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Score != all[j].Score {
			return all[i].Score > all[j].Score
		}
		return all[i].InfoHash < all[j].InfoHash
	})
	return all[:min(n, len(all))], nil
}
