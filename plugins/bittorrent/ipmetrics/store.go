package ipmetrics

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

var registerScript = btstore.Script("ipm_register.lua")

// DefaultWindow is how long an IP stays counted in a metric: it counts
// again at most once per window (seed 002: 30 days).
const DefaultWindow = 30 * 24 * time.Hour

// Unknown is the country, city or postcode of an IP the database has no
// answer for.
const Unknown = "unknown"

// Location is where an IP is, as the metrics name it: an ISO 3166 country
// code, a city and a postcode, each Unknown when the database does not say.
type Location struct {
	Country  string `json:"country"`
	City     string `json:"city"`
	Postcode string `json:"postcode"`
}

// clean makes a name safe in a metric name: no control characters, at
// most maxName bytes, Unknown when empty. Dots may stay: the country code
// (no dots) and the fixed words around a city or postcode keep a metric
// name unambiguous.
func clean(name string) string {
	const maxName = 64
	name = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, name))
	for len(name) > maxName {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" {
		return Unknown
	}
	return name
}

// Normal returns the location with every part cleaned; a country that is
// not two letters is Unknown (so is everything under it).
func (l Location) Normal() Location {
	cc := strings.ToUpper(strings.TrimSpace(l.Country))
	if len(cc) != 2 || !isLetter(cc[0]) || !isLetter(cc[1]) {
		return Location{Country: Unknown, City: Unknown, Postcode: Unknown}
	}
	return Location{Country: cc, City: clean(l.City), Postcode: clean(l.Postcode)}
}

func isLetter(b byte) bool { return b >= 'A' && b <= 'Z' }

// The metric names, as seed 002 writes them; per-torrent metrics carry
// the same names in the torrent's counters, and are shown with the
// "torrents.<info-hash>." prefix.
const MetricUsers = "users"

func countryMetric(cc string) string      { return "countries." + cc + ".users" }
func cityMetric(cc, city string) string   { return "countries." + cc + ".cities." + city + ".users" }
func postcodeMetric(cc, pc string) string { return "countries." + cc + ".postcodes." + pc + ".users" }
func monthOf(t time.Time) string          { return t.UTC().Format("2006-01") }
func markerField(kind byte, parts ...string) string {
	return string(kind) + strings.Join(parts, "\x1f")
}

// metricArgs are ipm_register.lua's marker field and metric name pairs
// for one location. Marker fields are short codes ("u", "c"+country, ...)
// because there is one set per IP: they are most of the memory.
func metricArgs(loc Location) []any {
	return []any{
		"u", MetricUsers,
		markerField('c', loc.Country), countryMetric(loc.Country),
		markerField('t', loc.Country, loc.City), cityMetric(loc.Country, loc.City),
		markerField('p', loc.Country, loc.Postcode), postcodeMetric(loc.Country, loc.Postcode),
	}
}

// Store registers IPs against the metrics and reads them back.
type Store struct {
	rdb    redis.UniversalClient
	clock  clock.Clock
	window time.Duration
}

// NewStore returns a Store; a nil clock is the system clock, a zero
// window DefaultWindow.
func NewStore(rdb redis.UniversalClient, clk clock.Clock, window time.Duration) *Store {
	if clk == nil {
		clk = clock.System{}
	}
	if window <= 0 {
		window = DefaultWindow
	}
	return &Store{rdb: rdb, clock: clk, window: window}
}

// Registration is one IP's announce on one torrent, located. Global and
// Torrent say which of its two scripts to run (a frontend's cache may
// know one of them is registered already).
type Registration struct {
	IP      netip.Addr
	Hash    bittorrent.InfoHash
	Loc     Location
	Global  bool
	Torrent bool
}

// call is one script invocation.
type call struct {
	keys []string
	args []any
}

// Register runs the registrations' scripts in one pipeline (go-redis
// splits it by node on a cluster) and returns how many metrics counted a
// new IP. Each script is atomic on its own; the pipeline only saves round
// trips, so a failure leaves every other registration applied and the
// failed one to be seen again at the IP's next announce.
func (s *Store) Register(ctx context.Context, regs []Registration) (int, error) {
	now := s.clock.Now()
	month := monthOf(now)
	head := []any{now.Unix(), int64(s.window / time.Second)}
	calls := make([]call, 0, 2*len(regs))
	for _, r := range regs {
		if !r.IP.IsValid() {
			continue
		}
		args := append(append([]any(nil), head...), metricArgs(r.Loc.Normal())...)
		if r.Global {
			calls = append(calls, call{btstore.IPMGlobalKeys(r.IP, month), args})
		}
		if r.Torrent {
			calls = append(calls, call{btstore.IPMTorrentKeys(r.Hash, r.IP, month), args})
		}
	}
	if len(calls) == 0 {
		return 0, nil
	}
	cmds := runPipelined(ctx, s.rdb, registerScript, calls)
	added := 0
	var errs []error
	for _, cmd := range cmds {
		n, err := cmd.Int()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		added += n
	}
	if len(errs) > 0 {
		return added, fmt.Errorf("ipmetrics: %d of %d registrations failed: %w", len(errs), len(calls), errors.Join(errs...))
	}
	return added, nil
}

// runPipelined runs calls of one script in one pipeline; calls a node
// answered without running (its functions lost to a restart or a flush)
// are loaded and sent again once (luascript.RunPipelined).
func runPipelined(ctx context.Context, rdb redis.UniversalClient, script *luascript.Script, calls []call) []*redis.Cmd {
	run := make([]luascript.Call, len(calls))
	for i, c := range calls {
		run[i] = luascript.Call{Script: script, Keys: c.keys, Args: c.args}
	}
	return luascript.RunPipelined(ctx, rdb, run)
}

// Window is how long an IP stays counted in a metric.
func (s *Store) Window() time.Duration { return s.window }

// Now is the store's clock's time.
func (s *Store) Now() time.Time { return s.clock.Now() }

// parseCount reads a counter field's value.
func parseCount(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return n
}
