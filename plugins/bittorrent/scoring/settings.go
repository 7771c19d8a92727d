package scoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hoardproject/hoard/internal/netguard"
)

// Settings are scoring's part of the BitTorrent plugin's settings
// ("scoring": {...}). Durations are Go durations ("1h"). Zero values take
// the defaults named on each field.
type Settings struct {
	// Enabled turns scoring on.
	Enabled bool `json:"enabled"`
	// Project is the hoard project the score items live in ("bt-scoring").
	Project string `json:"project"`
	// Period is how often the "score" job queues one item per scored
	// torrent ("1h").
	Period string `json:"period"`
	// MaxPeers is the source's "max peers": the most peers one reply
	// gives. For hoard's own swarm it is the threshold of a full swarm
	// (50, btstat's default).
	MaxPeers int `json:"max_peers"`
	// NewFraction of MaxPeers must be new for a full swarm to grow (0.05).
	NewFraction float64 `json:"new_fraction"`
	// NewWindow: an IP not seen on the torrent for this long is new again
	// ("720h", 30 days).
	NewWindow string `json:"new_window"`
	// The multipliers: no peers (0.5), fewer than MaxPeers (0.8), at least
	// MaxPeers with enough new (1.2), otherwise (0.8).
	NoPeers  float64 `json:"no_peers"`
	FewPeers float64 `json:"few_peers"`
	Growing  float64 `json:"growing"`
	Stale    float64 `json:"stale"`
	// MinScore: a score below it removes the torrent from scoring; equal
	// stays (0.005).
	MinScore float64 `json:"min_score"`
	// Removal is what removal means: "untrack" (stop tracking: the
	// torrent's scoring state goes, its swarm is left to orphan cleanup)
	// or "unrank" (only leave the ranking). The default follows the mode:
	// untrack when open, unrank when private.
	Removal string `json:"removal"`
	// TombstoneTTL is how long an untracked torrent's score record stays
	// to recognise it if it comes back ("720h").
	TombstoneTTL string `json:"tombstone_ttl"`
	// ReclaimTTL: a claimed item not reported done within it is handed
	// out again ("10m").
	ReclaimTTL string `json:"reclaim_ttl"`
	// MaxWorkers caps the plugin's scoring workers per frontend (8); 0
	// keeps the default, -1 runs none (another process works the items).
	MaxWorkers int `json:"max_workers"`
	// ScaleInterval is how often the pool compares the backlog and
	// resizes ("10s"); IdlePoll how long an idle worker waits before
	// asking again ("2s").
	ScaleInterval string `json:"scale_interval"`
	IdlePoll      string `json:"idle_poll"`

	// External trackers (registered per torrent through the admin API).
	// TrackerTimeout bounds one announce to one tracker, UDP retries
	// included ("15s"); TrackerRetries is how many times a UDP exchange
	// is sent again within it (2; -1 none); TrackerNumWant is the numwant
	// sent (200, btstat's).
	TrackerTimeout string `json:"tracker_timeout"`
	TrackerRetries int    `json:"tracker_retries"`
	TrackerNumWant int    `json:"tracker_numwant"`
	// TrackerGrace is how many rounds in a row an external tracker may
	// fail (time out, refuse, answer garbage) with its score line kept
	// as it was; after that each failed round counts as no peers. 24 (a
	// day at the default period); -1: a failure counts as no peers at
	// once (btstat).
	TrackerGrace int `json:"tracker_grace"`
	// History is how many rounds each torrent's score history keeps (50).
	History int `json:"history"`
	// External trackers may not be on loopback, link-local, private (RFC
	// 1918, fc00::/7), CGNAT, unspecified or multicast addresses: a URL
	// with such a literal address is refused when registered, and every
	// announce is refused on such a resolved address, unless allowed here:
	// all of them (allow_private_targets), or the listed CIDRs or
	// addresses (allowed_targets: ["10.0.0.0/8"]).
	AllowPrivateTargets bool     `json:"allow_private_targets"`
	AllowedTargets      []string `json:"allowed_targets"`
}

// Policy is the parsed settings.
type Policy struct {
	Project       string
	Period        time.Duration
	MaxPeers      int
	NewFraction   float64
	NewWindow     time.Duration
	NoPeers       float64
	FewPeers      float64
	Growing       float64
	Stale         float64
	MinScore      float64
	Untrack       bool
	Private       bool
	TombstoneTTL  time.Duration
	ReclaimTTL    time.Duration
	MaxWorkers    int
	ScaleInterval time.Duration
	IdlePoll      time.Duration

	TrackerTimeout time.Duration
	TrackerRetries int
	TrackerNumWant int
	TrackerGrace   int
	History        int
	// Targets is where announces to external trackers may go.
	Targets netguard.Policy
}

// Defaults.
const (
	DefaultProject  = "bt-scoring"
	DefaultPeriod   = time.Hour
	DefaultMaxPeers = 50
)

// ParseSettings reads scoring's settings; private is the tracker's mode.
// It names the bad field in its error.
func ParseSettings(raw json.RawMessage, private bool) (Settings, Policy, error) {
	var s Settings
	if len(raw) > 0 && string(raw) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return s, Policy{}, fmt.Errorf("scoring settings: %w", err)
		}
	}
	p, err := s.policy(private)
	return s, p, err
}

func (s Settings) policy(private bool) (Policy, error) {
	p := Policy{Project: s.Project, MaxPeers: s.MaxPeers, NewFraction: s.NewFraction,
		NoPeers: s.NoPeers, FewPeers: s.FewPeers, Growing: s.Growing, Stale: s.Stale,
		MinScore: s.MinScore, Private: private, MaxWorkers: s.MaxWorkers,
		TrackerRetries: s.TrackerRetries, TrackerNumWant: s.TrackerNumWant, TrackerGrace: s.TrackerGrace, History: s.History}
	var errs []error
	duration := func(name, text string, def time.Duration) time.Duration {
		if text == "" {
			return def
		}
		d, err := time.ParseDuration(text)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("scoring settings: %s %q is not a positive duration like 1h", name, text))
		}
		return d
	}
	p.Period = duration("period", s.Period, DefaultPeriod)
	p.NewWindow = duration("new_window", s.NewWindow, 30*24*time.Hour)
	p.TombstoneTTL = duration("tombstone_ttl", s.TombstoneTTL, 30*24*time.Hour)
	p.ReclaimTTL = duration("reclaim_ttl", s.ReclaimTTL, 10*time.Minute)
	p.ScaleInterval = duration("scale_interval", s.ScaleInterval, 10*time.Second)
	p.IdlePoll = duration("idle_poll", s.IdlePoll, 2*time.Second)
	p.TrackerTimeout = duration("tracker_timeout", s.TrackerTimeout, 15*time.Second)
	if p.TrackerTimeout > 5*time.Minute {
		errs = append(errs, errors.New("scoring settings: tracker_timeout must be at most 5m"))
	}
	for _, f := range []struct {
		name     string
		value    *int
		def, max int
		minusOne bool
	}{
		{"tracker_retries", &p.TrackerRetries, 2, 10, true}, {"tracker_numwant", &p.TrackerNumWant, 200, 10_000, false},
		{"tracker_grace", &p.TrackerGrace, 24, 10_000, true}, {"history", &p.History, 50, 1000, false},
	} {
		switch {
		case *f.value == 0:
			*f.value = f.def
		case *f.value == -1 && f.minusOne:
		case *f.value < 1 || *f.value > f.max:
			more := ""
			if f.minusOne {
				more = ", or -1"
			}
			errs = append(errs, fmt.Errorf("scoring settings: %s must be 1 to %d%s (0 takes the default %d)", f.name, f.max, more, f.def))
		}
	}
	if p.Project == "" {
		p.Project = DefaultProject
	}
	if p.Period < time.Second {
		errs = append(errs, errors.New("scoring settings: period must be at least 1s"))
	}
	if p.MaxPeers == 0 {
		p.MaxPeers = DefaultMaxPeers
	}
	if p.MaxPeers < 0 {
		errs = append(errs, errors.New("scoring settings: max_peers must be positive"))
	}
	for _, f := range []struct {
		name  string
		value *float64
		def   float64
	}{
		{"new_fraction", &p.NewFraction, 0.05}, {"no_peers", &p.NoPeers, 0.5}, {"few_peers", &p.FewPeers, 0.8},
		{"growing", &p.Growing, 1.2}, {"stale", &p.Stale, 0.8}, {"min_score", &p.MinScore, 0.005},
	} {
		if *f.value == 0 {
			*f.value = f.def
		}
		if *f.value < 0 {
			errs = append(errs, fmt.Errorf("scoring settings: %s must not be negative", f.name))
		}
	}
	allow, err := netguard.ParseAllow(s.AllowedTargets)
	if err != nil {
		errs = append(errs, fmt.Errorf("scoring settings: %w", err))
	}
	p.Targets = netguard.Policy{AllowPrivate: s.AllowPrivateTargets, Allow: allow}
	switch s.Removal {
	case "":
		p.Untrack = !private
	case "untrack":
		p.Untrack = true
	case "unrank":
	default:
		errs = append(errs, fmt.Errorf("scoring settings: removal %q must be untrack or unrank", s.Removal))
	}
	switch {
	case p.MaxWorkers == 0:
		p.MaxWorkers = 8
	case p.MaxWorkers < -1 || p.MaxWorkers > 1024:
		errs = append(errs, errors.New("scoring settings: max_workers must be -1 (none), 0 (default 8) or up to 1024"))
	}
	return p, errors.Join(errs...)
}
