// Package orphans is the BitTorrent plugin's orphan cleanup (seed 003,
// the way Pulp does it without its weak spots: policies.md §C). It runs
// as the plugin's "orphans" job on any frontend, beside live traffic, with
// no lock and no pause; two cleanups at once only read some pages twice.
//
// # The rule
//
// A record is removed only when it is both unreferenced and older than
// the protection window by its timestamp of interest, and the check and
// the delete are one script in one slot, so a record that became live
// again between the scan and the delete stays. Where the reference lives
// in another slot (a user's sets point at a user-torrent record in the
// torrent's slot), the caller reads the reference and the script deletes
// only if the record's version, itself a timestamp, is still the one read:
// anything that revives the record writes a newer version, before the
// delete (which then does nothing) or after it (which puts it back).
// A window of 0, or not longer than the longest operation that can revive
// a record, is refused with a message naming that operation (CheckWindow).
//
// # What the tracker keeps, what references it, what touches it, who removes it
//
// Under a torrent's hash tag ({hex}):
//
//	record            key                what makes it live (reference)        timestamp of interest (who touches it)           removed by
//	torrent record    {h}:torrent        an id (registered), or peers; open     registered, unregistered, created,              orphan_torrent.lua (finishing call); open
//	                                     mode: its retention TTL runs           last_action (Register, Unregister, reaper       mode: its own TTL (OpenTorrentRetention)
//	                                                                            removal, announces)
//	seeders/leechers  {h}:seeders …      peers announcing                       each peer's deadline                            expiry (expire.lua, sweep and events)
//	deadlines         {h}:deadlines      peers in the swarm                     deadlines                                       expiry
//	timeout key       {h}:timeout:…      its peer                               its TTL (the peer's deadline)                   its TTL; a stray one without TTL: cleanup
//	peer record       {h}:peer:<id>      its peer in the swarm                  last_announce (announce)                        its TTL (PeerRetention) after the peer
//	                                                                                                                            left; a gone torrent's: cleanup
//	user record       {h}:user:<uid>     the torrent (hit-and-run truth)        last_announce (announce)                        with its torrent, in the same script
//	users set         {h}:users          the torrent                            (created with the first user record)            with its torrent
//	reaper state      {h}:reaper         the torrent (registered)               unseeded_date, initial_at … (reaper steps)     a seeder's announce; with its torrent
//	score record      {h}:score          scoring while "active"; a tombstone    removed_at, applied_at, rev, tracked_at         an active one: scoring (decay to removal,
//	                                     ("removed") while its torrent is       (score_apply.lua, score_track.lua)              even if its torrent is gone); a tombstone:
//	                                     known (it stops an unchanged return)                                                   its TTL when untracking, and cleanup once
//	                                                                                                                            its torrent is gone (both modes)
//	score history     {h}:score:history  the score record                       (the record's stamps)                           the tombstone's TTL; cleanup with the
//	                                                                                                                            record, or when there is none
//	tracker list      {h}:score:trackers the torrent (an operator's setting)    score:trackers_at (score_trackers.lua)          cleanup when the record goes or is absent
//	 + its stamp      :trackers_at                                                                                              and the stamp is older than the window
//	tracker seen IPs  {h}:score:seen:<s> the score record                       the newest IP's time (score_apply.lua)          its TTL (the "new" window); cleanup with
//	                                                                                                                            the record, or when there is none
//	staged IPs        {h}:score:pending:<s> the score record (a worker's round) (none: rounds, not times)                       their TTL (24h); cleanup with the record,
//	                                                                                                                            or when there is none
//	seen IPs          {h}:score:seen     the score record (unique-IP metric)    the newest IP's time (score_apply.lua)          scoring when untracking; with its torrent
//	snatchers         {h}:snatchers      the torrent (the reaper invites them)  (the snatches that add to it)                   with its torrent
//	reaper claims     {h}:reaper:claims  the reaper state (reseed claims)       (announces within the claim window)             with its torrent
//	unique-IP metrics {h}:ipm:n, :n:<m>, the torrent (package ipmetrics)         markers: their expiry (30 days); counters:      markers: their TTL; all: with the torrent,
//	                  :m:<ip>                                                   none                                            page by page like peer records
//
// Global, or under other tags:
//
//	record            key                                reference                    timestamp of interest                 removed by
//	registry entry    hoard:bt:registry (hex -> id)     the record's id              the record's stamps                   Unregister; orphan_registry.lua when an
//	                                                                                                                         unregistration was cut off
//	index entries     hoard:bt:index:{seeders,…}        the torrent record           (counts)                              the flush at count 0; swarm.Repair's
//	                                                                                                                         prune (hourly) for gone torrents, only if
//	                                                                                                                         the count is still the one it read
//	                                                                                                                         (zrem_unchanged.lua: a torrent registered and
//	                                                                                                                         announced meanwhile keeps its entry)
//	due entry         hoard:bt:{due:<n>}                a swarm with peers           the earliest deadline                 the sweep (due_settle.lua)
//	score index,      hoard:bt:{score:<n>}, :revs       the score record             the revision (at least the time)      score_index.lua; orphan_revs.lua when the
//	revisions                                                                                                                record is gone (an expired tombstone)
//	user sets         hoard:bt:user:{u}:active …        the user record {h}:user:u   the version (at least the time of     user_sets.lua; orphan_user.lua when the
//	+ versions,                                         (named by :torrents)          the state change; every flush)        record is gone
//	torrents
//	user totals       hoard:bt:user:{u}:stats           the user                     -                                      the user's purge
//	passkey           hoard:bt:passkey:<pk>             the site                     -                                      RemoveUser
//	passkey listing   hoard:bt:user:{u}:passkeys        each passkey maps to u       when listed                            RemoveUser; checkListing drops one
//	                                                                                                                         unmapped for a window (user_remove.lua)
//	removal mark      hoard:bt:user:{u}:gone            no passkey listed            removed_at (RemoveUser)                AddUser undoes it; the purge's last step
//	removed index     hoard:bt:users:removed            the mark (a hint)            the removal time                       the removed walk, once live or purged
//	a removed user    its sets, versions, torrents,     a listed passkey             the mark's removed_at                  the purge (user_purge_*.lua), a window
//	                  stats, and {h}:user:u everywhere                                                                       after the mark
//	whitelist, stats  hoard:bt:whitelist, :stats        the operator                 -                                      the operator
//
// # How it finds its work
//
// Each tick first reads the due sets (btstore/due.go, due.go here): the
// torrents recorded as possible orphans when they were unregistered or
// their swarm emptied, and the users whose records on a gone torrent
// went, each once its timestamp of interest is older than the window. A
// due torrent is looked at as the torrents walk would (orphan_torrent.lua
// checks everything again in its slot, so a stale entry deletes nothing
// live), then its registry entry and score revision. The walks below are
// the backstop: each begins a pass only Policy.BackstopPeriod after its
// last one ended (the passkeys walk also when a removed user waits for
// it), for what no due entry names (docs/bittorrent-orphans.md).
//
// # How it walks
//
// Six walks, each with its position in btstore.OrphanCursorsKey so the next tick, on
// any frontend, goes on where the last one stopped, and at most
// MaxKeysPerTick keys per walk per tick:
//   - torrents: SCAN over every torrent key on every master; per page one
//     orphan_torrent.lua call per torrent (a live one returns after two
//     HLENs and an HMGET), then for the gone ones whose record is in the
//     page one finishing call that deletes the record with its users set,
//     user records, reaper state, snatchers, claims and seen set. More than
//     500 user records
//     go in chunks; between chunks the record stays, without an id, so
//     announces are refused. Scoring's keys of a gone torrent go in the
//     page's first call for it, before any finishing call (no announce
//     reads them, so they need not wait for the record): the score record,
//     history and tracker list are KEYS of every call, so a page that
//     holds only scoring's keys, the torrent record long gone, still
//     removes them; a tracker's seen set and staged IPs go with the page
//     they are in.
//   - users: SCAN over users' keys; in each versions hash, entries older
//     than the window whose user record is gone are removed by
//     orphan_user.lua; in each listing of passkeys, a passkey listed
//     longer than the window ago that no longer maps to the user is
//     dropped (checkListing).
//   - passkeys: SCAN over the passkeys; one mapped but missing from its
//     user's listing is listed (user_list.lua), dated when the page read
//     the mapping. The start of its last finished pass is kept
//     ("passkeys:covered" in btstore.OrphanPassesKey).
//   - removed: the index of removed users, those marked longer than the
//     window ago; each is purged when it may be (below). An entry whose
//     user is live goes (compare-and-remove on its score); the users it
//     dropped are looked at again and put back when marked meanwhile,
//     and RemoveUser writes its entry both before and after its mark, so
//     a mark is never left without an entry.
//   - registry: HSCAN; entries whose record has no id (and is stale) go,
//     and one that a registration raced is put back.
//   - revs: HSCAN of each score index shard; revisions older than the
//     window whose score record is gone go, with any index entry.
//
// A removed torrent (hoard bt torrent rm, the reaper's removal) is gone
// from the first pass after one window (its user records, peer records,
// reaper state and seen set with it) and its users' set entries from the
// pass after: nothing is left after one window and two passes. Its score
// tombstone (in unrank mode it has no TTL) goes in the same pass when its
// newest stamp is older than the window too, with its history, tracker
// list, trackers' seen sets and staged IPs, and the tombstone's index
// revision goes in the revs walk of that pass or the next. A score record
// still "active" stays: scoring decays a gone torrent's to removal (no
// peers: x0.5 a round), and the pass after one more window takes it.
// An open-mode swarm whose last peer left keeps its record for
// OpenTorrentRetention (its TTL); then its peer records go in the next
// pass.
//
// Item names after the tombstone: the score items use DoneMode "count",
// which keeps no done set, but it does keep the last RecentDone
// completions (100,000 for plugin item types) and enqueue_scored.lua
// skips a name among them. So a new score record's rounds count from the
// time it was created (ms, score_track.lua's round_base), not from 0: a
// torrent that returns after its tombstone was removed gets item names
// above every one its old record used, and is scored at once. The views
// count rounds from 1.
//
// # Removed users
//
// A user's records live in every torrent's slot and its sets in its own,
// so no script can check "the user is gone" where it deletes a record.
// Instead the user's slot decides, once: user_purge_start.lua begins a
// purge only when the user has no listed passkey, its removal mark is
// older than the window, and a whole pass of the passkeys walk began
// after the removal, and it marks purge_before. The listing covers every
// passkey that maps to the user (AddUser lists, then maps; RemoveUser
// unlists, then unmaps; the passkeys walk lists what it finds unlisted),
// so a user that can still announce is never purged. From then on AddUser
// finishes the purge before it lists a passkey, so nothing can announce
// for the user during the purge: user_purge_record.lua deletes each
// record with no peer counted and untouched since purge_before, then
// user_purge_drop.lua drops the entries and, when none is left, the
// user's keys, each checking the purge is still the one that began. A
// user added again within the window (a passkey rotation) keeps
// everything; after the purge began, it comes back with nothing of the
// old one's, never half.
//
// # Elsewhere
//
// Index entries of gone torrents: UnregisterTorrent removes them, the
// flush drops an entry at count 0, and swarm.Repair's hourly prune
// removes one whose torrent is gone only if its score is still the one
// it read (zrem_unchanged.lua). Work-queue records are the queue engine's:
// Redis drops an emptied per-downloader queue and claim.lua takes it out
// of the reserved set, forget_group.lua forgets a removed limit group
// once its sub-queues are empty, and DeleteProject removes a project's
// claims with it. Delivered outbox events are trimmed by every ack to
// the plugin's keep_delivered; each admin log keeps its newest
// queues.AdminLogLength entries. Each of these has its test.
package orphans
