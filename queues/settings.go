package queues

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Queue names a shared todo queue. The order of the constants is the order
// requests are served in, after the downloader's reserved queue (seed 004).
type Queue string

const (
	QueueTodo      Queue = "todo"
	QueueBackfeed  Queue = "todo:backfeed"
	QueueSecondary Queue = "todo:secondary"
	QueueRedo      Queue = "todo:redo"
)

// QueueScored is the score-ordered queue (a ZSET): served highest score
// first, after the downloader's reserved queue and before the FIFO queues.
// Its items are not routed to limit groups nor offloaded to disk; it is
// meant for work that must go in priority order, such as a plugin's
// scoring rounds.
const QueueScored Queue = "todo:scored"

// SharedQueues lists the shared queues in serving order.
var SharedQueues = []Queue{QueueTodo, QueueBackfeed, QueueSecondary, QueueRedo}

// ParseQueue accepts a queue name with or without the "todo:" prefix.
func ParseQueue(name string) (Queue, error) {
	switch strings.TrimPrefix(name, "todo:") {
	case "todo", "":
		return QueueTodo, nil
	case "backfeed":
		return QueueBackfeed, nil
	case "secondary":
		return QueueSecondary, nil
	case "redo":
		return QueueRedo, nil
	case "scored":
		return QueueScored, nil
	}
	return "", errorf("queues.ParseQueue", CodeInvalid, "unknown queue %q (want todo, backfeed, secondary, redo or scored)", name)
}

// Defaults for a new project. Reclaiming starts on, with a TTL of 6 hours
// (universal-tracker's release-stale.rb threshold): with it off, a claim
// whose reply was lost in a crash (a frontend killed mid-request, a warrior
// that died) stays out forever, shown as ordinary out work. 6 hours is
// long for an item and short for a lost one; a project of slow items
// raises it (the deadline also grows with each time an item is claimed).
const (
	DefaultReclaimTTL = 6 * time.Hour
	DefaultMaxMulti   = 100
	DefaultLogLength  = 1000
	// A generation of 10M items at 1e-6 is about 36 MB of bits.
	DefaultBloomCapacity = 10_000_000
	DefaultBloomFPRate   = 1e-6
	MaxLogLength         = 100000
	// Offloading: a segment of 100k ~40-byte items is about 1 MB gzipped,
	// and moving it is one short script.
	DefaultOffloadSegment = 100_000
	MaxOffloadSegment     = 1_000_000
	DefaultRecentDone     = 1_000_000
	// DefaultMaxClaims: with the default 6 h TTL growing with each claim,
	// an item's tenth claim expires about two weeks after its first; ten
	// warriors failing one item means the item is broken, not unlucky
	// (docs/failed-items.md).
	DefaultMaxClaims = 10
	MaxMaxClaims     = 1000
	// MaxEventLog caps a project's event log (entries, each one done call
	// or one expired claim).
	MaxEventLog = 10_000_000
	// DefaultPluginEventLog is the event log a plugin's project gets: a
	// day of one done call per second, kept while a plugin is down.
	DefaultPluginEventLog = 100_000
)

// Where a failure report sends an item.
const (
	FailToFailed = "failed"
	FailToRedo   = "redo"
)

// The done modes.
const (
	DoneKeep    = "keep"
	DoneCount   = "count"
	DoneArchive = "archive"
)

// Settings are a project's operator-controlled settings.
type Settings struct {
	Title  string `json:"title"`
	Paused bool   `json:"paused"`
	// MinVersion is the lowest pipeline VERSION served; older gets 455.
	MinVersion string `json:"min_version"`
	// RatePerMinute limits item requests for the whole project (0 = off),
	// smoothly (GCRA), with RateBurst requests allowed back to back.
	RatePerMinute float64 `json:"rate_per_minute"`
	RateBurst     int     `json:"rate_burst"`
	// DownloaderRatePerMinute and IPRatePerMinute limit item requests of
	// each downloader and each client IP the same way (0 = off).
	DownloaderRatePerMinute float64 `json:"downloader_rate_per_minute"`
	DownloaderRateBurst     int     `json:"downloader_rate_burst"`
	IPRatePerMinute         float64 `json:"ip_rate_per_minute"`
	IPRateBurst             int     `json:"ip_rate_burst"`
	// IgnoreGlobalBlocks serves nicknames and IPs blocked server-wide.
	IgnoreGlobalBlocks bool `json:"ignore_global_blocks"`
	// DownloaderBudget caps the items one downloader may have out (0 = off).
	DownloaderBudget int `json:"downloader_budget"`
	// ClaimsLimit caps the items out in the whole project (0 = off).
	ClaimsLimit    int      `json:"claims_limit"`
	ReclaimEnabled bool     `json:"reclaim_enabled"`
	ReclaimTTL     Duration `json:"reclaim_ttl"`
	// MaxMulti caps the N of /multi=N/request.
	MaxMulti int `json:"max_multi"`
	// LogLength is how many recent completions are kept.
	LogLength int `json:"log_length"`
	// UploadTargets are rsync:// or http(s):// URLs ending in "/", where
	// ":downloader" is replaced by the nickname.
	UploadTargets []string `json:"upload_targets"`
	// Extra keys sent with every item (never evaluated; plain JSON).
	Extra map[string]json.RawMessage `json:"extra"`
	// BackfeedSecret is the <secret> of POST /backfeed/legacy/<slug>-<secret>
	// ("" = backfeed off). Letters, digits and _ only, 8-128 of them.
	BackfeedSecret string `json:"backfeed_secret"`
	// BloomCapacity and BloomFPRate size each generation of the backfeed
	// Bloom filter: a new generation starts after BloomCapacity items.
	BloomCapacity int     `json:"bloom_capacity"`
	BloomFPRate   float64 `json:"bloom_fp_rate"`
	// BloomWords is how many 32-bit words of a new generation an item sets
	// bits in (MinBloomWords to MaxBloomWords), or 0 to let hoard choose
	// (2 at the default rate). Fewer words cost Redis less per backfed
	// item and take more memory per item (docs/warrior-api.md, "Blocked
	// generations"). Like capacity and rate, it shapes only generations
	// started after it is set.
	BloomWords int `json:"bloom_words"`
	// BloomKind is the kind of filter generation started from now on:
	// "blocked" (a Bloom filter whose words bloom_add.lua reads and writes
	// with BITFIELD) or "sets" (each item's 32-bit fingerprint in one of
	// many small Redis sets: about a quarter of the Redis CPU per new item
	// and less memory, at rates down to ~7.5e-9; docs/warrior-api.md,
	// "Backfeed (s44)"). A project from before the setting is blocked. Like capacity and rate, it
	// shapes only generations started after it is set; a frontend of a
	// build from before sets refuses to write to a filter with one.
	BloomKind string `json:"bloom_kind"`
	// OffloadAbove is the most items a shared queue (with its limit groups'
	// sub-queues) keeps in Redis before its tail moves to segment files on
	// disk (0 = never). Segments come back when fewer than a quarter of it
	// remain in Redis.
	OffloadAbove int `json:"offload_above"`
	// OffloadSegment is the items per segment file.
	OffloadSegment int `json:"offload_segment"`
	// DoneMode says what becomes of done items: "keep" them in the done
	// set, "count" them and discard them, or "archive" them to compressed
	// files on disk. The last two keep only RecentDone recent completions
	// in Redis, so a repeated done still answers OK.
	DoneMode   string `json:"done_mode"`
	RecentDone int    `json:"recent_done"`
	// EventLog, when above 0, keeps the project's completions and expired
	// claims in a capped Redis stream of about that many entries, written
	// by the same script as the change, for the plugins that own the
	// project's items to read through consumer groups (0 = off: only the
	// pub/sub hint for live viewers).
	EventLog int `json:"event_log"`
	// MaxClaims sends an item to the failed items once it has been claimed
	// this many times without a done: the reclaim that would hand it out
	// again moves it instead (0 = off, reclaimed forever). New projects
	// get DefaultMaxClaims; projects made before the setting existed read
	// as 0 until an operator sets it.
	MaxClaims int `json:"max_claims"`
	// FailReportTo is where an item goes when its claimant reports it
	// failed (POST /<slug>/fail): FailToFailed or FailToRedo.
	FailReportTo string `json:"fail_report_to"`
	// LimitGroups rate-limit item types and patterns; set them with
	// Engine.SetLimitGroups, which also re-routes queued items.
	LimitGroups []LimitGroup `json:"limit_groups"`
}

var secretPattern = regexp.MustCompile(`^[A-Za-z0-9_]{8,128}$`)

// DefaultSettings are a new project's settings.
func DefaultSettings() Settings {
	return Settings{
		RateBurst:           1,
		DownloaderRateBurst: 1,
		IPRateBurst:         1,
		ReclaimEnabled:      true,
		ReclaimTTL:          Duration(DefaultReclaimTTL),
		MaxMulti:            DefaultMaxMulti,
		BloomCapacity:       DefaultBloomCapacity,
		BloomFPRate:         DefaultBloomFPRate,
		BloomKind:           BloomKindBlocked,
		OffloadSegment:      DefaultOffloadSegment,
		DoneMode:            DoneKeep,
		RecentDone:          DefaultRecentDone,
		LogLength:           DefaultLogLength,
		UploadTargets:       []string{},
		Extra:               map[string]json.RawMessage{},
		MaxClaims:           DefaultMaxClaims,
		FailReportTo:        FailToFailed,
	}
}

// SettingsPatch changes some settings; nil fields stay as they are.
type SettingsPatch struct {
	Title                   *string                     `json:"title,omitempty"`
	Paused                  *bool                       `json:"paused,omitempty"`
	MinVersion              *string                     `json:"min_version,omitempty"`
	RatePerMinute           *float64                    `json:"rate_per_minute,omitempty"`
	RateBurst               *int                        `json:"rate_burst,omitempty"`
	DownloaderRatePerMinute *float64                    `json:"downloader_rate_per_minute,omitempty"`
	DownloaderRateBurst     *int                        `json:"downloader_rate_burst,omitempty"`
	IPRatePerMinute         *float64                    `json:"ip_rate_per_minute,omitempty"`
	IPRateBurst             *int                        `json:"ip_rate_burst,omitempty"`
	IgnoreGlobalBlocks      *bool                       `json:"ignore_global_blocks,omitempty"`
	DownloaderBudget        *int                        `json:"downloader_budget,omitempty"`
	ClaimsLimit             *int                        `json:"claims_limit,omitempty"`
	ReclaimEnabled          *bool                       `json:"reclaim_enabled,omitempty"`
	ReclaimTTL              *Duration                   `json:"reclaim_ttl,omitempty"`
	MaxMulti                *int                        `json:"max_multi,omitempty"`
	LogLength               *int                        `json:"log_length,omitempty"`
	UploadTargets           *[]string                   `json:"upload_targets,omitempty"`
	Extra                   *map[string]json.RawMessage `json:"extra,omitempty"`
	BackfeedSecret          *string                     `json:"backfeed_secret,omitempty"`
	BloomCapacity           *int                        `json:"bloom_capacity,omitempty"`
	BloomFPRate             *float64                    `json:"bloom_fp_rate,omitempty"`
	BloomWords              *int                        `json:"bloom_words,omitempty"`
	BloomKind               *string                     `json:"bloom_kind,omitempty"`
	OffloadAbove            *int                        `json:"offload_above,omitempty"`
	OffloadSegment          *int                        `json:"offload_segment,omitempty"`
	DoneMode                *string                     `json:"done_mode,omitempty"`
	RecentDone              *int                        `json:"recent_done,omitempty"`
	EventLog                *int                        `json:"event_log,omitempty"`
	MaxClaims               *int                        `json:"max_claims,omitempty"`
	FailReportTo            *string                     `json:"fail_report_to,omitempty"`
}

// Apply returns s with the patch applied and checked.
func (p SettingsPatch) Apply(s Settings) (Settings, error) {
	if p.Title != nil {
		s.Title = *p.Title
	}
	if p.Paused != nil {
		s.Paused = *p.Paused
	}
	if p.MinVersion != nil {
		s.MinVersion = *p.MinVersion
	}
	if p.RatePerMinute != nil {
		s.RatePerMinute = *p.RatePerMinute
	}
	if p.RateBurst != nil {
		s.RateBurst = *p.RateBurst
	}
	if p.DownloaderRatePerMinute != nil {
		s.DownloaderRatePerMinute = *p.DownloaderRatePerMinute
	}
	if p.DownloaderRateBurst != nil {
		s.DownloaderRateBurst = *p.DownloaderRateBurst
	}
	if p.IPRatePerMinute != nil {
		s.IPRatePerMinute = *p.IPRatePerMinute
	}
	if p.IPRateBurst != nil {
		s.IPRateBurst = *p.IPRateBurst
	}
	if p.IgnoreGlobalBlocks != nil {
		s.IgnoreGlobalBlocks = *p.IgnoreGlobalBlocks
	}
	if p.DownloaderBudget != nil {
		s.DownloaderBudget = *p.DownloaderBudget
	}
	if p.ClaimsLimit != nil {
		s.ClaimsLimit = *p.ClaimsLimit
	}
	if p.ReclaimEnabled != nil {
		s.ReclaimEnabled = *p.ReclaimEnabled
	}
	if p.ReclaimTTL != nil {
		s.ReclaimTTL = *p.ReclaimTTL
	}
	if p.MaxMulti != nil {
		s.MaxMulti = *p.MaxMulti
	}
	if p.LogLength != nil {
		s.LogLength = *p.LogLength
	}
	if p.UploadTargets != nil {
		s.UploadTargets = append([]string{}, (*p.UploadTargets)...)
	}
	if p.Extra != nil {
		s.Extra = *p.Extra
	}
	if p.BackfeedSecret != nil {
		s.BackfeedSecret = *p.BackfeedSecret
	}
	if p.BloomCapacity != nil {
		s.BloomCapacity = *p.BloomCapacity
	}
	if p.BloomFPRate != nil {
		s.BloomFPRate = *p.BloomFPRate
	}
	if p.BloomWords != nil {
		s.BloomWords = *p.BloomWords
	}
	if p.BloomKind != nil {
		s.BloomKind = *p.BloomKind
	}
	if p.OffloadAbove != nil {
		s.OffloadAbove = *p.OffloadAbove
	}
	if p.OffloadSegment != nil {
		s.OffloadSegment = *p.OffloadSegment
	}
	if p.DoneMode != nil {
		s.DoneMode = *p.DoneMode
	}
	if p.RecentDone != nil {
		s.RecentDone = *p.RecentDone
	}
	if p.EventLog != nil {
		s.EventLog = *p.EventLog
	}
	if p.MaxClaims != nil {
		s.MaxClaims = *p.MaxClaims
	}
	if p.FailReportTo != nil {
		s.FailReportTo = *p.FailReportTo
	}
	return s, s.Validate()
}

// Validate names the first bad field.
func (s Settings) Validate() error {
	const op = "queues.Settings.Validate"
	bad := func(field, format string, args ...any) error {
		return errorf(op, CodeInvalid, "%s: %s", field, fmt.Sprintf(format, args...))
	}
	// A title is shown on pages, in projects.json and in the CLI's
	// tables: no control characters (an ANSI escape would restyle an
	// operator's terminal).
	if i, r := FindControl(s.Title); i >= 0 {
		return bad("title", "has the control character U+%04X at byte offset %d; control characters other than tab are refused", r, i)
	}
	if i, r := FindControl(s.MinVersion); i >= 0 {
		return bad("min_version", "has the control character U+%04X at byte offset %d", r, i)
	}
	switch {
	case len(s.Title) > 200:
		return bad("title", "longer than 200 bytes")
	case len(s.MinVersion) > 64 || strings.ContainsAny(s.MinVersion, "\x00\r\n"):
		return bad("min_version", "must be at most 64 printable bytes")
	case s.RatePerMinute < 0 || s.RatePerMinute > 6e6:
		return bad("rate_per_minute", "must be between 0 (off) and 6000000")
	case s.RateBurst < 1 || s.RateBurst > 1e6:
		return bad("rate_burst", "must be between 1 and 1000000")
	case s.DownloaderRatePerMinute < 0 || s.DownloaderRatePerMinute > 6e6:
		return bad("downloader_rate_per_minute", "must be between 0 (off) and 6000000")
	case s.DownloaderRateBurst < 1 || s.DownloaderRateBurst > 1e6:
		return bad("downloader_rate_burst", "must be between 1 and 1000000")
	case s.IPRatePerMinute < 0 || s.IPRatePerMinute > 6e6:
		return bad("ip_rate_per_minute", "must be between 0 (off) and 6000000")
	case s.IPRateBurst < 1 || s.IPRateBurst > 1e6:
		return bad("ip_rate_burst", "must be between 1 and 1000000")
	case s.DownloaderBudget < 0:
		return bad("downloader_budget", "must be 0 (off) or more")
	case s.ClaimsLimit < 0:
		return bad("claims_limit", "must be 0 (off) or more")
	case time.Duration(s.ReclaimTTL) < time.Second:
		return bad("reclaim_ttl", "must be at least 1s")
	case s.MaxMulti < 1 || s.MaxMulti > MaxMulti:
		return bad("max_multi", "must be between 1 and %d", MaxMulti)
	case s.LogLength < 0 || s.LogLength > MaxLogLength:
		return bad("log_length", "must be between 0 and %d", MaxLogLength)
	case s.BackfeedSecret != "" && !secretPattern.MatchString(s.BackfeedSecret):
		return bad("backfeed_secret", "must be 8-128 of A-Z, a-z, 0-9 and _ (the URL puts it after the last -)")
	case s.BloomCapacity < MaxBloomBatch || s.BloomCapacity > 500_000_000:
		return bad("bloom_capacity", "must be between %d and 500000000", MaxBloomBatch)
	case s.BloomFPRate <= 0 || s.BloomFPRate > 0.1:
		return bad("bloom_fp_rate", "must be above 0 and at most 0.1")
	case s.BloomWords != 0 && (s.BloomWords < MinBloomWords || s.BloomWords > MaxBloomWords):
		return bad("bloom_words", "must be 0 (automatic) or between %d and %d", MinBloomWords, MaxBloomWords)
	case s.BloomKind != "" && s.BloomKind != BloomKindBlocked && s.BloomKind != BloomKindSets:
		return bad("bloom_kind", "must be %s or %s", BloomKindBlocked, BloomKindSets)
	case len(s.UploadTargets) > 100:
		return bad("upload_targets", "at most 100")
	case s.OffloadSegment < 1000 || s.OffloadSegment > MaxOffloadSegment:
		return bad("offload_segment", "must be between 1000 and %d", MaxOffloadSegment)
	case s.OffloadAbove != 0 && s.OffloadAbove < 2*s.OffloadSegment:
		return bad("offload_above", "must be 0 (off) or at least twice offload_segment (%d)", 2*s.OffloadSegment)
	case s.DoneMode != DoneKeep && s.DoneMode != DoneCount && s.DoneMode != DoneArchive:
		return bad("done_mode", "must be keep, count or archive")
	case s.RecentDone < 1000 || s.RecentDone > 100_000_000:
		return bad("recent_done", "must be between 1000 and 100000000")
	case s.EventLog != 0 && (s.EventLog < 1000 || s.EventLog > MaxEventLog):
		return bad("event_log", "must be 0 (off) or between 1000 and %d", MaxEventLog)
	case s.MaxClaims < 0 || s.MaxClaims > MaxMaxClaims:
		return bad("max_claims", "must be 0 (off) or between 1 and %d", MaxMaxClaims)
	case s.FailReportTo != FailToFailed && s.FailReportTo != FailToRedo:
		return bad("fail_report_to", "must be failed or redo")
	}
	if _, err := newGenerationShape(s.BloomKind, s.BloomCapacity, s.BloomFPRate, s.BloomWords); err != nil {
		if s.BloomKind == BloomKindSets {
			return bad("bloom_fp_rate", "%v", err)
		}
		return bad("bloom_capacity", "%v", err)
	}
	for _, target := range s.UploadTargets {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "rsync" && u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("upload_targets", "%q is not an rsync://, http:// or https:// URL", target)
		}
		if !strings.HasSuffix(target, "/") {
			return bad("upload_targets", "%q must end in / (seesaw appends file names)", target)
		}
	}
	for key, value := range s.Extra {
		if key == "item_name" {
			return bad("extra", "may not set item_name")
		}
		if !json.Valid(value) {
			return bad("extra", "%q is not valid JSON", key)
		}
	}
	return nil
}

// fields encodes settings as config hash fields; every field is written so
// the scripts never need defaults of their own.
func (s Settings) fields() []any {
	targets, _ := json.Marshal(s.UploadTargets)
	extra, _ := json.Marshal(s.Extra)
	return []any{
		"title", s.Title,
		"paused", boolField(s.Paused),
		"min_version", s.MinVersion,
		"rate_per_minute", strconv.FormatFloat(s.RatePerMinute, 'f', -1, 64),
		"rate_burst", strconv.Itoa(s.RateBurst),
		"downloader_rate_per_minute", strconv.FormatFloat(s.DownloaderRatePerMinute, 'f', -1, 64),
		"downloader_rate_burst", strconv.Itoa(s.DownloaderRateBurst),
		"ip_rate_per_minute", strconv.FormatFloat(s.IPRatePerMinute, 'f', -1, 64),
		"ip_rate_burst", strconv.Itoa(s.IPRateBurst),
		"ignore_global_blocks", boolField(s.IgnoreGlobalBlocks),
		"downloader_budget", strconv.Itoa(s.DownloaderBudget),
		"claims_limit", strconv.Itoa(s.ClaimsLimit),
		"reclaim_enabled", boolField(s.ReclaimEnabled),
		"reclaim_ttl_ms", strconv.FormatInt(time.Duration(s.ReclaimTTL).Milliseconds(), 10),
		"max_multi", strconv.Itoa(s.MaxMulti),
		"log_length", strconv.Itoa(s.LogLength),
		"upload_targets", string(targets),
		"extra", string(extra),
		"backfeed_secret", s.BackfeedSecret,
		"bloom_capacity", strconv.Itoa(s.BloomCapacity),
		"bloom_fp_rate", strconv.FormatFloat(s.BloomFPRate, 'g', -1, 64),
		"bloom_words", strconv.Itoa(s.BloomWords),
		"bloom_kind", s.BloomKind,
		"offload_above", strconv.Itoa(s.OffloadAbove),
		"offload_segment", strconv.Itoa(s.OffloadSegment),
		"done_mode", s.DoneMode,
		"recent_done", strconv.Itoa(s.RecentDone),
		"event_log", strconv.Itoa(s.EventLog),
		"max_claims", strconv.Itoa(s.MaxClaims),
		"fail_report_to", s.FailReportTo,
	}
}

// fieldsNamed encodes only the named config hash fields.
func (s Settings) fieldsNamed(names []string) []any {
	all := s.fields()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := make([]any, 0, 2*len(names))
	for i := 0; i < len(all); i += 2 {
		if want[all[i].(string)] {
			out = append(out, all[i], all[i+1])
		}
	}
	return out
}

// fieldNames lists the config hash fields the patch changes.
func (p SettingsPatch) fieldNames() []string {
	var names []string
	add := func(set bool, name string) {
		if set {
			names = append(names, name)
		}
	}
	add(p.Title != nil, "title")
	add(p.Paused != nil, "paused")
	add(p.MinVersion != nil, "min_version")
	add(p.RatePerMinute != nil, "rate_per_minute")
	add(p.RateBurst != nil, "rate_burst")
	add(p.DownloaderRatePerMinute != nil, "downloader_rate_per_minute")
	add(p.DownloaderRateBurst != nil, "downloader_rate_burst")
	add(p.IPRatePerMinute != nil, "ip_rate_per_minute")
	add(p.IPRateBurst != nil, "ip_rate_burst")
	add(p.IgnoreGlobalBlocks != nil, "ignore_global_blocks")
	add(p.DownloaderBudget != nil, "downloader_budget")
	add(p.ClaimsLimit != nil, "claims_limit")
	add(p.ReclaimEnabled != nil, "reclaim_enabled")
	add(p.ReclaimTTL != nil, "reclaim_ttl_ms")
	add(p.MaxMulti != nil, "max_multi")
	add(p.LogLength != nil, "log_length")
	add(p.UploadTargets != nil, "upload_targets")
	add(p.Extra != nil, "extra")
	add(p.BackfeedSecret != nil, "backfeed_secret")
	add(p.BloomCapacity != nil, "bloom_capacity")
	add(p.BloomFPRate != nil, "bloom_fp_rate")
	add(p.BloomWords != nil, "bloom_words")
	add(p.BloomKind != nil, "bloom_kind")
	add(p.OffloadAbove != nil, "offload_above")
	add(p.OffloadSegment != nil, "offload_segment")
	add(p.DoneMode != nil, "done_mode")
	add(p.RecentDone != nil, "recent_done")
	add(p.EventLog != nil, "event_log")
	add(p.MaxClaims != nil, "max_claims")
	add(p.FailReportTo != nil, "fail_report_to")
	return names
}

// settingsFromHash decodes a config hash; missing or unreadable fields keep
// their defaults.
func settingsFromHash(h map[string]string) Settings {
	s := DefaultSettings()
	s.Title = h["title"]
	s.Paused = h["paused"] == "1"
	s.MinVersion = h["min_version"]
	if v, err := strconv.ParseFloat(h["rate_per_minute"], 64); err == nil {
		s.RatePerMinute = v
	}
	intField(h, "rate_burst", &s.RateBurst)
	if v, err := strconv.ParseFloat(h["downloader_rate_per_minute"], 64); err == nil {
		s.DownloaderRatePerMinute = v
	}
	intField(h, "downloader_rate_burst", &s.DownloaderRateBurst)
	if v, err := strconv.ParseFloat(h["ip_rate_per_minute"], 64); err == nil {
		s.IPRatePerMinute = v
	}
	intField(h, "ip_rate_burst", &s.IPRateBurst)
	s.IgnoreGlobalBlocks = h["ignore_global_blocks"] == "1"
	s.LimitGroups = decodeGroups(h["limit_groups"])
	s.BackfeedSecret = h["backfeed_secret"]
	intField(h, "bloom_capacity", &s.BloomCapacity)
	intField(h, "bloom_words", &s.BloomWords)
	if kind := h["bloom_kind"]; kind != "" {
		s.BloomKind = kind
	}
	intField(h, "offload_above", &s.OffloadAbove)
	intField(h, "offload_segment", &s.OffloadSegment)
	intField(h, "recent_done", &s.RecentDone)
	intField(h, "event_log", &s.EventLog)
	// A project made before max_claims existed keeps reclaiming forever
	// until an operator sets it: off, not the new projects' default.
	s.MaxClaims = 0
	intField(h, "max_claims", &s.MaxClaims)
	if to := h["fail_report_to"]; to != "" {
		s.FailReportTo = to
	}
	if mode := h["done_mode"]; mode != "" {
		s.DoneMode = mode
	}
	if v, err := strconv.ParseFloat(h["bloom_fp_rate"], 64); err == nil {
		s.BloomFPRate = v
	}
	intField(h, "downloader_budget", &s.DownloaderBudget)
	intField(h, "claims_limit", &s.ClaimsLimit)
	s.ReclaimEnabled = h["reclaim_enabled"] == "1"
	if v, err := strconv.ParseInt(h["reclaim_ttl_ms"], 10, 64); err == nil {
		s.ReclaimTTL = Duration(time.Duration(v) * time.Millisecond)
	}
	intField(h, "max_multi", &s.MaxMulti)
	intField(h, "log_length", &s.LogLength)
	_ = json.Unmarshal([]byte(h["upload_targets"]), &s.UploadTargets)
	_ = json.Unmarshal([]byte(h["extra"]), &s.Extra)
	return s
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func intField(h map[string]string, name string, dst *int) {
	if v, err := strconv.Atoi(h[name]); err == nil {
		*dst = v
	}
}

// Duration is a time.Duration that reads and writes JSON as "1h30m", and
// also reads a number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads "90m" or 5400 (seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var text string
	if err := json.Unmarshal(b, &text); err == nil {
		v, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Errorf("bad duration %q: %w", text, err)
		}
		*d = Duration(v)
		return nil
	}
	var seconds float64
	if err := json.Unmarshal(b, &seconds); err != nil {
		return fmt.Errorf("duration must be a string like \"6h\" or a number of seconds")
	}
	*d = Duration(time.Duration(seconds * float64(time.Second)))
	return nil
}

// jsonCompact appends src without insignificant space; src must be valid.
func jsonCompact(dst, src []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, src); err != nil {
		return append(dst, src...)
	}
	return append(dst, b.Bytes()...)
}

// SecretFingerprint names a secret in logs without revealing it: the first
// 8 hex digits of its SHA-256 ("" for no secret). Two fingerprints differ
// when the secrets do, so an operator can tell which secret is set.
func SecretFingerprint(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}
