package queues

import (
	"strconv"
	"time"
)

// Every key of a project carries the project's hash tag "{slug}", so every
// script touches a single slot and the same code runs on one Redis and on
// Redis Cluster. All key names are built here and nowhere else; scripts
// receive them in KEYS and never build names of their own.

// ProjectsKey is the registry of project slugs (SET). It is global, so no
// script touches it.
const ProjectsKey = "hoard:projects"

func projectPrefix(slug string) string { return "hoard:{" + slug + "}:" }

// ConfigKey holds the project's settings (HASH field -> value).
func ConfigKey(slug string) string { return projectPrefix(slug) + "config" }

// QueueKey is one of the shared todo queues (LIST, served from the head).
func QueueKey(slug string, q Queue) string { return projectPrefix(slug) + string(q) }

// ReservedQueueKey holds items reserved for one downloader (LIST).
func ReservedQueueKey(slug, downloader string) string {
	return projectPrefix(slug) + "todo:d:" + downloader
}

// ReservedSetKey lists the downloaders that have a reserved queue (SET), so
// counts never need SCAN.
func ReservedSetKey(slug string) string { return projectPrefix(slug) + "reserved" }

// LegacyOutKey is where builds before out and deadlines were one set
// scored every claimed item by its claim time (ZSET). Nothing writes it
// now but a frontend of such a build during a rolling upgrade; claim.lua
// merges it into DeadlinesKey a slice per call and so drops it.
func LegacyOutKey(slug string) string { return projectPrefix(slug) + "out" }

// DeadlinesKey scores every claimed item by the time it may be reclaimed,
// claim time + TTL x times claimed, in ms (ZSET), except items out in a
// claim batch (BatchesKey), which share their batch's. Due reclaims are a
// range query on it (due batches are moved into it first), its size plus
// the batches' "out" is the count of items out, and listings page through
// it and the batches (the claim time is in the claim record, ClaimsKey).
func DeadlinesKey(slug string) string { return projectPrefix(slug) + "deadlines" }

// BatchesKey holds the project's claim batches (HASH): a claim of several
// items by the plain path shares one reclaim deadline, written once (field
// "i<id>": the batch's claim record and its items, "\n"-separated; "n<id>":
// how many of them are still out in it; "seq": the last id; "out": the
// items out in batches, which Counts adds to ZCARD of DeadlinesKey). An
// item's claim record names its batch (lua/prelude.lua); a due batch is
// moved to DeadlinesKey, item by item, before reclaims or the expiry log
// read it.
func BatchesKey(slug string) string { return projectPrefix(slug) + "batches" }

// BatchDeadlinesKey scores each claim batch by its reclaim deadline in ms
// (ZSET, batch id -> deadline).
func BatchDeadlinesKey(slug string) string { return projectPrefix(slug) + "batch_deadlines" }

// ClaimsKey maps a claimed item to its claim record
// "<times claimed> <claimed at ms> <downloader> <ip>" (HASH).
func ClaimsKey(slug string) string { return projectPrefix(slug) + "claims" }

// DoneKey holds completed items (SET).
func DoneKey(slug string) string { return projectPrefix(slug) + "done" }

// ExtrasKey maps an item to the JSON object of extra keys served with it
// (HASH). Only items queued with extras have an entry.
func ExtrasKey(slug string) string { return projectPrefix(slug) + "extras" }

// BudgetKey maps a downloader to the number of items it has out (HASH).
func BudgetKey(slug string) string { return projectPrefix(slug) + "budget" }

// StatsKey holds the project's counters (HASH).
func StatsKey(slug string) string { return projectPrefix(slug) + "stats" }

// DownloaderBytesKey maps a downloader to the bytes it uploaded (HASH).
func DownloaderBytesKey(slug string) string { return projectPrefix(slug) + "downloader_bytes" }

// DownloaderItemsKey maps a downloader to the items it completed (HASH).
func DownloaderItemsKey(slug string) string { return projectPrefix(slug) + "downloader_items" }

// DownloaderVersionKey maps a downloader to the script version it last used (HASH).
func DownloaderVersionKey(slug string) string { return projectPrefix(slug) + "downloader_version" }

// DomainBytesKey maps a file group of the done "bytes" map to its total (HASH).
func DomainBytesKey(slug string) string { return projectPrefix(slug) + "domain_bytes" }

// LogKey holds the most recent completions, newest first, capped (LIST).
func LogKey(slug string) string { return projectPrefix(slug) + "log" }

// BlockedKey maps a blocked nickname or IP to a JSON {reason, at, by} (HASH).
func BlockedKey(slug string) string { return projectPrefix(slug) + "blocked" }

// RateKey holds the GCRA theoretical arrival time of the project's request
// rate limit, in ms (STRING).
func RateKey(slug string) string { return projectPrefix(slug) + "rate" }

// ReleasedKey maps an item released back to todo:redo to
// "<times claimed> <released at ms> <claimants>" (HASH), so a late done from
// a claimant still completes it and the next claim continues its count. An
// entry lives exactly as long as the item waits in redo.
func ReleasedKey(slug string) string { return projectPrefix(slug) + "released" }

// GroupQueueKey holds the items of queue q that belong to limit group g
// (LIST): they are served only as fast as the group's rate allows, so the
// rest of q flows at full speed and no request scans for them.
func GroupQueueKey(slug string, q Queue, group string) string {
	return projectPrefix(slug) + string(q) + ":g:" + group
}

// GroupRateKey holds limit group g's GCRA theoretical arrival time (STRING).
func GroupRateKey(slug, group string) string { return projectPrefix(slug) + "rate:g:" + group }

// GroupsKnownKey lists every limit group that ever had sub-queues (SET), so
// a removed group's items can be found and routed back without SCAN.
func GroupsKnownKey(slug string) string { return projectPrefix(slug) + "groups_known" }

// DownloaderRateKey holds one downloader's request GCRA state (STRING).
func DownloaderRateKey(slug, downloader string) string {
	return projectPrefix(slug) + "rate:d:" + downloader
}

// IPRateKey holds one client IP's request GCRA state (STRING).
func IPRateKey(slug, ip string) string { return projectPrefix(slug) + "rate:ip:" + ip }

// GlobalBlockedKey maps a nickname or IP blocked in every project to a JSON
// BlockEntry (HASH). It is global, so no script touches it: frontends
// cache it and check it before the claim script runs.
const GlobalBlockedKey = "hoard:blocked"

// AdminLogKey keeps the project's recent operator changes (LIST, capped).
func AdminLogKey(slug string) string { return projectPrefix(slug) + "admin_log" }

// GlobalAdminLogKey keeps recent operator changes to global state (LIST, capped).
const GlobalAdminLogKey = "hoard:admin_log"

// HourlyKey holds the counters of one UTC hour (HASH: items_done,
// bytes_done, requests, requests_served, requests_served_reclaim). Each
// expires after HourlyRetention, so history stays bounded.
func HourlyKey(slug string, hour time.Time) string {
	return projectPrefix(slug) + "hourly:" + hour.UTC().Format("2006010215")
}

// SeriesMinuteKey holds one UTC day of per-minute completions (HASH), for
// the charts; it expires after two days.
func SeriesMinuteKey(slug string, t time.Time) string {
	return projectPrefix(slug) + "series:m:" + t.UTC().Format("20060102")
}

// SeriesHourKey holds one UTC year of per-hour completions (HASH); it
// expires after 400 days, so history is per-minute for a day and per-hour
// for a year whatever the project's age.
func SeriesHourKey(slug string, t time.Time) string {
	return projectPrefix(slug) + "series:h:" + t.UTC().Format("2006")
}

// SeriesDownloaderKey holds one UTC day of bytes per hour and downloader
// (HASH, field "HH nick"), for the top-downloaders chart; 8 days' worth.
func SeriesDownloaderKey(slug string, t time.Time) string {
	return projectPrefix(slug) + "series:d:" + t.UTC().Format("20060102")
}

// EventsChannel is the pub/sub channel every completion is announced on.
// It is one global channel so each frontend subscribes once.
const EventsChannel = "hoard:events"

// BloomMetaKey describes the project's backfeed Bloom filter (HASH: m bits
// and k hashes per generation, gens, count in the newest generation).
func BloomMetaKey(slug string) string { return projectPrefix(slug) + "bloom" }

// BloomKey holds one generation of the Bloom filter's bits (STRING).
func BloomKey(slug string, generation int) string {
	return projectPrefix(slug) + "bloom:" + strconv.Itoa(generation)
}

// BloomBucketKey holds one bucket of a "sets" generation of the filter
// (SET of 32-bit fingerprints, an intset; queues/bloomsets.go). Its name
// follows from the generation and the bucket number, so deleting the
// project's keys finds every bucket under the project's prefix.
func BloomBucketKey(slug string, generation int, bucket uint64) string {
	return projectPrefix(slug) + "bloom:" + strconv.Itoa(generation) + ":" + strconv.FormatUint(bucket, 10)
}

// RecentDoneKey holds the latest completions (ZSET item -> done at, ms) of a
// project whose done_mode discards done items, so a repeated done is still
// recognised; done.lua trims it to recent_done entries.
func RecentDoneKey(slug string) string { return projectPrefix(slug) + "recent_done" }

// DoneArchiveKey lists completions waiting to be appended to the project's
// archive files (done_mode archive); the offloader drains it.
func DoneArchiveKey(slug string) string { return projectPrefix(slug) + "done_archive" }

// RedoCancelledKey marks items completed while a released copy still
// waits in todo:redo or a group's redo sub-queue (HASH item -> 1): done.lua
// marks instead of scanning the list, claim.lua drops the copy when it
// pops it.
func RedoCancelledKey(slug string) string { return projectPrefix(slug) + "redo_cancelled" }

// QueuedKey indexes the items waiting in the project's list queues in
// Redis (SET): todo, backfeed, secondary, redo, the reserved queues and the
// limit groups' sub-queues. Enqueue, backfeed, release, refill and an
// aborted offload add to it, a claim's pop and an offload take from it, so
// an item is queued once and the queue counts tell the truth. Items in
// offloaded segments are not in it (they would cost Redis the memory the
// offload saves): an item queued again while a copy is on disk is found
// when the segment is refilled, and dropped then. The score-ordered queue
// needs no index: a ZSET holds a member once.
func QueuedKey(slug string) string { return projectPrefix(slug) + "queued" }

// EventsKey is the project's event log (STREAM), written when event_log is
// above 0: one entry per done call ("done") and per expired claim
// ("reclaim"), read by plugins through consumer groups.
func EventsKey(slug string) string { return projectPrefix(slug) + "events" }

// ExpiryCursorKey is the reclaim deadline (ms, STRING) up to which expired
// claims have been written to the event log; claim.lua writes the expiry
// of an item it reclaims only when its deadline is past the cursor, so
// each expiry is logged once.
func ExpiryCursorKey(slug string) string { return projectPrefix(slug) + "events:expired_to" }

// OffloadKey holds a project's offload counters (HASH): "seq", the last
// segment number handed out, "q:<queue>", the items of each shared queue
// that are on disk (or on their way there), and "archive:<node>", the
// completions in archive files in that frontend's data directory.
func OffloadKey(slug string) string { return projectPrefix(slug) + "offload" }

// SegmentsKey indexes a project's segment files (HASH id -> record "state
// queue count node created source"): every queue segment, and the archive
// files still being written or moved into place (a finished archive file
// has no record). A segment file whose id is not here is an orphan.
func SegmentsKey(slug string) string { return projectPrefix(slug) + "segments" }

// SegmentIndexKey holds the index of an on-disk segment's items (STRING,
// see segment_index.go): written with the segment's commit, dropped with
// its refill, so the public item status can say an item is offloaded
// without reading files that may be on another frontend's disk.
func SegmentIndexKey(slug, id string) string { return projectPrefix(slug) + "segment_index:" + id }

// StagingKey holds a segment's items (LIST) between taking them off a queue
// and the file being safely on disk.
func StagingKey(slug, id string) string { return projectPrefix(slug) + "staging:" + id }

// ListKey is a project key named by its suffix (a queue's list, e.g.
// "todo:g:users"), as segment records store their source.
func ListKey(slug, suffix string) string { return projectPrefix(slug) + suffix }

// FailedKey holds the project's failed items (HASH item -> JSON
// FailedItem record): items claimed max_claims times without a done, and
// items their claimant reported failed. An item here is in no other place
// until an operator requeues or deletes it.
func FailedKey(slug string) string { return projectPrefix(slug) + "failed" }

// HistoryKey holds the ended claims of items claimed more than once (HASH
// item -> "<downloader> <claimed at ms> <how it ended>" entries joined by
// ","): written when a claim ends without a done (a reclaim, a release, a
// failure report), never on a first claim, and dropped when the item is
// done, failed or requeued, so it is as small as the items being retried.
func HistoryKey(slug string) string { return projectPrefix(slug) + "history" }

// RecentDownloadersKey holds one five-minute bucket of completions per
// downloader (HASH, fields "i <nick>" items and "b <nick>" bytes), for each
// downloader's recent rate; a bucket expires after RecentBucketTTL, so at
// most a handful exist whatever the project's age.
func RecentDownloadersKey(slug string, t time.Time) string {
	return projectPrefix(slug) + "recent:d:" + t.UTC().Truncate(RecentBucket).Format("200601021504")
}

// Positions in claimProjectKeys of the keys that depend on more than the
// project (claim.lua's KEYS[2], KEYS[17..19]).
const (
	claimKeyReserved       = 1
	claimKeyDownloaderRate = 16
	claimKeyIPRate         = 17
	claimKeyHourly         = 18
)

// claimProjectKeys is claim.lua's KEYS[1..25] with the downloader's, the
// IP's and the hour's keys left empty for the caller to fill in.
func claimProjectKeys(slug string) []string {
	return []string{
		ConfigKey(slug), "",
		QueueKey(slug, QueueTodo), QueueKey(slug, QueueBackfeed), QueueKey(slug, QueueSecondary), QueueKey(slug, QueueRedo),
		LegacyOutKey(slug), DeadlinesKey(slug), ClaimsKey(slug), DoneKey(slug), BudgetKey(slug),
		ExtrasKey(slug), StatsKey(slug), BlockedKey(slug), RateKey(slug), ReleasedKey(slug),
		"", "", "", RecentDoneKey(slug),
		EventsKey(slug), ExpiryCursorKey(slug), QueueKey(slug, QueueScored), ReservedSetKey(slug), RedoCancelledKey(slug),
	}
}

// claimTailKeys is claim.lua's last five KEYS, after the groups'.
func claimTailKeys(slug string) []string {
	return []string{FailedKey(slug), HistoryKey(slug), BatchesKey(slug), BatchDeadlinesKey(slug), QueuedKey(slug)}
}

// doneKeys is done.lua's KEYS.
func doneKeys(slug string) []string {
	return []string{
		ConfigKey(slug), DeadlinesKey(slug), ClaimsKey(slug), DoneKey(slug), BudgetKey(slug),
		ExtrasKey(slug), StatsKey(slug), ReleasedKey(slug), RecentDoneKey(slug), DoneArchiveKey(slug),
		EventsKey(slug), RedoCancelledKey(slug), HistoryKey(slug), BatchesKey(slug), BatchDeadlinesKey(slug),
	}
}

// claimPlainKeys is claim_plain.lua's KEYS: with the claim batch's two
// last only for a claim of claimBatchMin or more items.
func claimPlainKeys(slug string) []string {
	return []string{ConfigKey(slug), QueueKey(slug, QueueTodo), QueuedKey(slug), ClaimsKey(slug), DeadlinesKey(slug),
		BatchesKey(slug), BatchDeadlinesKey(slug)}
}

// claimBatchMin is the fewest items a claim writes as one claim batch:
// lua/prelude.lua's batch_min (a test holds them equal). A batch's four
// commands (its id, record, count and deadline) and a done's two cost
// more than a deadline per item for fewer; and the plain scripts are
// given the batch keys only from here on, since each key costs a script
// call ~0.5k Redis instructions (a Lua string made and freed), which a
// multi=1 call would pay for nothing.
const claimBatchMin = 4

// plainKeys is the KEYS of claim_plain.lua (all) or done_plain.lua
// (without the last two) for a call naming n items: the claim batch keys
// only for claimBatchMin or more.
func plainKeys(all []string, n int) []string {
	if n < claimBatchMin {
		return all[:len(all)-2]
	}
	return all
}

// donePlainKeys is done_plain.lua's KEYS.
func donePlainKeys(slug string) []string {
	return []string{ConfigKey(slug), ClaimsKey(slug), DoneKey(slug), DeadlinesKey(slug), BatchesKey(slug), BatchDeadlinesKey(slug)}
}
