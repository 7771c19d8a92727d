package btplugin

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
)

// SettingsSchema describes every key of the settings document (Settings
// and its sections), for `hoard config defaults` and `hoard config
// check`. Each default is the value that behaves as the key's absence
// does: a test parses a document of every default and compares it with
// the empty one, and checks that every field of every section is here.
func (t *Tracker) SettingsSchema(context.Context) (plugins.SettingsSchema, error) {
	return plugins.SettingsSchema{Keys: settingKeys()}, nil
}

func settingKeys() []plugins.SettingKey {
	d := func(v time.Duration) string { return shortDuration(v) }
	return []plugins.SettingKey{
		key("mode", "open", "open (any info-hash, no passkey) or private (registered torrents, passkeys, whitelisted clients)"),
		key("http", DefaultHTTP, "HTTP announce/scrape listen address; empty turns it off (the default serves loopback only)"),
		key("udp4", DefaultUDP4, "UDP (BEP 15) IPv4 listen address; empty turns it off"),
		key("udp6", DefaultUDP6, "UDP IPv6 listen address; empty turns it off"),
		key("interval", d(bittorrent.DefaultInterval), "announce interval sent to clients; a peer is dropped after two without an announce"),
		key("min_interval", "", "minimum announce interval sent to clients; empty: half the interval"),
		key("default_numwant", bittorrent.DefaultNumWant, "peers in a reply when the client names no numwant"),
		key("max_numwant", bittorrent.DefaultMaxNumWant, "most peers in a reply, whatever numwant asks"),
		secretKey("udp_secret", "signs UDP connection IDs (hex, at least 16 bytes); absent: a random one per process"),
		key("proxy_header", "", "header carrying the client's address (e.g. X-Forwarded-For), believed only from trusted_proxies"),
		key("trusted_proxies", []string{}, "proxy CIDRs whose proxy_header is believed"),
		key("hnr_min_seed_time", "", "private mode: seeding time under which a finished download is a hit-and-run; empty: none"),
		key("hnr_min_ratio", 0.0, "private mode: ratio under which a finished download is a hit-and-run; 0: none"),
		key("deleted_reason_ttl", "", "how long a torrent the site deleted with a reason answers that reason to clients, then \"unregistered torrent\"; empty: 72h"),
		key("full_scrape.enabled", false, "answer a scrape without info_hash with every torrent that has peers (gzipped, cached, rate-limited)"),
		key("full_scrape.every", "", "a full scrape's body is built at most this often and shared meanwhile; empty: 5m"),
		key("full_scrape.per_address", "", "one full scrape per address (IPv4 or IPv6 /64) this often; empty: 1m"),
		key("announce_pipelines", 4, "shared pipelines carrying concurrent announces to Redis; -1 sends each announce alone"),
		key("public_top_torrents", 0, "torrents by score on the public tracker page (/tracker/bittorrent.json); 0 shows none"),

		key("limits.announce_rate", float64(bittorrent.DefaultAnnounceRate), "sustained announces per second per address (IPv4 or IPv6 /64), per frontend; -1: no rate"),
		key("limits.announce_burst", bittorrent.DefaultAnnounceBurst, "announces one address may send at once"),
		key("limits.passkey_misses", bittorrent.DefaultPasskeyMisses, "different unknown passkeys an address may present per window before its passkey requests are refused unread; -1: off"),
		key("limits.passkey_miss_window", d(bittorrent.DefaultPasskeyMissWindow), "the window passkey_misses counts over"),
		key("limits.addresses", bittorrent.DefaultGuardAddresses, "addresses a frontend tracks for these limits"),
		key("limits.flood_interval", "", "refuse a peer's announce without an event sooner than this after its last accepted one; auto: 90% of min_interval; empty: off"),
		key("limits.flood_window", "", "window in which flood_report_after refusals make a peer a repeat offender, reported to the site; empty: 1h"),
		key("limits.flood_report_after", 0, "refusals in flood_window that report a repeat offender as a flood outbox event; 0: 10; -1: never"),
		key("accounting.off", false, "private mode: keep raw transfer only; no credited transfer (freeleech, windows, tokens) and no token events"),
		key("accounting.feed_interval", "", "how often each frontend feeds changed transfer figures to the outbox (private mode, with an outbox); empty: 10s"),
		key("accounting.feed_backstop", "", "unused since the feed's rows are held in memory (s43); still accepted"),
		key("accounting.ledger_entries", DefaultLedgerEntries, "announces with transfer each user-torrent record keeps in its ledger (admin API); 0: off"),
		key("accounting.signal_period", "", "a cheat signal fires at most once per user, torrent (addresses: user) and period; empty: 24h"),
		key("accounting.signal_no_leecher", true, "cheat signal: upload reported while the swarm had no other leecher since the peer's previous announce"),
		key("accounting.signal_max_upload_rate", int64(DefaultSignalMaxUploadRate), "cheat signal: an upload rate (bytes/s) over the time since the peer's previous announce above this; 0: off"),
		key("accounting.signal_download_factor", DefaultSignalDownloadFactor, "cheat signal: a user's raw download on a torrent above its registered size times this; 0: off"),
		key("accounting.signal_max_addresses", DefaultSignalMaxAddresses, "cheat signal: more distinct addresses (IPv4, IPv6 /64) than this for one user within signal_address_window; 0: off"),
		key("accounting.signal_address_window", "", "the window signal_max_addresses counts an address active in; empty: 1h"),
		key("limits.max_peers_per_torrent", 0, "peers one user (private) or address (open) may have in one swarm; 0: 5 private, 20 open; -1: off"),

		key("scoring.enabled", false, "turn on the decay-policy scoring of torrents"),
		key("scoring.project", scoring.DefaultProject, "hoard project the score items live in"),
		key("scoring.period", d(scoring.DefaultPeriod), "how often the score job queues one item per scored torrent"),
		key("scoring.max_peers", scoring.DefaultMaxPeers, "peers that make a swarm full"),
		key("scoring.new_fraction", 0.05, "share of max_peers that must be new for a full swarm to grow"),
		key("scoring.new_window", "720h", "an IP not seen on a torrent for this long is new again"),
		key("scoring.no_peers", 0.5, "score multiplier when a torrent has no peers"),
		key("scoring.few_peers", 0.8, "score multiplier with fewer than max_peers"),
		key("scoring.growing", 1.2, "score multiplier for a full swarm with enough new peers"),
		key("scoring.stale", 0.8, "score multiplier for a full swarm without"),
		key("scoring.min_score", 0.005, "a score below it removes the torrent from scoring"),
		key("scoring.removal", "", "what removal means: untrack or unrank; empty: untrack when open, unrank when private"),
		key("scoring.tombstone_ttl", "720h", "how long an untracked torrent's score record stays to recognise it"),
		key("scoring.reclaim_ttl", "10m", "a claimed score item not done within it is handed out again"),
		key("scoring.max_workers", 8, "scoring workers per frontend; -1 runs none (another process works the items)"),
		key("scoring.scale_interval", "10s", "how often the worker pool compares the backlog and resizes"),
		key("scoring.idle_poll", "2s", "how long an idle worker waits before asking again"),
		key("scoring.tracker_timeout", "15s", "bound on one announce to an external tracker, retries included"),
		key("scoring.tracker_retries", 2, "times a UDP exchange with an external tracker is sent again; -1: none"),
		key("scoring.tracker_numwant", 200, "numwant sent to external trackers"),
		key("scoring.tracker_grace", 24, "failed rounds in a row an external tracker keeps its score line; -1: none"),
		key("scoring.history", 50, "rounds each torrent's score history keeps"),
		key("scoring.allow_private_targets", false, "let external trackers be on loopback, private or link-local addresses"),
		key("scoring.allowed_targets", []string{}, "CIDRs or addresses external trackers may be on even so"),

		key("reaper.enabled", false, "turn on the unseeded reaper (private mode only)"),
		key("reaper.project", reaper.DefaultProject, "hoard project the step items live in"),
		key("reaper.period", d(reaper.DefaultPeriod), "how often the reaper job looks for due steps"),
		key("reaper.never_grace", d(reaper.DefaultNever.Grace), "a never-seeded upload's initial notice, after its creation"),
		key("reaper.never_final", d(reaper.DefaultNever.Final), "its final notice, after the initial"),
		key("reaper.never_removal", d(reaper.DefaultNever.Removal), "its removal, after the final notice"),
		key("reaper.unseeded_grace", d(reaper.DefaultUnseeded.Grace), "an unseeded torrent's initial notice, after its last seeder"),
		key("reaper.unseeded_final", d(reaper.DefaultUnseeded.Final), "its final notice, after the initial"),
		key("reaper.unseeded_removal", d(reaper.DefaultUnseeded.Removal), "its removal, after the final notice"),
		key("reaper.max_per_user", 200, "most steps per uploader in one run"),
		key("reaper.max_users", 2500, "most uploaders in one run"),
		key("reaper.max_total", 4000, "most steps in one run; the rest waits for the next"),
		key("reaper.requeue_after", "24h", "a queued step not done within it is queued again by a later run"),
		key("reaper.reclaim_ttl", "10m", "a claimed step whose worker died is handed out again after it"),
		key("reaper.max_workers", 2, "reaper workers per frontend; -1 runs none"),
		key("reaper.claim_window", "15m", "others who start seeding within it of the first reseed also win the claim"),
		key("reaper.reward_factor", 1.25, "a claim's reward is this times the torrent's value"),

		key("outbox.webhook_url", "", "http(s) URL the site's events are pushed to; empty: the site polls the admin API"),
		secretKey("outbox.webhook_secret", "HMAC-SHA256 key the webhook requests are signed with, at least 16 bytes; required with a webhook_url"),
		key("outbox.max_attempts", 20, "failed requests after which an event goes to the dead set"),
		key("outbox.backoff", "1s", "wait after the first failure, doubled per failure (with jitter)"),
		key("outbox.max_backoff", "1h", "longest wait between attempts"),
		key("outbox.timeout", "10s", "bound on one webhook request, connection to last byte"),
		key("outbox.batch_size", 100, "most events in one request"),
		key("outbox.poll", "1s", "how often an idle deliverer looks for due events"),
		key("outbox.keep_delivered", 1000, "delivered events kept readable (the newest)"),
		key("outbox.dedup_window", "168h", "an event whose idempotency key was appended within it is stored once"),
		key("outbox.dedup_max", 100000, "most idempotency keys the record keeps"),
		key("outbox.max_pending", 1000000, "an append that would leave more undelivered events is refused (the caller retries)"),
		key("outbox.allow_private_targets", false, "let the webhook be on loopback, private or link-local addresses"),
		key("outbox.allowed_targets", []string{}, "CIDRs or addresses the webhook may be on even so"),

		key("metrics.enabled", false, "turn on the unique-IP metrics by country, city and postcode"),
		key("metrics.geoip_db", []string{}, "MaxMind-format city databases (one path or several); none: every IP counts under unknown"),
		key("metrics.queue", ipmetrics.DefaultQueue, "announces waiting to be registered; a full queue drops, never blocks"),
		key("metrics.batch", ipmetrics.DefaultBatch, "most registrations one pipeline carries"),
		key("metrics.cache_size", ipmetrics.DefaultCacheSize, "recent (IP, torrent) pairs each frontend skips; -1: no cache"),
		key("metrics.cache_ttl", d(ipmetrics.DefaultCacheTTL), "how long one is skipped"),
		key("metrics.window", d(ipmetrics.DefaultWindow), "how long an IP stays counted"),

		key("orphans.enabled", false, "turn on orphan cleanup"),
		key("orphans.window", d(orphans.DefaultWindow), "protection window: only records untouched for longer are removed"),
		key("orphans.period", d(orphans.DefaultPeriod), "how often one bounded cleanup tick runs"),
		key("orphans.scan_count", orphans.DefaultScanCount, "COUNT of each SCAN/HSCAN call"),
		key("orphans.max_keys_per_tick", orphans.DefaultMaxKeysPerTick, "keys and entries one tick reads, per walk"),
		key("orphans.backstop_period", d(orphans.DefaultBackstopPeriod), "the SCAN walks (a backstop for records no due set names) begin a pass this long after the last one ended"),
	}
}

func key(path string, def any, help string) plugins.SettingKey {
	raw, err := json.Marshal(def)
	if err != nil {
		panic(err) // plain values
	}
	return plugins.SettingKey{Key: path, Default: raw, Help: help}
}

// secretKey is a key whose value a configuration file never holds; its
// default is empty.
func secretKey(path, help string) plugins.SettingKey {
	k := key(path, "", help)
	k.Secret = true
	return k
}

// shortDuration writes a duration as an operator would ("30m", "720h"),
// not as time.Duration.String does ("30m0s").
func shortDuration(v time.Duration) string {
	for _, unit := range []struct {
		size time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if v > 0 && v%unit.size == 0 {
			return strconv.FormatInt(int64(v/unit.size), 10) + unit.name
		}
	}
	return v.String()
}
