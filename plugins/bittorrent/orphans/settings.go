package orphans

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Settings are orphan cleanup's part of the BitTorrent plugin's settings
// ("orphans": {...}). Durations are Go durations. Zero values take the
// defaults named on each field.
type Settings struct {
	// Enabled turns the "orphans" job on.
	Enabled bool `json:"enabled"`
	// Window is the protection window ("24h"): only records whose
	// timestamp of interest is older are removed. It must be longer than
	// the longest operation that can revive a record (MinWindow).
	Window string `json:"window"`
	// Period is how often the job runs one bounded tick ("10s").
	Period string `json:"period"`
	// ScanCount is the COUNT of each SCAN/HSCAN call (500).
	ScanCount int `json:"scan_count"`
	// MaxKeysPerTick bounds the keys and entries one tick reads, per walk
	// (20000); a pass over a large tracker spans many ticks.
	MaxKeysPerTick int `json:"max_keys_per_tick"`
	// BackstopPeriod is how long after a backstop pass ends the next
	// begins ("24h"): the SCAN walks that find what no due entry names
	// (records written before the due sets existed, a hint lost to a
	// kill -9 between a change and its entry).
	BackstopPeriod string `json:"backstop_period"`
}

// Policy is the parsed settings.
type Policy struct {
	Window         time.Duration
	Period         time.Duration
	ScanCount      int
	MaxKeysPerTick int
	// BackstopPeriod: between backstop passes (DefaultBackstopPeriod when 0).
	BackstopPeriod time.Duration
}

// Defaults.
const (
	DefaultWindow         = 24 * time.Hour
	DefaultPeriod         = 10 * time.Second
	DefaultScanCount      = 500
	DefaultMaxKeysPerTick = 20_000
	DefaultBackstopPeriod = 24 * time.Hour
)

// ParseSettings reads the settings; store is the swarm store's
// configuration (defaults filled in), which sets the shortest window.
func ParseSettings(raw json.RawMessage, store swarm.Config) (Settings, Policy, error) {
	var s Settings
	if len(raw) > 0 && string(raw) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return s, Policy{}, fmt.Errorf("orphans settings: %w", err)
		}
	}
	p := Policy{Window: DefaultWindow, Period: DefaultPeriod, ScanCount: s.ScanCount, MaxKeysPerTick: s.MaxKeysPerTick,
		BackstopPeriod: DefaultBackstopPeriod}
	var errs []error
	if s.Window != "" {
		d, err := time.ParseDuration(s.Window)
		if err != nil {
			errs = append(errs, fmt.Errorf("orphans settings: window %q is not a duration like 24h", s.Window))
		}
		p.Window = d
	}
	if s.Period != "" {
		d, err := time.ParseDuration(s.Period)
		if err != nil || d < time.Second {
			errs = append(errs, fmt.Errorf("orphans settings: period %q must be a duration of at least 1s", s.Period))
		}
		p.Period = d
	}
	if s.BackstopPeriod != "" {
		d, err := time.ParseDuration(s.BackstopPeriod)
		if err != nil || d < time.Minute {
			errs = append(errs, fmt.Errorf("orphans settings: backstop_period %q must be a duration of at least 1m", s.BackstopPeriod))
		}
		p.BackstopPeriod = d
	}
	if p.ScanCount == 0 {
		p.ScanCount = DefaultScanCount
	}
	if p.MaxKeysPerTick == 0 {
		p.MaxKeysPerTick = DefaultMaxKeysPerTick
	}
	if p.ScanCount < 1 || p.ScanCount > 10_000 {
		errs = append(errs, errors.New("orphans settings: scan_count must be 1-10000"))
	}
	if p.MaxKeysPerTick < p.ScanCount {
		errs = append(errs, errors.New("orphans settings: max_keys_per_tick must be at least scan_count"))
	}
	if len(errs) == 0 {
		errs = append(errs, CheckWindow(p.Window, store))
	}
	return s, p, errors.Join(errs...)
}

// reviver is an operation that can make a record live again after
// cleanup read it as stale, and how long it can take.
type reviver struct {
	what string
	d    time.Duration
}

func revivers(store swarm.Config) []reviver {
	list := []reviver{
		{"a frontend's batched copy of user states (flush_interval) can re-add a user's set entry", store.FlushInterval},
		{"a cached passkey (cache_ttl) still admits announces of a user", store.CacheTTL},
		{"peers of an unregistered torrent leave only at their deadline (2 x interval), and their records are touched until then", store.PeerTimeout},
	}
	if store.ReaperClaimWindow > 0 {
		// reaper_reseed in announce.lua: a seeder's announce within the
		// window after the first reseed writes a claim into the torrent's
		// reaper claims (and its reaper state), however old they read
		list = append(list, reviver{"the reaper's reseed claim window (claim_window) lets a seeder's announce claim the torrent, " +
			"writing its reaper claims and state", store.ReaperClaimWindow})
	}
	if store.RepairInterval > 0 {
		list = append(list, reviver{"a repair pass (every hour) resends the user states it read at its start", store.RepairInterval})
	}
	return list
}

// MinWindow is the shortest protection window the store's settings
// allow: the longest operation that can revive a record.
func MinWindow(store swarm.Config) time.Duration {
	var longest time.Duration
	for _, r := range revivers(store) {
		longest = max(longest, r.d)
	}
	return longest
}

// CheckWindow refuses a window of 0 or one not longer than an operation
// that can revive a record, naming that operation: with such a window a
// record could be judged stale while it is being revived (Pulp's X = 0
// is racy for this reason).
func CheckWindow(window time.Duration, store swarm.Config) error {
	if window <= 0 {
		return fmt.Errorf("orphans: a protection window of %v would remove records the moment they become unreferenced, "+
			"racing every operation that revives one; want more than %v", window, MinWindow(store))
	}
	for _, r := range revivers(store) {
		if window <= r.d {
			return fmt.Errorf("orphans: protection window %v is not longer than %v: %s after cleanup could judge it stale; want more than %v",
				window, r.d, r.what, MinWindow(store))
		}
	}
	return nil
}
