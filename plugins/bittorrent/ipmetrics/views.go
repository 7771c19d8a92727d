package ipmetrics

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// ErrInvalid marks a bad argument to a view (a month not YYYY-MM).
var ErrInvalid = errors.New("invalid argument")

// Counters returns every metric's count for one scope and period: the
// global metrics (hash nil) summed over the shards, or one torrent's;
// month "" is all time, else "YYYY-MM".
func (s *Store) Counters(ctx context.Context, hash *bittorrent.InfoHash, month string) (map[string]int64, error) {
	if month != "" {
		if _, err := time.Parse("2006-01", month); err != nil {
			return nil, fmt.Errorf("ipmetrics: month %q is not YYYY-MM: %w", month, ErrInvalid)
		}
	}
	var keys []string
	if hash != nil {
		keys = []string{counterKey(hash, 0, month)}
	} else {
		for shard := range btstore.IPMShards {
			keys = append(keys, counterKey(nil, shard, month))
		}
	}
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = pipe.HGetAll(ctx, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ipmetrics: read counters: %w", err)
	}
	out := map[string]int64{}
	for _, cmd := range cmds {
		for metric, v := range cmd.Val() {
			out[metric] += parseCount(v)
		}
	}
	return out, nil
}

func counterKey(hash *bittorrent.InfoHash, shard int, month string) string {
	switch {
	case hash != nil && month == "":
		return btstore.IPMTorrentTotalKey(*hash)
	case hash != nil:
		return btstore.IPMTorrentMonthKey(*hash, month)
	case month == "":
		return btstore.IPMGlobalTotalKey(shard)
	default:
		return btstore.IPMGlobalMonthKey(shard, month)
	}
}

// Users returns the users count of one scope and period (one HGET per
// shard, not the whole counters), for /metrics.
func (s *Store) Users(ctx context.Context, hash *bittorrent.InfoHash, month string) (int64, error) {
	counts, err := s.UsersByMonth(ctx, hash, []string{month})
	if err != nil {
		return 0, err
	}
	return counts[0].Users, nil
}

// MonthCount is the users one month counted.
type MonthCount struct {
	Month string `json:"month"`
	Users int64  `json:"users"`
}

// UsersByMonth returns the users counted in each month ("" is all time).
func (s *Store) UsersByMonth(ctx context.Context, hash *bittorrent.InfoHash, months []string) ([]MonthCount, error) {
	type read struct {
		month int
		cmd   *redis.StringCmd
	}
	var reads []read
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, month := range months {
			if hash != nil {
				reads = append(reads, read{i, pipe.HGet(ctx, counterKey(hash, 0, month), MetricUsers)})
				continue
			}
			for shard := range btstore.IPMShards {
				reads = append(reads, read{i, pipe.HGet(ctx, counterKey(nil, shard, month), MetricUsers)})
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("ipmetrics: read users: %w", err)
	}
	out := make([]MonthCount, len(months))
	for i, m := range months {
		out[i].Month = m
	}
	for _, r := range reads {
		out[r.month].Users += parseCount(r.cmd.Val())
	}
	return out, nil
}

// LastMonths names the n months up to and including now's, oldest first.
func LastMonths(now time.Time, n int) []string {
	now = now.UTC()
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	out := make([]string, n)
	for i := range n {
		out[n-1-i] = monthOf(first.AddDate(0, -i, 0))
	}
	return out
}

// PlaceCount is the users of one country, city or postcode.
type PlaceCount struct {
	Country string `json:"country"`
	Name    string `json:"name,omitempty"` // city or postcode; empty for a country
	Users   int64  `json:"users"`
}

// Report is one scope's metrics for one period, the view the admin API
// and `hoard bt metrics` show.
type Report struct {
	Torrent   string       `json:"torrent,omitempty"` // hex info-hash; empty for all torrents
	Month     string       `json:"month,omitempty"`   // empty for all time
	Users     int64        `json:"users"`
	Countries []PlaceCount `json:"countries"`
	Cities    []PlaceCount `json:"cities"`
	Postcodes []PlaceCount `json:"postcodes"`
	// Months is users per month, oldest first, for the months asked.
	Months []MonthCount `json:"months,omitempty"`
}

// Report reads one scope's counters for one period and ranks countries,
// cities and postcodes by users, top of each (0: all).
func (s *Store) Report(ctx context.Context, hash *bittorrent.InfoHash, month string, top int) (Report, error) {
	counts, err := s.Counters(ctx, hash, month)
	if err != nil {
		return Report{}, err
	}
	r := Report{Month: month, Users: counts[MetricUsers],
		Countries: []PlaceCount{}, Cities: []PlaceCount{}, Postcodes: []PlaceCount{}}
	if hash != nil {
		r.Torrent = fmt.Sprintf("%x", hash[:])
	}
	for metric, n := range counts {
		kind, place, ok := ParseMetric(metric)
		if !ok {
			continue
		}
		place.Users = n
		switch kind {
		case "country":
			r.Countries = append(r.Countries, place)
		case "city":
			r.Cities = append(r.Cities, place)
		case "postcode":
			r.Postcodes = append(r.Postcodes, place)
		}
	}
	r.Countries, r.Cities, r.Postcodes = rank(r.Countries, top), rank(r.Cities, top), rank(r.Postcodes, top)
	return r, nil
}

// rank sorts by users (most first, then by name) and keeps the top n.
func rank(places []PlaceCount, n int) []PlaceCount {
	sort.Slice(places, func(i, j int) bool {
		a, b := places[i], places[j]
		if a.Users != b.Users {
			return a.Users > b.Users
		}
		if a.Country != b.Country {
			return a.Country < b.Country
		}
		return a.Name < b.Name
	})
	if n > 0 && len(places) > n {
		places = places[:n]
	}
	return places
}

// ParseMetric splits a metric name into its kind ("users", "country",
// "city", "postcode") and place. The country code has no dots, so a city
// with dots ("St. Louis") still parses.
func ParseMetric(metric string) (kind string, place PlaceCount, ok bool) {
	if metric == MetricUsers {
		return "users", PlaceCount{}, true
	}
	rest, found := strings.CutPrefix(metric, "countries.")
	if !found {
		return "", PlaceCount{}, false
	}
	rest, found = strings.CutSuffix(rest, ".users")
	if !found {
		return "", PlaceCount{}, false
	}
	cc, rest, hasDot := strings.Cut(rest, ".")
	if !hasDot {
		return "country", PlaceCount{Country: cc}, cc != ""
	}
	if name, ok := strings.CutPrefix(rest, "cities."); ok {
		return "city", PlaceCount{Country: cc, Name: name}, name != ""
	}
	if name, ok := strings.CutPrefix(rest, "postcodes."); ok {
		return "postcode", PlaceCount{Country: cc, Name: name}, name != ""
	}
	return "", PlaceCount{}, false
}
