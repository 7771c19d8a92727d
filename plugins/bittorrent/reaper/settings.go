package reaper

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Settings are the reaper's part of the BitTorrent plugin's settings
// ("reaper": {...}). Durations are Go durations ("480h"). Zero values take
// the defaults, which are Orpheus's code (policies.md §A), not its
// comments:
//
//   - never seeded: initial notice 8 h after creation, final notice 48 h
//     after the initial one (2 days), removal 24 h after the final one:
//     3 days and 8 hours after the upload in all;
//   - unseeded: initial notice after 480 h (20 days) without a seeder,
//     final notice 648 h (27 days) after the initial one, removal 72 h
//     (3 days) after the final one: 30 days after the initial notice,
//     50 days after the last seeder left. (Orpheus's config says the
//     initial notice comes "10 days before" removal; it comes 30.)
//
// A run may be up to Period late, so each step can fire up to Period
// after its time.
type Settings struct {
	// Enabled turns the reaper on (private mode only). Off by default,
	// as Orpheus ships it: a site that wants to keep tombstones leaves it.
	Enabled bool `json:"enabled"`
	// Project is the hoard project the step items live in ("bt-reaper").
	Project string `json:"project"`
	// Period is how often the "reaper" job looks for due steps ("4h").
	Period string `json:"period"`
	// NeverGrace, NeverFinal, NeverRemoval: a never-seeded upload's
	// initial notice after NeverGrace since creation ("8h"), final notice
	// NeverFinal after the initial ("48h"), removal NeverRemoval after the
	// final ("24h").
	NeverGrace   string `json:"never_grace"`
	NeverFinal   string `json:"never_final"`
	NeverRemoval string `json:"never_removal"`
	// UnseededGrace, UnseededFinal, UnseededRemoval: the same for a
	// torrent that had a seeder once ("480h", "648h", "72h").
	UnseededGrace   string `json:"unseeded_grace"`
	UnseededFinal   string `json:"unseeded_final"`
	UnseededRemoval string `json:"unseeded_removal"`
	// MaxPerUser, MaxUsers, MaxTotal bound one run: at most MaxPerUser
	// steps per uploader (200), MaxUsers uploaders (2500), MaxTotal steps
	// (4000); the rest waits for the next run.
	MaxPerUser int `json:"max_per_user"`
	MaxUsers   int `json:"max_users"`
	MaxTotal   int `json:"max_total"`
	// RequeueAfter: a queued step not done within it is queued again by a
	// later run ("24h"); the queue itself hands out a step whose worker
	// died after ReclaimTTL ("10m").
	RequeueAfter string `json:"requeue_after"`
	ReclaimTTL   string `json:"reclaim_ttl"`
	// MaxWorkers caps the plugin's reaper workers per frontend (2); -1
	// runs none (another process works the items).
	MaxWorkers int `json:"max_workers"`
	// ClaimWindow: after the first reseed of a torrent in the process by
	// someone other than its uploader, others who start seeding it within
	// ClaimWindow also win ("15m"; Orpheus's 900 s of time spent).
	ClaimWindow string `json:"claim_window"`
	// RewardFactor: a claim's reward is RewardFactor x the torrent's
	// value (1.25, Orpheus's REAPER_RESEED_REWARD_FACTOR).
	RewardFactor float64 `json:"reward_factor"`
}

// Schedule is one kind's three gaps.
type Schedule struct {
	Grace   time.Duration // unseeded (or, never seeded, since creation) longer than this: initial notice
	Final   time.Duration // initial notice -> final notice
	Removal time.Duration // final notice -> removal
}

// Total is the time from the start of the spell to the removal.
func (s Schedule) Total() time.Duration { return s.Grace + s.Final + s.Removal }

// Policy is the parsed settings.
type Policy struct {
	Project      string
	Period       time.Duration
	Never        Schedule
	Unseeded     Schedule
	MaxPerUser   int
	MaxUsers     int
	MaxTotal     int
	RequeueAfter time.Duration
	ReclaimTTL   time.Duration
	MaxWorkers   int
	ClaimWindow  time.Duration
	RewardFactor float64
}

// Defaults (Orpheus's code).
const (
	DefaultProject = "bt-reaper"
	DefaultPeriod  = 4 * time.Hour
)

var (
	DefaultNever    = Schedule{Grace: 8 * time.Hour, Final: 48 * time.Hour, Removal: 24 * time.Hour}
	DefaultUnseeded = Schedule{Grace: 480 * time.Hour, Final: 648 * time.Hour, Removal: 72 * time.Hour}
)

// DefaultPolicy is the policy of empty settings.
func DefaultPolicy() Policy {
	return Policy{
		Project: DefaultProject, Period: DefaultPeriod, Never: DefaultNever, Unseeded: DefaultUnseeded,
		MaxPerUser: 200, MaxUsers: 2500, MaxTotal: 4000,
		RequeueAfter: 24 * time.Hour, ReclaimTTL: 10 * time.Minute, MaxWorkers: 2,
		ClaimWindow: 15 * time.Minute, RewardFactor: 1.25,
	}
}

// ParseSettings reads the reaper's settings (nil: off). It names the bad
// field in its error.
func ParseSettings(raw json.RawMessage, private bool) (Settings, Policy, error) {
	var s Settings
	p := DefaultPolicy()
	if len(raw) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return s, p, fmt.Errorf("reaper: %w", err)
		}
	}
	if s.Enabled && !private {
		return s, p, errors.New("reaper: needs private mode: it reaps registered uploads of a site")
	}
	if s.Project != "" {
		p.Project = s.Project
	}
	durations := []struct {
		name string
		text string
		into *time.Duration
	}{
		{"period", s.Period, &p.Period},
		{"never_grace", s.NeverGrace, &p.Never.Grace},
		{"never_final", s.NeverFinal, &p.Never.Final},
		{"never_removal", s.NeverRemoval, &p.Never.Removal},
		{"unseeded_grace", s.UnseededGrace, &p.Unseeded.Grace},
		{"unseeded_final", s.UnseededFinal, &p.Unseeded.Final},
		{"unseeded_removal", s.UnseededRemoval, &p.Unseeded.Removal},
		{"requeue_after", s.RequeueAfter, &p.RequeueAfter},
		{"reclaim_ttl", s.ReclaimTTL, &p.ReclaimTTL},
		{"claim_window", s.ClaimWindow, &p.ClaimWindow},
	}
	for _, d := range durations {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return s, p, fmt.Errorf("reaper: %s %q is not a positive duration like 48h", d.name, d.text)
		}
		*d.into = v
	}
	caps := []struct {
		name string
		v    int
		into *int
	}{{"max_per_user", s.MaxPerUser, &p.MaxPerUser}, {"max_users", s.MaxUsers, &p.MaxUsers}, {"max_total", s.MaxTotal, &p.MaxTotal}}
	for _, c := range caps {
		if c.v < 0 {
			return s, p, fmt.Errorf("reaper: %s %d must not be negative (0: the default)", c.name, c.v)
		}
		if c.v > 0 {
			*c.into = c.v
		}
	}
	switch {
	case s.RewardFactor < 0 || s.RewardFactor > 1000:
		return s, p, fmt.Errorf("reaper: reward_factor %v: want 0 (the default, 1.25) up to 1000", s.RewardFactor)
	case s.RewardFactor > 0:
		p.RewardFactor = s.RewardFactor
	}
	switch {
	case s.MaxWorkers < -1:
		return s, p, fmt.Errorf("reaper: max_workers %d: want -1 (none), 0 (default) or more", s.MaxWorkers)
	case s.MaxWorkers != 0:
		p.MaxWorkers = s.MaxWorkers
	}
	return s, p, nil
}
