// Package ipmetrics is the BitTorrent tracker's unique-IP metrics (seed
// 002): each announcing IP registers against each metric at most once per
// 30 days,
//
//	users
//	countries.<cc>.users
//	countries.<cc>.cities.<city>.users
//	countries.<cc>.postcodes.<postcode>.users
//
// and the same four per torrent (shown as torrents.<info-hash>.…). Each
// metric has an all-time count ("<metric>") and one per calendar month in
// UTC ("<metric>.<YYYY-MM>"). Countries are ISO 3166 codes; a country,
// city or postcode the GeoIP database does not give is "unknown".
//
// # One script per registration
//
// ipm_register.lua checks the IP's markers, sets the absent or expired
// ones with the window's expiry and counts the IP in those metrics, in one
// step: concurrent announces of one IP (on any number of frontends) count
// it once. btstat's GET then SETEX counted it twice.
//
// # Keys and cluster slots
//
// A registration is two scripts, each on one slot (btstore/keys.go): the global
// metrics under one of btstore.IPMShards shard tags, chosen by a hash of the IP, so
// registrations spread over 16 slots instead of one; and the per-torrent
// metrics under the torrent's own tag. A global count sums the shards;
// each IP lives in exactly one shard, so the sum counts no IP twice.
//
// # Markers
//
// Redis 7.0 has no expiry per hash field, and a string key per (metric,
// IP) as btstat kept costs a key's overhead each. So one HASH per IP (per
// shard, and per torrent) holds a field per metric, short codes ("u",
// "c"+country, …), each field's value its expiry; the key's TTL is the
// latest of them. `hoard-bench ipmetrics-memory` measures the bytes.
//
// # The rolling window against calendar months
//
// An IP counts in a metric when it has no live marker; the marker lives
// 30 days from that count. So a month's count is the IPs whose window
// began in that month, not every IP active in it: an IP seen on Jan 20
// and again on Feb 5 counts in January only; seen every day from Jan 20 it
// counts on Jan 20 and again on Feb 19 (30 days later), so in both months;
// an IP active all of February but first seen on Jan 20 is in February's
// count only from Feb 19. Monthly counts therefore undercount a month's
// active users (by those still within a window begun the month before),
// and the all-time count is registrations (one per IP per 30-day
// window), not distinct IPs ever. A marker set at t expires at exactly
// t + 30 days: an announce at that instant counts again.
//
// # Off the announce path
//
// The tracker's listeners hand each accepted announce's (IP, torrent) to
// a Recorder: a bounded queue that drops (and counts) rather than waits,
// one batcher that pipelines the scripts, and a cache of the pairs and
// IPs this frontend registered within the last hour, whose repeats run no
// script.
package ipmetrics
