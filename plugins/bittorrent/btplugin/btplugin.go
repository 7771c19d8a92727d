// Package btplugin is the BitTorrent plugin: it implements hoard's plugin
// contract by running the announce/scrape listeners (HTTP and UDP, package
// bittorrent) in front of the Redis swarm store (package swarm). The host
// only configures it, asks for its stats and checks its health; announces
// and scrapes never cross the RPC boundary.
//
// cmd/hoard-bittorrent serves it over go-plugin; `hoard serve --plugin
// bittorrent` runs the same Factory in-process.
package btplugin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The scoring item type and job (seed 002).
const (
	ScoreItemType = "score"
	ScoreJob      = "score"
)

// The unseeded reaper's job and item types (seed 000): one item type per
// step, each named by its item prefix.
const ReaperJob = "reaper"

// OrphansJob is orphan cleanup's job (seed 003): one bounded tick of
// package orphans' walks per period.
const OrphansJob = "orphans"

// RepairJob is the swarm store's repair (swarm.Store.Repair): the global
// counters, indexes and user sets recomputed from per-torrent truth, once
// per period (1h) on one frontend, under the host's job lease rather than
// a loop and a lease of the store's own.
const RepairJob = "repair"

// SweepJob is the swarm store's expiry sweep (swarm.Store.Sweep): peers
// whose deadline passed, removed from every swarm the due index names,
// once per period (15s) on one frontend, under the host's job lease; the
// expired-key events remain the fast path, the sweep their backstop.
const SweepJob = "sweep"

var reaperSteps = []reaper.Step{reaper.NotifyInitial, reaper.NotifyFinal, reaper.Remove}

func isReaperItemType(name string) bool {
	for _, step := range reaperSteps {
		if name == string(step) {
			return true
		}
	}
	return false
}

// Version is the plugin's version, reported in Describe.
const Version = "1.0.0"

// Settings is the plugin's settings document (hoard serve
// --plugin-settings bittorrent=JSON). Durations are Go durations ("30m").
type Settings struct {
	// Mode is "open" (any info-hash, no passkey) or "private" (registered
	// torrents, passkeys, whitelisted clients).
	Mode string `json:"mode"`
	// HTTP, UDP4 and UDP6 are listen addresses; "" turns one off. The
	// defaults serve loopback only: a tracker open to the world is a
	// decision for the operator.
	HTTP string `json:"http"`
	UDP4 string `json:"udp4"`
	UDP6 string `json:"udp6"`
	// Interval and MinInterval are sent to clients (30m, 15m); peers are
	// dropped after two intervals without an announce.
	Interval    string `json:"interval"`
	MinInterval string `json:"min_interval"`
	// DefaultNumWant and MaxNumWant bound the peers per announce (50, 100).
	DefaultNumWant int `json:"default_numwant"`
	MaxNumWant     int `json:"max_numwant"`
	// UDPSecret signs UDP connection IDs (hex, at least 16 bytes); empty
	// picks a random one per process.
	UDPSecret string `json:"udp_secret"`
	// ProxyHeader names the header carrying the client address (e.g.
	// X-Forwarded-For), believed only from TrustedProxies (CIDRs).
	ProxyHeader    string   `json:"proxy_header"`
	TrustedProxies []string `json:"trusted_proxies"`
	// HnRMinSeedTime and HnRMinRatio define a hit-and-run (private mode).
	HnRMinSeedTime string  `json:"hnr_min_seed_time"`
	HnRMinRatio    float64 `json:"hnr_min_ratio"`
	// DeletedReasonTTL is how long a torrent the site deleted with a
	// reason answers that reason to clients (72h); then "unregistered
	// torrent".
	DeletedReasonTTL string `json:"deleted_reason_ttl"`
	// FullScrape serves a scrape without info_hash (every torrent with
	// peers), gzipped, cached and rate-limited; off by default.
	FullScrape FullScrapeSettings `json:"full_scrape"`
	// AnnouncePipelines is how many shared pipelines carry concurrent
	// announces to Redis (0: 4); -1 sends each announce alone.
	AnnouncePipelines int `json:"announce_pipelines"`
	// Limits bound what one address or passkey may cost the tracker.
	Limits LimitSettings `json:"limits"`
	// Accounting is credited transfer (private mode): on unless Off.
	Accounting AccountingSettings `json:"accounting"`
	// Scoring is the decay-policy scoring of torrents (seed 002); see
	// scoring.Settings. Off unless "enabled" is true.
	Scoring json.RawMessage `json:"scoring,omitempty"`
	// Reaper is the unseeded reaper (seed 000, private mode); see
	// reaper.Settings. Off unless "enabled" is true.
	Reaper json.RawMessage `json:"reaper,omitempty"`
	// Outbox is the durable outbox of events for the site (the reaper's
	// notices, removals, claims, rewards); see outbox.Settings. Created
	// when the section is given; it pushes to a webhook when it names
	// one, else the site polls the admin API.
	Outbox json.RawMessage `json:"outbox,omitempty"`
	// Metrics is the unique-IP metrics (seed 002) by country, city and
	// postcode; see ipmetrics.Settings. Off unless "enabled" is true.
	Metrics json.RawMessage `json:"metrics,omitempty"`
	// Orphans is orphan cleanup (seed 003); see orphans.Settings. Off
	// unless "enabled" is true.
	Orphans json.RawMessage `json:"orphans,omitempty"`
	// PublicTopTorrents is how many torrents by score the public tracker
	// page shows (GET /tracker/bittorrent.json); 0, the default, shows
	// none, since info-hashes are private on a private tracker.
	PublicTopTorrents int `json:"public_top_torrents,omitempty"`
}

// LimitSettings bound what one address (an IPv4 address or an IPv6 /64)
// or one passkey may cost the tracker, so no client grows Redis without
// bound; see bittorrent.GuardConfig. Zero takes the default; the rates
// and misses are counted per frontend.
type LimitSettings struct {
	// AnnounceRate is the sustained announces per second per address (5),
	// AnnounceBurst how many at once (500); -1 turns the rate off.
	AnnounceRate  float64 `json:"announce_rate"`
	AnnounceBurst int     `json:"announce_burst"`
	// PasskeyMisses is how many different unknown passkeys an address may
	// present per PasskeyMissWindow (10 per 10m) before its requests with
	// a passkey are refused unread; -1 turns it off.
	PasskeyMisses     int    `json:"passkey_misses"`
	PasskeyMissWindow string `json:"passkey_miss_window"`
	// Addresses bounds the addresses a frontend tracks (131072).
	Addresses int `json:"addresses"`
	// MaxPeersPerTorrent bounds the peers one user (private mode, 5) or
	// one address (open mode, 20) may have in one torrent's swarm; -1
	// turns it off. See swarm.Config.MaxPeersPerOwner.
	MaxPeersPerTorrent int `json:"max_peers_per_torrent"`
	// FloodInterval is flood control (swarm.Config.FloodInterval): a
	// peer's announce without an event sooner than this after its last
	// accepted one is refused. "auto" is 90% of min_interval (clients
	// time their announces from when they sent the last, and a request's
	// delay varies); "" (the default) turns it off, since a client's
	// "force reannounce" button would be refused.
	FloodInterval string `json:"flood_interval"`
	// FloodWindow (1h) and FloodReportAfter (10; -1: never) make a peer
	// refused FloodReportAfter times in one window a repeat offender,
	// reported to the site as a "flood" outbox event (with an outbox).
	FloodWindow      string `json:"flood_window"`
	FloodReportAfter int    `json:"flood_report_after"`
}

// AccountingSettings configure credited transfer (swarm's credit.go,
// docs/bittorrent-site.md "Credited transfer").
type AccountingSettings struct {
	// Off keeps the raw transfer only: nothing is credited and no token
	// is used or reported (swarm.Config.NoAccounting).
	Off bool `json:"off"`
	// FeedInterval is how often each frontend feeds the changed figures to
	// the outbox (10s). FeedBackstop is parsed and unused since S5 (s43):
	// the rows are held in the frontend's memory, with no mark to lose;
	// kept so settings that name it stay valid. The feed runs with an
	// outbox, in private mode, with accounting on.
	FeedInterval string `json:"feed_interval"`
	FeedBackstop string `json:"feed_backstop"`
	// The transfer ledger and the cheat signals (swarm.WatchConfig), with
	// accounting on; 0 (false) turns each off. LedgerEntries (20) is how
	// many announces with transfer each user-torrent record keeps; a
	// signal fires once per user, torrent and SignalPeriod (24h) as a
	// "cheat" outbox event: upload with no leecher (on), an upload rate
	// above SignalMaxUploadRate (bytes/s, 1 GiB/s), a user's download
	// above the torrent's size x SignalDownloadFactor (3), more than
	// SignalMaxAddresses (5) addresses within SignalAddressWindow (1h).
	LedgerEntries        int     `json:"ledger_entries"`
	SignalPeriod         string  `json:"signal_period"`
	SignalNoLeecher      bool    `json:"signal_no_leecher"`
	SignalMaxUploadRate  int64   `json:"signal_max_upload_rate"`
	SignalDownloadFactor float64 `json:"signal_download_factor"`
	SignalMaxAddresses   int     `json:"signal_max_addresses"`
	SignalAddressWindow  string  `json:"signal_address_window"`
}

// Defaults of the ledger and the cheat signals (AccountingSettings).
const (
	DefaultLedgerEntries        = 20
	DefaultSignalMaxUploadRate  = 1 << 30 // bytes/s: 8.6 Gbit/s, above what one torrent's peer sustains
	DefaultSignalDownloadFactor = 3.0     // a whole download three times over: rechecks and restarts stay under it
	DefaultSignalMaxAddresses   = 5       // home, seedbox, work, phone, and one to spare
)

// watch fills in the store's ledger and cheat signals.
func (a AccountingSettings) watch(cfg *swarm.Config, duration func(name, text string) (time.Duration, error)) error {
	w := swarm.WatchConfig{LedgerEntries: a.LedgerEntries, NoLeecher: a.SignalNoLeecher, MaxUploadRate: a.SignalMaxUploadRate,
		DownloadFactor: a.SignalDownloadFactor, MaxAddresses: a.SignalMaxAddresses}
	var err error
	if w.SignalPeriod, err = duration("accounting.signal_period", a.SignalPeriod); err != nil {
		return err
	}
	if w.AddressWindow, err = duration("accounting.signal_address_window", a.SignalAddressWindow); err != nil {
		return err
	}
	check := swarm.Config{Watch: w}
	if _, err := check.WithDefaults(); err != nil {
		return fmt.Errorf("bittorrent settings: accounting: %w", err)
	}
	cfg.Watch = w
	return nil
}

// FullScrapeSettings turn full scrapes on (bittorrent.FullScrapeConfig):
// a scrape with no info_hash answers every torrent with peers, gzipped,
// from a body built at most every Every ("5m") and shared, at most once
// per PerAddress ("1m") from one address. Off unless Enabled.
type FullScrapeSettings struct {
	Enabled    bool   `json:"enabled"`
	Every      string `json:"every"`
	PerAddress string `json:"per_address"`
}

func (f FullScrapeSettings) config(source bittorrent.FullScraper) (bittorrent.FullScrapeConfig, error) {
	if !f.Enabled {
		if f.Every != "" || f.PerAddress != "" {
			return bittorrent.FullScrapeConfig{}, errors.New(`bittorrent settings: full_scrape.every and per_address need "enabled": true`)
		}
		return bittorrent.FullScrapeConfig{}, nil
	}
	cfg := bittorrent.FullScrapeConfig{Source: source}
	for _, d := range []struct {
		name, text string
		to         *time.Duration
	}{{"every", f.Every, &cfg.Every}, {"per_address", f.PerAddress, &cfg.PerAddress}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return cfg, fmt.Errorf("bittorrent settings: full_scrape.%s %q is not a positive duration like 5m", d.name, d.text)
		}
		*d.to = v
	}
	return cfg, nil
}

func (l LimitSettings) guard() (*bittorrent.Guard, error) {
	var window time.Duration
	if l.PasskeyMissWindow != "" {
		d, err := time.ParseDuration(l.PasskeyMissWindow)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bittorrent settings: limits.passkey_miss_window %q is not a duration like 10m", l.PasskeyMissWindow)
		}
		window = d
	}
	if l.AnnounceRate < 0 && l.AnnounceRate != -1 || l.PasskeyMisses < -1 {
		return nil, errors.New("bittorrent settings: limits.announce_rate and limits.passkey_misses are -1 (off), 0 (default) or positive")
	}
	g, err := bittorrent.NewGuard(bittorrent.GuardConfig{
		AnnounceRate: l.AnnounceRate, AnnounceBurst: l.AnnounceBurst,
		PasskeyMisses: l.PasskeyMisses, PasskeyMissWindow: window, MaxAddresses: l.Addresses,
	})
	if err != nil {
		return nil, fmt.Errorf("bittorrent settings: limits: %w", err)
	}
	return g, nil
}

// flood fills in the store's flood control from the limits: the
// interval defaults to 90% of min_interval, itself Interval/2 by default.
func (l LimitSettings) flood(cfg *swarm.Config, duration func(name, text string) (time.Duration, error)) error {
	var err error
	if cfg.FloodWindow, err = duration("limits.flood_window", l.FloodWindow); err != nil {
		return err
	}
	if l.FloodReportAfter < -1 {
		return errors.New("bittorrent settings: limits.flood_report_after is -1 (never), 0 (default) or positive")
	}
	cfg.FloodReportAfter = l.FloodReportAfter
	switch l.FloodInterval {
	case "":
		return nil
	case "auto":
		minInterval := cfg.MinInterval
		if minInterval == 0 {
			interval := cfg.Interval
			if interval == 0 {
				interval = bittorrent.DefaultInterval
			}
			minInterval = interval / 2
		}
		cfg.FloodInterval = minInterval * 9 / 10
		return nil
	}
	if cfg.FloodInterval, err = duration("limits.flood_interval", l.FloodInterval); err != nil {
		return err
	}
	if cfg.FloodInterval == 0 {
		return errors.New(`bittorrent settings: limits.flood_interval is a duration, "auto" (90% of min_interval) or "" (off)`)
	}
	return nil
}

// Defaults for Settings.
const (
	DefaultHTTP = "127.0.0.1:6969"
	DefaultUDP4 = "127.0.0.1:6969"
	DefaultUDP6 = "[::1]:6969"
)

func (s *Settings) parse(raw json.RawMessage) (swarm.Config, bittorrent.AnnouncePolicy, error) {
	*s = Settings{Mode: "open", HTTP: DefaultHTTP, UDP4: DefaultUDP4, UDP6: DefaultUDP6, Interval: "30m",
		Accounting: AccountingSettings{LedgerEntries: DefaultLedgerEntries, SignalNoLeecher: true,
			SignalMaxUploadRate: DefaultSignalMaxUploadRate, SignalDownloadFactor: DefaultSignalDownloadFactor,
			SignalMaxAddresses: DefaultSignalMaxAddresses}}
	if len(raw) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(s); err != nil {
			return swarm.Config{}, bittorrent.AnnouncePolicy{}, fmt.Errorf("bittorrent settings: %w", err)
		}
	}
	if s.PublicTopTorrents < 0 || s.PublicTopTorrents > scoring.MaxTop {
		return swarm.Config{}, bittorrent.AnnouncePolicy{}, fmt.Errorf("bittorrent settings: public_top_torrents must be from 0 to %d, got %d", scoring.MaxTop, s.PublicTopTorrents)
	}
	duration := func(name, text string) (time.Duration, error) {
		if text == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("bittorrent settings: %s %q is not a duration like 30m", name, text)
		}
		return d, nil
	}
	var cfg swarm.Config
	var policy bittorrent.AnnouncePolicy
	var err error
	switch s.Mode {
	case "open":
	case "private":
		cfg.Private = true
		policy.RequirePasskey = true
	default:
		return cfg, policy, fmt.Errorf("bittorrent settings: mode %q must be open or private", s.Mode)
	}
	if cfg.Interval, err = duration("interval", s.Interval); err != nil {
		return cfg, policy, err
	}
	if cfg.MinInterval, err = duration("min_interval", s.MinInterval); err != nil {
		return cfg, policy, err
	}
	if cfg.HnR.MinSeedTime, err = duration("hnr_min_seed_time", s.HnRMinSeedTime); err != nil {
		return cfg, policy, err
	}
	cfg.HnR.MinRatio = s.HnRMinRatio
	if s.MaxNumWant < 0 || s.DefaultNumWant < 0 {
		return cfg, policy, errors.New("bittorrent settings: numwant limits must not be negative")
	}
	cfg.MaxNumWant = s.MaxNumWant
	if s.AnnouncePipelines < -1 || s.AnnouncePipelines > 64 {
		return cfg, policy, errors.New("bittorrent settings: announce_pipelines must be -1 (off), 0 (default) or up to 64")
	}
	cfg.AnnouncePipelines = s.AnnouncePipelines
	cfg.NoAccounting = s.Accounting.Off
	if cfg.FeedInterval, err = duration("accounting.feed_interval", s.Accounting.FeedInterval); err != nil {
		return cfg, policy, err
	}
	if cfg.FeedBackstopInterval, err = duration("accounting.feed_backstop", s.Accounting.FeedBackstop); err != nil {
		return cfg, policy, err
	}
	if err := s.Accounting.watch(&cfg, duration); err != nil {
		return cfg, policy, err
	}
	if s.Limits.MaxPeersPerTorrent < -1 {
		return cfg, policy, errors.New("bittorrent settings: limits.max_peers_per_torrent is -1 (off), 0 (default) or positive")
	}
	cfg.MaxPeersPerOwner = s.Limits.MaxPeersPerTorrent
	if cfg.DeletedReasonTTL, err = duration("deleted_reason_ttl", s.DeletedReasonTTL); err != nil {
		return cfg, policy, err
	}
	if err := s.Limits.flood(&cfg, duration); err != nil {
		return cfg, policy, err
	}
	if _, err := s.FullScrape.config(nil); err != nil {
		return cfg, policy, err
	}
	// One guard for both listeners: an address's allowance is per
	// frontend, whichever protocol it uses.
	if policy.Guard, err = s.Limits.guard(); err != nil {
		return cfg, policy, err
	}
	policy.Interval, policy.MinInterval = cfg.Interval, cfg.MinInterval
	policy.DefaultNumWant, policy.MaxNumWant = s.DefaultNumWant, s.MaxNumWant
	if s.HTTP == "" && s.UDP4 == "" && s.UDP6 == "" {
		return cfg, policy, errors.New("bittorrent settings: http, udp4 and udp6 are all off; nothing would be served")
	}
	return cfg, policy, nil
}

// Tracker is the plugin: a swarm store and its listeners.
type Tracker struct {
	logger *slog.Logger
	// failures logs the plugin's repeated failures (the outbox's webhook
	// deliveries) at most once a minute per kind and counts them all
	// (failures_total); it lives as long as the plugin, across Configure.
	failures *ratelog.Log

	mu     sync.Mutex
	rdb    redis.UniversalClient
	store  *swarm.Store
	http   *bittorrent.HTTPServer
	udp    *bittorrent.UDPServer
	cancel context.CancelFunc
	closed bool

	// scorer is nil when scoring is off; pool is nil when the host
	// offers no HostAPI or max_workers is -1.
	scorer *scoring.Scorer
	pool   *scoring.Pool
	host   plugins.HostAPI

	// reaper is nil when the reaper is off; reaperPool is nil when the
	// host offers no HostAPI or max_workers is -1.
	reaper     *reaper.Reaper
	reaperPool *scoring.Pool

	// outbox is nil when the settings have no "outbox" section.
	outbox *outbox.Outbox
	// publisher takes the reaper's events to the site (SetReaperPublisher).
	publisher reaper.Publisher

	// metrics and geo are nil when the unique-IP metrics are off (geo
	// also when no database is set).
	metrics *ipmetrics.Recorder
	geo     *ipmetrics.GeoDB
	// cleaner is nil when orphan cleanup is off; orphanTicks and
	// orphanTotals count its steps in this process, for Stats.
	cleaner      *orphans.Cleaner
	orphanTicks  int64
	orphanTotals orphans.Report
	// repairEvery is RepairJob's period, 0 (or less) when off;
	// sweepEvery is SweepJob's.
	repairEvery time.Duration
	sweepEvery  time.Duration
	// api is the plugin's own HTTP API (HandleRequest); nil until
	// Configure.
	api *btadmin.API
}

// SetReaperPublisher sets where the reaper's events go (the outbox); it
// applies from the next Configure. Without one they are dropped with a
// debug log.
func (t *Tracker) SetReaperPublisher(p reaper.Publisher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.publisher = p
}

var _ plugins.Plugin = (*Tracker)(nil)

// New is the plugin's Factory.
func New(_ context.Context, logger *slog.Logger) (plugins.Plugin, error) {
	if logger == nil {
		logger = slog.Default()
	}
	return &Tracker{logger: logger, failures: ratelog.New(ratelog.Config{Logger: logger.With("component", "outbox")})}, nil
}

// Configure connects to Redis, starts the swarm store's expiry and the
// listeners. A second Configure (after the host restarted the plugin's
// settings) replaces the first.
func (t *Tracker) Configure(ctx context.Context, cfg plugins.Config) error {
	var settings Settings
	storeCfg, policy, err := settings.parse(cfg.Settings)
	if err != nil {
		return err
	}
	scoreSettings, scorePolicy, err := scoring.ParseSettings(settings.Scoring, storeCfg.Private)
	if err != nil {
		return fmt.Errorf("bittorrent settings: %w", err)
	}
	reaperSettings, reaperPolicy, err := reaper.ParseSettings(settings.Reaper, storeCfg.Private)
	if err != nil {
		return fmt.Errorf("bittorrent settings: %w", err)
	}
	wantOutbox := len(settings.Outbox) > 0 && string(settings.Outbox) != "null"
	_, outboxPolicy, err := outbox.ParseSettings(settings.Outbox)
	if err != nil {
		return fmt.Errorf("bittorrent settings: %w", err)
	}
	metricsCfg, err := ipmetrics.ParseSettings(settings.Metrics)
	if err != nil {
		return fmt.Errorf("bittorrent settings: %w", err)
	}
	// The database is opened before the running configuration is closed,
	// so a bad path leaves the tracker as it was.
	var geo *ipmetrics.GeoDB
	if metricsCfg.Enabled && len(metricsCfg.GeoIPDB) > 0 {
		if geo, err = ipmetrics.OpenGeoDB(metricsCfg.GeoIPDB...); err != nil {
			return fmt.Errorf("bittorrent settings: metrics: %w", err)
		}
	}
	if cfg.Host == nil && reaperPolicy.MaxTotal > plugins.MaxTickEnqueue {
		// Without a host API the tick's result carries the items, and it
		// holds at most MaxTickEnqueue.
		reaperPolicy.MaxTotal = plugins.MaxTickEnqueue
	}
	// The announce path records reseed claims within the reaper's window.
	storeCfg.ReaperClaimWindow = reaperPolicy.ClaimWindow
	// The window is checked against the store's intervals with their
	// defaults filled in, before anything stops or starts.
	withDefaults, err := storeCfg.WithDefaults()
	if err != nil {
		_ = geo.Close()
		return fmt.Errorf("bittorrent settings: %w", err)
	}
	// The host schedules the repair (RepairJob): the store runs no loop
	// of its own for it.
	repairEvery := withDefaults.RepairInterval
	storeCfg.RepairInterval = -1
	sweepEvery := withDefaults.SweepInterval
	storeCfg.ExternalSweep = true
	orphanSettings, orphanPolicy, err := orphans.ParseSettings(settings.Orphans, withDefaults)
	if err != nil {
		_ = geo.Close()
		return fmt.Errorf("bittorrent settings: %w", err)
	}
	if err := t.Close(ctx); err != nil {
		_ = geo.Close()
		return err
	}
	t.mu.Lock()
	publisher := t.publisher
	t.mu.Unlock()
	rdb, err := redisurl.Dial(cfg.RedisURL)
	if err != nil {
		_ = geo.Close()
		return err
	}
	// The outbox is built (not started) before the store, which reports
	// flood control's repeat offenders to it.
	var ob *outbox.Outbox
	if wantOutbox {
		ob = outbox.New(rdb, outbox.Config{Policy: outboxPolicy, Logger: t.logger.With("component", "outbox"), Failures: t.failures})
		if publisher == nil {
			publisher = outboxPublisher{ob}
		}
		storeCfg.OnFlood = floodReporter{ob: ob, logger: t.logger.With("component", "flood"), window: withDefaults.FloodWindow,
			minInterval: withDefaults.MinInterval}.report
		storeCfg.OnToken = tokenReporter{ob: ob, logger: t.logger.With("component", "credit")}.report
		storeCfg.OnCheat = cheatReporter{ob: ob, logger: t.logger.With("component", "cheat")}.report
		if storeCfg.Private && !storeCfg.NoAccounting {
			storeCfg.OnFeed = newFeedDeliverer(ob).deliver
		}
	}
	storeCfg.Logger = t.logger.With("component", "swarm")
	store, err := swarm.New(rdb, storeCfg)
	if err != nil {
		_ = geo.Close()
		_ = rdb.Close()
		return err
	}
	var cleaner *orphans.Cleaner
	if orphanSettings.Enabled {
		orphanCfg := orphans.Config{Store: store.Config(), Policy: orphanPolicy, Logger: t.logger.With("component", "orphans")}
		if storeCfg.OnFeed != nil {
			orphanCfg.FeedDeleted = store.FeedDeletedRecords
		}
		if cleaner, err = orphans.New(rdb, orphanCfg); err != nil {
			_ = geo.Close()
			_ = store.Stop()
			_ = rdb.Close()
			return fmt.Errorf("bittorrent settings: %w", err)
		}
	}
	// The listeners outlive Configure's context: they run until Close.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var metrics *ipmetrics.Recorder
	undo := func() {
		cancel()
		if metrics != nil {
			_ = metrics.Stop()
		}
		_ = geo.Close()
		_ = store.Stop()
		_ = rdb.Close()
	}
	if err := store.Start(runCtx); err != nil {
		undo()
		return fmt.Errorf("swarm store: %w", err)
	}
	// The listeners see the store, or, with the metrics on, the store
	// behind a wrapper that hands each accepted announce's IP to the
	// recorder's queue (never waiting on Redis).
	var swarms bittorrent.Swarms = store
	if metricsCfg.Enabled {
		var locator ipmetrics.Locator = ipmetrics.NoGeo{}
		if geo != nil {
			locator = geo
		}
		metrics = ipmetrics.NewRecorder(ipmetrics.RecorderConfig{
			Store:   ipmetrics.NewStore(rdb, nil, metricsCfg.Window),
			Locator: locator, Logger: t.logger.With("component", "ipmetrics"),
			Queue: metricsCfg.Queue, Batch: metricsCfg.Batch, CacheSize: metricsCfg.CacheSize, CacheTTL: metricsCfg.CacheTTL,
		})
		if err := metrics.Start(runCtx); err != nil {
			undo()
			return fmt.Errorf("ipmetrics: %w", err)
		}
		swarms = observed{Swarms: store, rec: metrics}
	}
	var httpServer *bittorrent.HTTPServer
	if settings.HTTP != "" {
		var proxies []netip.Prefix
		for _, p := range settings.TrustedProxies {
			prefix, err := netip.ParsePrefix(p)
			if err != nil {
				undo()
				return fmt.Errorf("bittorrent settings: trusted proxy %q: %w", p, err)
			}
			proxies = append(proxies, prefix)
		}
		full, _ := settings.FullScrape.config(store) // checked by parse
		httpServer, err = bittorrent.NewHTTPServer(bittorrent.HTTPConfig{
			AnnouncePolicy: policy, Addr: settings.HTTP, Swarms: swarms, Logger: t.logger.With("component", "http"),
			ProxyHeader: settings.ProxyHeader, TrustedProxies: proxies, FullScrape: full,
		})
		if err == nil {
			err = httpServer.Start(runCtx)
		}
		if err != nil {
			undo()
			return fmt.Errorf("http listener: %w", err)
		}
	}
	var udpServer *bittorrent.UDPServer
	if settings.UDP4 != "" || settings.UDP6 != "" {
		var secret []byte
		if settings.UDPSecret != "" {
			if secret, err = hex.DecodeString(settings.UDPSecret); err != nil {
				undo()
				return fmt.Errorf("bittorrent settings: udp_secret is not hex: %w", err)
			}
		}
		udpServer, err = bittorrent.NewUDPServer(bittorrent.UDPConfig{
			AnnouncePolicy: policy, Addr4: settings.UDP4, Addr6: settings.UDP6, Swarms: swarms,
			Logger: t.logger.With("component", "udp"), Secret: secret,
		})
		if err == nil {
			err = udpServer.Start(runCtx)
		}
		if err != nil {
			if httpServer != nil {
				_ = httpServer.Stop()
			}
			undo()
			return fmt.Errorf("udp listener: %w", err)
		}
	}
	var scorer *scoring.Scorer
	var pool *scoring.Pool
	if scoreSettings.Enabled {
		scorer = scoring.New(rdb, scorePolicy, nil, t.logger.With("component", "scoring"))
		if cfg.Host != nil && scorePolicy.MaxWorkers > 0 {
			// The workers may start before the host has read Describe and
			// created the project: their claims fail and retry until then.
			pool = scoring.NewPool(scoring.PoolConfig{
				Host: cfg.Host, Project: scorePolicy.Project, Process: scorer.Process,
				Max: scorePolicy.MaxWorkers, Poll: scorePolicy.IdlePoll, Logger: t.logger.With("component", "scoring-pool"),
			})
			pool.Start(runCtx)
			go pool.Run(runCtx, scorePolicy.ScaleInterval)
		}
	}
	var reap *reaper.Reaper
	var reaperPool *scoring.Pool
	if reaperSettings.Enabled {
		reap = reaper.New(rdb, reaper.Config{Policy: reaperPolicy, Unregister: store.UnregisterTorrent,
			Publisher: publisher, Logger: t.logger.With("component", "reaper")})
		if cfg.Host != nil && reaperPolicy.MaxWorkers > 0 {
			// The pool is scoring's, which is generic: claim, process,
			// report done, release on stop. Processing applies the step
			// and publishes its events before the done (again, with the
			// same keys, if a worker died between the two); OnItemDone
			// applies it again, which changes nothing, so a done whose
			// event the host's capped log dropped still moved the state
			// forward.
			reaperPool = scoring.NewPool(scoring.PoolConfig{
				Host: cfg.Host, Project: reaperPolicy.Project, Worker: "reaper", Max: reaperPolicy.MaxWorkers,
				Process: func(ctx context.Context, item string) (json.RawMessage, error) {
					out, err := reap.Process(ctx, item)
					if errors.Is(err, reaper.ErrInvalid) {
						return json.Marshal(map[string]string{"error": err.Error()})
					}
					if err != nil {
						return nil, err
					}
					return json.Marshal(out)
				},
				Logger: t.logger.With("component", "reaper-pool"),
			})
			reaperPool.Start(runCtx)
			go reaperPool.Run(runCtx, 10*time.Second)
		}
	}
	if ob != nil {
		err := ob.SaveConfig(runCtx)
		if err == nil {
			err = ob.Start(runCtx)
		}
		if err != nil {
			if reaperPool != nil {
				reaperPool.Stop()
			}
			if pool != nil {
				pool.Stop()
			}
			if httpServer != nil {
				_ = httpServer.Stop()
			}
			if udpServer != nil {
				_ = udpServer.Stop()
			}
			undo()
			return fmt.Errorf("outbox: %w", err)
		}
	}
	api := t.newAPI(rdb, store, ob, reap, scorer, scorePolicy, metricsCfg.Window, settings.PublicTopTorrents)
	t.mu.Lock()
	t.api = api
	t.rdb, t.store, t.http, t.udp, t.cancel, t.closed = rdb, store, httpServer, udpServer, cancel, false
	t.outbox = ob
	t.scorer, t.pool, t.host = scorer, pool, cfg.Host
	t.reaper, t.reaperPool = reap, reaperPool
	t.metrics, t.geo = metrics, geo
	t.cleaner = cleaner
	t.repairEvery, t.sweepEvery = repairEvery, sweepEvery
	t.mu.Unlock()
	t.logger.Info("bittorrent tracker serving", "mode", settings.Mode, "http", t.httpAddr(), "udp4", t.udpAddr(false), "udp6", t.udpAddr(true),
		"scoring", scorer != nil, "scoring_workers", pool != nil, "reaper", reap != nil, "reaper_workers", reaperPool != nil,
		"outbox", ob != nil, "outbox_webhook", ob != nil && outboxPolicy.WebhookURL != nil,
		"metrics", metrics != nil, "geoip_db", metricsCfg.GeoIPDB)
	return nil
}

func (t *Tracker) httpAddr() string {
	if t.http == nil {
		return ""
	}
	return t.http.Addr()
}

func (t *Tracker) udpAddr(v6 bool) string {
	if t.udp == nil {
		return ""
	}
	if v6 {
		return t.udp.Addr6()
	}
	return t.udp.Addr4()
}

// Store is the swarm store, for in-process callers (tests, the admin API
// of a host that runs the plugin built in).
func (t *Tracker) Store() *swarm.Store {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.store
}

// Scorer is the scoring state, or nil when scoring is off (for in-process
// callers and tests).
func (t *Tracker) Scorer() *scoring.Scorer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.scorer
}

// Reaper is the unseeded reaper, or nil when it is off (for in-process
// callers and tests).
func (t *Tracker) Reaper() *reaper.Reaper {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reaper
}

// Outbox is the outbox of events for the site, or nil when the settings
// have none (for in-process callers: the reaper's publisher, tests).
func (t *Tracker) Outbox() *outbox.Outbox {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.outbox
}

// Metrics is the unique-IP metrics' recorder, or nil when they are off
// (for in-process callers: the admin API, tests).
func (t *Tracker) Metrics() *ipmetrics.Recorder {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.metrics
}

// observed is the store as the listeners see it with the metrics on: an
// accepted announce's IP and torrent go to the recorder's queue after the
// store answered. Refused and failed announces count nowhere.
type observed struct {
	bittorrent.Swarms
	rec *ipmetrics.Recorder
}

func (o observed) Announce(ctx context.Context, req *bittorrent.AnnounceRequest) (*bittorrent.AnnounceResponse, error) {
	resp, err := o.Swarms.Announce(ctx, req)
	if err == nil {
		o.rec.Observe(req.Addr.Addr(), req.InfoHash)
	}
	return resp, err
}

// AnnounceBatch batches when the store does, observing each accepted
// announce as Announce does.
func (o observed) AnnounceBatch(ctx context.Context, reqs []*bittorrent.AnnounceRequest, results []bittorrent.AnnounceResult) {
	batcher, ok := o.Swarms.(bittorrent.BatchAnnouncer)
	if !ok {
		for i, req := range reqs {
			results[i].Resp, results[i].Err = o.Announce(ctx, req)
		}
		return
	}
	batcher.AnnounceBatch(ctx, reqs, results)
	for i, r := range results {
		if r.Err == nil {
			o.rec.Observe(reqs[i].Addr.Addr(), reqs[i].InfoHash)
		}
	}
}

// AdminScopes are the roles an operator may give an account over the
// plugin's admin API ("plugin:bittorrent:<scope>"); the API that checks
// them owns them (btadmin.Scopes).
var AdminScopes = btadmin.Scopes

// Describe names the listeners as bound, and scoring's and the reaper's
// item types and jobs when they are on.
func (t *Tracker) Describe(context.Context) (plugins.Description, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := plugins.Description{Version: Version, AdminScopes: AdminScopes, AdminPages: btadmin.Pages}
	if t.scorer != nil {
		p := t.scorer.Policy()
		d.ItemTypes = append(d.ItemTypes, plugins.ItemType{
			Name: ScoreItemType, Project: p.Project, ItemPrefix: scoring.ItemPrefix, ReclaimTTL: p.ReclaimTTL,
			Order: plugins.OrderScore, DoneMode: "count",
		})
		d.Jobs = append(d.Jobs, plugins.Job{Name: ScoreJob, Period: p.Period})
	}
	if t.reaper != nil {
		p := t.reaper.Policy()
		for _, step := range reaperSteps {
			d.ItemTypes = append(d.ItemTypes, plugins.ItemType{
				Name: string(step), Project: p.Project, ItemPrefix: string(step) + ":", ReclaimTTL: p.ReclaimTTL,
				DoneMode: "count",
			})
		}
		d.Jobs = append(d.Jobs, plugins.Job{Name: ReaperJob, Period: p.Period})
	}
	if t.cleaner != nil {
		d.Jobs = append(d.Jobs, plugins.Job{Name: OrphansJob, Period: t.cleaner.Policy().Period})
	}
	if t.repairEvery > 0 {
		d.Jobs = append(d.Jobs, plugins.Job{Name: RepairJob, Period: t.repairEvery})
	}
	if t.store != nil {
		d.Jobs = append(d.Jobs, plugins.Job{Name: SweepJob, Period: t.sweepEvery})
	}
	if addr := t.httpAddr(); addr != "" {
		d.Listeners = append(d.Listeners, plugins.Listener{Name: "http", Network: "tcp", Address: addr})
	}
	if addr := t.udpAddr(false); addr != "" {
		d.Listeners = append(d.Listeners, plugins.Listener{Name: "udp4", Network: "udp4", Address: addr})
	}
	if addr := t.udpAddr(true); addr != "" {
		d.Listeners = append(d.Listeners, plugins.Listener{Name: "udp6", Network: "udp6", Address: addr})
	}
	return d, nil
}

// OnItemDone applies a score item's result to the torrent's score
// (scoring.Scorer.Apply, idempotent per round). A done without a usable
// result (a malformed item, or one reported without counts) is logged and
// acknowledged: delivering it again cannot fix it. Redis errors are
// returned, so the host delivers the event again.
func (t *Tracker) OnItemDone(ctx context.Context, ev plugins.ItemEvent) error {
	if isReaperItemType(ev.ItemType) {
		return t.reaperDone(ctx, ev)
	}
	scorer := t.Scorer()
	if scorer == nil || ev.ItemType != ScoreItemType {
		return nil
	}
	r, err := scoring.ParseResult(ev.Result)
	if err == nil {
		_, err = scorer.Apply(ctx, ev.Item, r)
	}
	if errors.Is(err, scoring.ErrInvalid) {
		t.logger.Warn("scoring: ignoring a done score item", "item", ev.Item, "downloader", ev.Downloader, "error", err)
		return nil
	}
	return err
}

// reaperDone applies a reaper step's done (reaper.Reaper.Apply: one
// script that re-checks and moves the state forward, idempotent). A
// malformed item is logged and acknowledged; Redis errors are returned,
// so the host delivers the event again.
func (t *Tracker) reaperDone(ctx context.Context, ev plugins.ItemEvent) error {
	reap := t.Reaper()
	if reap == nil {
		return nil
	}
	_, err := reap.Apply(ctx, ev.Item)
	if errors.Is(err, reaper.ErrInvalid) {
		t.logger.Warn("reaper: ignoring a done item", "item", ev.Item, "downloader", ev.Downloader, "error", err)
		return nil
	}
	return err
}

// OnReclaim: a score item whose claim expired needs nothing: the worker
// never wrote the score, and the queue hands the item out again.
func (t *Tracker) OnReclaim(_ context.Context, ev plugins.ItemEvent) error {
	if ev.ItemType == ScoreItemType {
		t.logger.Debug("scoring: a claim expired; the item is handed out again", "item", ev.Item, "worker", ev.Downloader)
	}
	return nil
}

// OnTick runs the "score" job: it tracks the torrents the tracker knows
// that are not scored yet (at 1.0), then queues one item per scored
// torrent with its score, through the HostAPI in batches when the host
// offers one, else in the tick's result (at most MaxTickEnqueue).
func (t *Tracker) OnTick(ctx context.Context, tick plugins.Tick) (plugins.TickResult, error) {
	t.mu.Lock()
	scorer, host := t.scorer, t.host
	t.mu.Unlock()
	var result plugins.TickResult
	if tick.Job == ReaperJob {
		return t.reaperTick(ctx, tick)
	}
	if tick.Job == OrphansJob {
		return result, t.orphansTick(ctx)
	}
	if tick.Job == RepairJob {
		return result, t.repairTick(ctx)
	}
	if tick.Job == SweepJob {
		return result, t.sweepTick(ctx)
	}
	if tick.Job != ScoreJob || scorer == nil {
		return result, nil
	}
	tracked, err := scorer.Discover(ctx)
	if err != nil {
		return result, err
	}
	project := scorer.Policy().Project
	dropped := 0
	// The cycle is the run's scheduled time: a run the host repeats
	// because the plugin died under it keeps it, so the repeat queues the
	// same items rather than a second round of the torrents done since.
	cycle := tick.Scheduled
	if cycle.IsZero() {
		cycle = tick.At
	}
	queued, err := scorer.Round(ctx, cycle, func(items []plugins.ScoredItem) error {
		if host != nil {
			_, err := host.EnqueueScored(ctx, project, items)
			return err
		}
		for _, it := range items {
			if len(result.Enqueue) >= plugins.MaxTickEnqueue {
				dropped++
				continue
			}
			result.Enqueue = append(result.Enqueue, plugins.QueueItem{Project: project, Item: it.Item, Score: it.Score})
		}
		return nil
	})
	if dropped > 0 {
		t.logger.Warn("scoring: more torrents than one tick may return without a host API; the rest wait for the next cycle",
			"dropped", dropped, "limit", plugins.MaxTickEnqueue)
	}
	// Logged when it queued something: a run that found nothing to do
	// is not news.
	level := slog.LevelDebug
	if queued-dropped > 0 || tracked > 0 {
		level = slog.LevelInfo
	}
	t.logger.Log(ctx, level, "scoring cycle queued", "tracked", tracked, "items", queued-dropped, "missed", tick.Missed)
	return result, err
}

// reaperTick runs the "reaper" job: the due steps, bounded by the caps,
// queued through the HostAPI when the host offers one, else in the
// tick's result. A run after a long pause (tick.Missed) is one run: the
// steps are computed from stored timestamps, so it queues the next step
// of each torrent only.
func (t *Tracker) reaperTick(ctx context.Context, tick plugins.Tick) (plugins.TickResult, error) {
	t.mu.Lock()
	reap, host := t.reaper, t.host
	t.mu.Unlock()
	var result plugins.TickResult
	if reap == nil {
		return result, nil
	}
	names, err := reap.Tick(ctx)
	if err != nil {
		return result, err
	}
	project := reap.Policy().Project
	if host != nil && len(names) > 0 {
		if _, err := host.Enqueue(ctx, project, names); err != nil {
			return result, err
		}
	} else {
		for _, name := range names {
			result.Enqueue = append(result.Enqueue, plugins.QueueItem{Project: project, Item: name})
		}
	}
	level := slog.LevelDebug
	if len(names) > 0 {
		level = slog.LevelInfo
	}
	t.logger.Log(ctx, level, "reaper run queued its due steps", "items", len(names), "missed", tick.Missed)
	return result, nil
}

// orphansTick runs one bounded step of orphan cleanup. A run after a
// pause is one step too: what is orphaned is read from stored
// timestamps, so nothing is owed for the missed runs.
func (t *Tracker) orphansTick(ctx context.Context) error {
	t.mu.Lock()
	cleaner := t.cleaner
	t.mu.Unlock()
	if cleaner == nil {
		return nil
	}
	r, err := cleaner.Tick(ctx)
	t.mu.Lock()
	t.orphanTicks++
	t.orphanTotals.Add(r)
	t.mu.Unlock()
	// A step logs what it changed, never that it ran: an idle tracker's
	// steps (every 10 s by default) only count, in Stats.
	changed := r.Removed() > 0 || r.PasskeysListed > 0 || r.PurgeKept > 0 || r.RegistryRestored > 0
	switch {
	case err != nil:
		t.logger.Warn("orphan cleanup step failed; the next one goes on", "removed", r.Removed(), "error", err)
	case changed:
		t.logger.Info("orphan cleanup removed records", "removed", r.Removed(), "torrents", r.Torrents,
			"user_records", r.UserRecords, "peer_records", r.PeerRecords, "user_entries", r.UserEntries,
			"registry", r.RegistryEntries, "score_keys", r.ScoreKeys, "score_revisions", r.ScoreRevisions,
			"ipm_keys", r.IPMetrics, "users_purged", r.UsersPurged, "purge_kept", r.PurgeKept,
			"passkeys_listed", r.PasskeysListed, "stale_listings", r.StaleListings)
	default:
		t.logger.Debug("orphan cleanup step found nothing to remove", "scanned", r.Scanned, "passes_finished", r.Passes)
	}
	return err
}

// sweepTick runs the expiry sweep once over every shard; it logs only
// what it removed.
func (t *Tracker) sweepTick(ctx context.Context) error {
	store := t.Store()
	if store == nil {
		return errors.New("bittorrent plugin is not configured")
	}
	removed, err := store.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("swarm sweep: %w", err)
	}
	if removed > 0 {
		t.logger.Debug("swarm sweep removed expired peers", "peers", removed)
	}
	return nil
}

// repairTick runs the swarm store's repair once, and logs what it fixed.
func (t *Tracker) repairTick(ctx context.Context) error {
	store := t.Store()
	if store == nil {
		return errors.New("bittorrent plugin is not configured")
	}
	r, err := store.Repair(ctx)
	if err != nil {
		return fmt.Errorf("swarm repair: %w", err)
	}
	level := slog.LevelDebug
	if r.IndexFixed+r.IndexRemoved+r.SwarmsIndexed+r.UserStates > 0 {
		level = slog.LevelInfo
	}
	t.logger.Log(ctx, level, "swarm repair done", "torrents", r.Torrents, "index_fixed", r.IndexFixed,
		"index_removed", r.IndexRemoved, "swarms_indexed", r.SwarmsIndexed, "user_states", r.UserStates)
	return nil
}

// orphanMetrics are orphan cleanup's counters in this process: its steps,
// what they read, the passes they finished and what they removed, by
// kind; none while it is off.
func (t *Tracker) orphanMetrics() []plugins.Metric {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cleaner == nil {
		return nil
	}
	r := t.orphanTotals
	counter := func(name, help string, v int, labels map[string]string) plugins.Metric {
		return plugins.Metric{Name: name, Help: help, Kind: plugins.Counter, Value: float64(v), Labels: labels}
	}
	out := []plugins.Metric{
		counter("orphans_steps_total", "Orphan cleanup steps this process ran.", int(t.orphanTicks), nil),
		counter("orphans_scanned_total", "Keys and entries orphan cleanup's walks read.", r.Scanned, nil),
		counter("orphans_passes_total", "Orphan cleanup walks that finished a pass over their keys.", r.Passes, nil),
		counter("orphans_passkeys_listed_total", "Mapped passkeys orphan cleanup found missing from their user's listing, and listed.", r.PasskeysListed, nil),
		counter("orphans_purge_kept_total", "Records of purged users kept because a peer was still counted.", r.PurgeKept, nil),
	}
	for _, kind := range []struct {
		name string
		n    int
	}{
		{"torrents", r.Torrents}, {"user_records", r.UserRecords}, {"peer_records", r.PeerRecords}, {"timeouts", r.Timeouts},
		{"reaper_states", r.ReaperStates}, {"seen_sets", r.SeenSets}, {"score_keys", r.ScoreKeys}, {"ipm_keys", r.IPMetrics},
		{"user_entries", r.UserEntries}, {"registry", r.RegistryEntries}, {"score_revisions", r.ScoreRevisions},
		{"users_purged", r.UsersPurged}, {"stale_listings", r.StaleListings},
	} {
		out = append(out, counter("orphans_removed_total", "Records orphan cleanup removed, by kind.", kind.n, map[string]string{"kind": kind.name}))
	}
	return out
}

// Orphans is orphan cleanup, or nil when it is off (for in-process
// callers and tests).
func (t *Tracker) Orphans() *orphans.Cleaner {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cleaner
}

// Stats are the global swarm counters and this process's listener counts.
func (t *Tracker) Stats(ctx context.Context) (plugins.Stats, error) {
	t.mu.Lock()
	store, httpServer, udpServer := t.store, t.http, t.udp
	t.mu.Unlock()
	if store == nil {
		return plugins.Stats{}, errors.New("bittorrent plugin is not configured")
	}
	global, err := store.Stats(ctx)
	if err != nil {
		return plugins.Stats{}, err
	}
	metric := func(name, help string, kind plugins.MetricKind, v float64, labels map[string]string) plugins.Metric {
		return plugins.Metric{Name: name, Help: help, Kind: kind, Value: v, Labels: labels}
	}
	out := plugins.Stats{Metrics: []plugins.Metric{
		metric("seeders", "Seeders in every swarm (lags by the flush interval).", plugins.Gauge, float64(global.Seeders), nil),
		metric("leechers", "Leechers in every swarm.", plugins.Gauge, float64(global.Leechers), nil),
		metric("snatches", "Completed downloads ever counted.", plugins.Gauge, float64(global.Snatches), nil),
		metric("swarm_announces", "Announces recorded by every frontend.", plugins.Gauge, float64(global.Announces), nil),
		metric("swarm_scrapes", "Scrapes answered by every frontend.", plugins.Gauge, float64(global.Scrapes), nil),
		metric("swarm_requests", "Announces and scrapes that reached the store on every frontend, refused ones included.",
			plugins.Gauge, float64(global.Requests), nil),
		metric("peer_limit_refused_total", "Announces this process refused because their user (private) or address (open) had limits.max_peers_per_torrent peers on the torrent.",
			plugins.Counter, float64(store.PeerLimitRefused()), nil),
		metric("flood_refused_total", "Announces this process refused by flood control: a peer announced again sooner than limits.flood_interval.",
			plugins.Counter, float64(store.FloodRefused()), nil),
		metric("flood_reported_total", "Repeat offenders of flood control this process reported (limits.flood_report_after refusals in limits.flood_window).",
			plugins.Counter, float64(store.FloodReported()), nil),
		metric("cheats_fired_total", "Cheat signals this process fired (accounting.signal_*): each is a cheat outbox event.",
			plugins.Counter, float64(store.CheatsFired()), nil),
		metric("denied_total", "Announces this process refused by a deny list (a denied info-hash or client).",
			plugins.Counter, float64(store.Denials()), nil),
	}}
	add := func(listener string, s bittorrent.ListenerStats) {
		l := map[string]string{"listener": listener}
		out.Metrics = append(out.Metrics,
			metric("announces_total", "Announces this process answered.", plugins.Counter, float64(s.Announces), l),
			metric("scrapes_total", "Scrapes this process answered.", plugins.Counter, float64(s.Scrapes), l),
			metric("malformed_total", "Requests refused by the parser.", plugins.Counter, float64(s.Malformed), l),
			metric("refused_total", "Requests refused by policy (passkey, registration, whitelist).", plugins.Counter, float64(s.Refused), l),
			metric("internal_errors_total", "Requests that failed inside the tracker.", plugins.Counter, float64(s.InternalErrors), l),
			metric("rate_limited_total", "Announces refused because their address exceeded limits.announce_rate on this frontend.",
				plugins.Counter, float64(s.RateLimited), l),
			metric("passkey_blocked_total", "Requests refused unread because their address presented too many unknown passkeys (limits.passkey_misses).",
				plugins.Counter, float64(s.PasskeyBlocked), l),
			metric("passkey_misses_total", "Requests refused for an unknown passkey (also in refused_total).", plugins.Counter, float64(s.PasskeyMisses), l),
			metric("full_scrapes_total", "Full scrapes (no info_hash) this process answered (also in scrapes_total).", plugins.Counter, float64(s.FullScrapes), l),
		)
	}
	for _, c := range t.failures.Counts() {
		out.Metrics = append(out.Metrics, metric("failures_total",
			"Failures by kind (webhook_failed: webhook requests that failed; outbox_error: delivery rounds that failed on Redis); each kind is logged at most once a minute, this counts every one.",
			plugins.Counter, float64(c.Total), map[string]string{"kind": c.Kind}))
	}
	if httpServer != nil {
		add("http", httpServer.Stats())
	}
	if udpServer != nil {
		add("udp", udpServer.Stats())
	}
	t.mu.Lock()
	scorer, pool := t.scorer, t.pool
	t.mu.Unlock()
	if err := t.metricsStats(ctx, &out); err != nil {
		return plugins.Stats{}, err
	}
	if scorer != nil {
		count, err := scorer.Scored(ctx)
		if err != nil {
			return plugins.Stats{}, err
		}
		lastHour, err := scorer.ProcessedLastHour(ctx)
		if err != nil {
			return plugins.Stats{}, err
		}
		workers := 0
		if pool != nil {
			workers = pool.Size()
		}
		out.Metrics = append(out.Metrics,
			metric("torrents_count", "Torrents in scoring (seed 002's torrents.count).", plugins.Gauge, float64(count), nil),
			metric("torrents_processed", "Score results this process applied (seed 002's torrents.processed; rate over 1h for per hour).",
				plugins.Counter, float64(scorer.Applied()), nil),
			metric("torrents_processed_last_hour", "Score results applied in the last hour by every frontend.", plugins.Gauge, float64(lastHour), nil),
			metric("scoring_workers", "Scoring workers running in this process.", plugins.Gauge, float64(workers), nil),
		)
	}
	if ob := t.Outbox(); ob != nil {
		c, err := ob.Counts(ctx)
		if err != nil {
			return plugins.Stats{}, err
		}
		out.Metrics = append(out.Metrics,
			metric("outbox_pending", "Outbox events not yet delivered (being delivered included).", plugins.Gauge, float64(c.Pending), nil),
			metric("outbox_dead", "Outbox events whose attempts ran out, kept until an operator retries them.", plugins.Gauge, float64(c.Dead), nil),
			metric("outbox_appended", "Outbox events stored, by every frontend.", plugins.Gauge, float64(c.Appended), nil),
			metric("outbox_duplicates", "Outbox events not stored again: their key was seen within the dedup window.", plugins.Gauge, float64(c.Duplicates), nil),
			metric("outbox_delivered", "Outbox events delivered to the webhook or acknowledged by the site.", plugins.Gauge, float64(c.Delivered), nil),
			metric("outbox_attempts", "Outbox delivery attempts begun (one per event per request).", plugins.Gauge, float64(c.Attempts), nil),
			metric("outbox_failures", "Outbox delivery attempts that failed (non-2xx, timeout, refused).", plugins.Gauge, float64(c.Failures), nil),
		)
	}
	t.mu.Lock()
	reap := t.reaper
	t.mu.Unlock()
	if reap != nil {
		c, err := reap.Counts(ctx)
		if err != nil {
			return plugins.Stats{}, err
		}
		out.Metrics = append(out.Metrics, ReaperMetrics(c)...)
	}
	out.Metrics = append(out.Metrics, t.orphanMetrics()...)
	return out, nil
}

// ReaperMetrics are the reaper's counts as metrics: reaper_torrents by
// state and notice (at the last run), reaper_steps by step (in all).
func ReaperMetrics(c reaper.Counts) []plugins.Metric {
	torrents := func(state, notify string, v int64) plugins.Metric {
		return plugins.Metric{Name: "reaper_torrents", Help: "Torrents in the unseeded reaper's process at its last run, by state and notice.",
			Kind: plugins.Gauge, Value: float64(v), Labels: map[string]string{"state": state, "notify": notify}}
	}
	steps := func(step string, v int64) plugins.Metric {
		return plugins.Metric{Name: "reaper_steps", Help: "Steps the unseeded reaper has done, by step, over every frontend.",
			Kind: plugins.Gauge, Value: float64(v), Labels: map[string]string{"step": step}}
	}
	return []plugins.Metric{
		torrents("never", "initial", c.NeverInitial), torrents("never", "final", c.NeverFinal),
		torrents("unseeded", "initial", c.UnseededInitial), torrents("unseeded", "final", c.UnseededFinal),
		torrents("reseeded", "claim_window", c.ClaimWindows), torrents("reseeded", "rewards_waiting", c.RewardsWaiting),
		steps("initial", c.InitialDone), steps("final", c.FinalDone), steps("removed", c.Removed),
		steps("invited", c.Invited), steps("claims", c.Claims), steps("rewards", c.Rewards),
		steps("extensions", c.Extensions), steps("notices", c.Notices),
	}
}

// ReaperPolicy reads the reaper's policy from the plugin's settings
// document, for a host process that serves the reaper's admin calls;
// enabled is false when the reaper is off.
func ReaperPolicy(raw json.RawMessage) (policy reaper.Policy, enabled bool, err error) {
	var settings Settings
	storeCfg, _, err := settings.parse(raw)
	if err != nil {
		return reaper.Policy{}, false, err
	}
	s, p, err := reaper.ParseSettings(settings.Reaper, storeCfg.Private)
	if err != nil {
		return reaper.Policy{}, false, fmt.Errorf("bittorrent settings: %w", err)
	}
	return p, s.Enabled, nil
}

// ScoringPolicy reads scoring's policy from the plugin's settings, for a
// process that serves the scoring admin calls outside the plugin (hoard
// serve's admin API): its check of tracker URLs must allow what the
// plugin's settings allow (allow_private_targets, allowed_targets).
func ScoringPolicy(raw json.RawMessage) (scoring.Policy, error) {
	var settings Settings
	storeCfg, _, err := settings.parse(raw)
	if err != nil {
		return scoring.Policy{}, err
	}
	_, p, err := scoring.ParseSettings(settings.Scoring, storeCfg.Private)
	if err != nil {
		return scoring.Policy{}, fmt.Errorf("bittorrent settings: %w", err)
	}
	return p, nil
}

// metricsStats adds the unique-IP metrics' totals: users ever and this
// month across every torrent, and this process's recorder counters. No
// series per IP, country or torrent: those are the admin API's.
func (t *Tracker) metricsStats(ctx context.Context, out *plugins.Stats) error {
	rec := t.Metrics()
	if rec == nil {
		return nil
	}
	store := rec.Store()
	months, err := store.UsersByMonth(ctx, nil, []string{"", ipmetrics.LastMonths(store.Now(), 1)[0]})
	if err != nil {
		return err
	}
	s := rec.Stats()
	m := func(name, help string, kind plugins.MetricKind, v float64) plugins.Metric {
		return plugins.Metric{Name: name, Help: help, Kind: kind, Value: v}
	}
	out.Metrics = append(out.Metrics,
		m("unique_users", "Unique IPs counted by every frontend, each at most once per 30 days (seed 002's users).", plugins.Gauge, float64(months[0].Users)),
		m("unique_users_this_month", "Unique IPs first counted this calendar month (UTC) by every frontend.", plugins.Gauge, float64(months[1].Users)),
		m("metrics_observed_total", "Announces this process queued for the unique-IP metrics.", plugins.Counter, float64(s.Observed)),
		m("metrics_dropped_total", "Announces this process dropped because the metrics queue was full.", plugins.Counter, float64(s.Dropped)),
		m("metrics_cache_skipped_total", "Announces whose IP and torrent this process registered recently (no script run).", plugins.Counter, float64(s.Skipped)),
		m("metrics_registered_total", "Registrations this process ran (one or two scripts each).", plugins.Counter, float64(s.Registered)),
		m("metrics_failed_total", "Registrations this process lost to a failed pipeline.", plugins.Counter, float64(s.Failed)),
		m("metrics_queue", "Announces waiting in this process's metrics queue.", plugins.Gauge, float64(s.Queued)),
	)
	return nil
}

// Health checks Redis.
func (t *Tracker) Health(ctx context.Context) error {
	t.mu.Lock()
	rdb := t.rdb
	t.mu.Unlock()
	if rdb == nil {
		return errors.New("bittorrent plugin is not configured")
	}
	return rdb.Ping(ctx).Err()
}

// Close stops the listeners, then the store, then closes Redis. Safe to
// call twice.
func (t *Tracker) Close(context.Context) error {
	t.mu.Lock()
	httpServer, udpServer, store, rdb, cancel, pool := t.http, t.udp, t.store, t.rdb, t.cancel, t.pool
	t.http, t.udp, t.store, t.rdb, t.cancel, t.closed = nil, nil, nil, nil, nil, true
	t.scorer, t.pool, t.host = nil, nil, nil
	reaperPool, ob := t.reaperPool, t.outbox
	t.reaper, t.reaperPool, t.outbox = nil, nil, nil
	metrics, geo := t.metrics, t.geo
	t.metrics, t.geo = nil, nil
	t.cleaner = nil
	t.api = nil
	t.mu.Unlock()
	if ob != nil {
		ob.Stop() // a request in flight is abandoned; its events' lease ends and they are sent again
	}
	if pool != nil {
		pool.Stop() // releases the items its workers held
	}
	if reaperPool != nil {
		reaperPool.Stop()
	}
	var errs []error
	if httpServer != nil {
		errs = append(errs, httpServer.Stop())
	}
	if udpServer != nil {
		errs = append(errs, udpServer.Stop())
	}
	// After the listeners: nothing is observed any more, and Stop
	// registers what is queued while Redis is still open.
	if metrics != nil {
		errs = append(errs, metrics.Stop())
	}
	errs = append(errs, geo.Close())
	if store != nil {
		errs = append(errs, store.Stop())
	}
	if cancel != nil {
		cancel()
	}
	if rdb != nil {
		errs = append(errs, rdb.Close())
	}
	return errors.Join(errs...)
}

// outboxPublisher hands the reaper's events to the plugin's outbox, in
// batches of at most outboxBatch so one script stays short (a run's
// notices can name thousands of uploaders). A batch that fails is
// published again by the reaper with the same keys, and the outbox stores
// a key once within its dedup window, so nothing is lost or doubled.
type outboxPublisher struct{ ob *outbox.Outbox }

const outboxBatch = 500

func (p outboxPublisher) Publish(ctx context.Context, events []reaper.Event) error {
	for start := 0; start < len(events); start += outboxBatch {
		chunk := events[start:min(start+outboxBatch, len(events))]
		out := make([]outbox.Event, len(chunk))
		for i, e := range chunk {
			out[i] = outbox.Event(e)
		}
		if err := p.ob.Append(ctx, out); err != nil {
			return err
		}
	}
	return nil
}

// HandleRequest serves the plugin's own HTTP API (package btadmin): the
// admin calls and the tracker page's data, which the host forwards.
func (t *Tracker) HandleRequest(ctx context.Context, req plugins.Request) (plugins.Response, error) {
	t.mu.Lock()
	api := t.api
	t.mu.Unlock()
	if api == nil {
		return plugins.Response{}, errors.New("bittorrent plugin is not configured")
	}
	return api.HandleRequest(ctx, req)
}

// newAPI builds the plugin's HTTP API over the running parts. A part that
// is off (scoring, the outbox) still answers its read and admin calls
// over the same keys, as hoard served them before the plugin served its
// own API: the scores of a tracker whose scoring is paused, the events
// of an outbox nobody delivers. The reaper's calls answer 503 when it is
// off, for its policy comes from its settings.
func (t *Tracker) newAPI(rdb redis.UniversalClient, store *swarm.Store, ob *outbox.Outbox, reap *reaper.Reaper,
	scorer *scoring.Scorer, scorePolicy scoring.Policy, metricsWindow time.Duration, top int) *btadmin.API {
	logger := t.logger.With("component", "admin")
	scoringOn := scorer != nil
	if ob == nil {
		ob = outbox.New(rdb, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: logger})
	}
	if scorer == nil {
		scorer = scoring.New(rdb, scorePolicy, nil, logger)
	}
	metrics := ipmetrics.NewStore(rdb, nil, metricsWindow)
	return btadmin.NewAPI(&btadmin.Admin{Store: store, Outbox: ob, Reaper: reap, Scorer: scorer, ScoreOnRegister: scoringOn},
		&btadmin.MetricsAdmin{Store: metrics},
		&btadmin.TrackerViews{Scorer: scorer, Metrics: metrics, TopTorrents: top}, logger)
}
