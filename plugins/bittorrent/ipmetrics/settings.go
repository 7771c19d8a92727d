package ipmetrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Settings are the unique-IP metrics' part of the BitTorrent plugin's
// settings ("metrics": {...}). Zero values take the defaults named on each
// field.
type Settings struct {
	// Enabled turns the metrics on.
	Enabled bool `json:"enabled"`
	// GeoIPDB is the MaxMind-format city database: one path, or a list
	// (ip-location-db ships IPv4 and IPv6 in two files). Empty counts
	// every IP under "unknown".
	GeoIPDB Paths `json:"geoip_db"`
	// Queue bounds the announces waiting to be registered (65536); a
	// full queue drops, never blocks.
	Queue int `json:"queue"`
	// Batch is the most registrations one pipeline carries (512).
	Batch int `json:"batch"`
	// CacheSize is how many recently registered (IP, torrent) pairs and
	// IPs each frontend remembers to skip (200000); -1 turns the cache
	// off. CacheTTL is how long one is skipped ("1h").
	CacheSize int    `json:"cache_size"`
	CacheTTL  string `json:"cache_ttl"`
	// Window is how long an IP stays counted in a metric ("720h", seed
	// 002's 30 days).
	Window string `json:"window"`
}

// Paths is one path or a list of them in JSON.
type Paths []string

// UnmarshalJSON accepts "a.mmdb" or ["a.mmdb", "b.mmdb"].
func (p *Paths) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*p = nil
		if one != "" {
			*p = Paths{one}
		}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return errors.New("geoip_db must be a path or a list of paths")
	}
	*p = list
	return nil
}

// Config is the parsed settings.
type Config struct {
	Enabled   bool
	GeoIPDB   []string
	Queue     int
	Batch     int
	CacheSize int
	CacheTTL  time.Duration
	Window    time.Duration
}

// ParseSettings reads the metrics' settings and names the bad field in
// its error.
func ParseSettings(raw json.RawMessage) (Config, error) {
	var s Settings
	if len(raw) > 0 && string(raw) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return Config{}, fmt.Errorf("metrics settings: %w", err)
		}
	}
	c := Config{Enabled: s.Enabled, GeoIPDB: s.GeoIPDB, Queue: s.Queue, Batch: s.Batch, CacheSize: s.CacheSize}
	var errs []error
	duration := func(name, text string, def time.Duration) time.Duration {
		if text == "" {
			return def
		}
		d, err := time.ParseDuration(text)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("metrics settings: %s %q is not a positive duration like 1h", name, text))
		}
		return d
	}
	c.CacheTTL = duration("cache_ttl", s.CacheTTL, DefaultCacheTTL)
	c.Window = duration("window", s.Window, DefaultWindow)
	if c.Window > 0 && c.Window < time.Second {
		errs = append(errs, errors.New("metrics settings: window must be at least 1s"))
	}
	for _, p := range c.GeoIPDB {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, errors.New("metrics settings: geoip_db has an empty path"))
		}
	}
	switch {
	case c.Queue == 0:
		c.Queue = DefaultQueue
	case c.Queue < 0 || c.Queue > 1<<24:
		errs = append(errs, errors.New("metrics settings: queue must be between 1 and 16777216"))
	}
	switch {
	case c.Batch == 0:
		c.Batch = DefaultBatch
	case c.Batch < 0 || c.Batch > 10000:
		errs = append(errs, errors.New("metrics settings: batch must be between 1 and 10000"))
	}
	switch {
	case c.CacheSize == 0:
		c.CacheSize = DefaultCacheSize
	case c.CacheSize == -1: // off; NewRecorder takes a negative size as none
	case c.CacheSize < -1 || c.CacheSize > 1<<26:
		errs = append(errs, errors.New("metrics settings: cache_size must be -1 (off), 0 (default) or up to 67108864"))
	}
	return c, errors.Join(errs...)
}
