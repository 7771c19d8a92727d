// Package scoring is the BitTorrent plugin's decay-policy scoring of
// torrents (seed 002, with the fixes policies.md §B asks for), built as an
// item type of the plugin on hoard's plugin platform.
//
// # The cycle
//
//	job "score" (every Period, one frontend) ──► Discover: torrents the tracker
//	    knows (registry, swarms with peers) that are not in the score index
//	    start at 1.0 ──► Round: one item "score:<infohash>:<round>" per indexed
//	    torrent, with its score, into the plugin's score-ordered project
//	──► a Pool worker claims it (Host.Claim), counts the swarm's peers and
//	    new IPs (score_count.lua, read only, which also returns the
//	    torrent's external trackers), announces to each external tracker
//	    (package announcer), counts its new IPs against that tracker's seen
//	    set and stages them for the round, and reports Done with
//	    {"peers":N,"new":M,"max":MAX,"trackers":[…]}
//	──► OnItemDone (from the project's event log, at least once) ──► Apply:
//	    score_apply.lua in the torrent's slot, then score_index.lua in the
//	    index shard's slot
//
// A worker never writes the score, so one that dies mid-item leaves the
// torrent as it was: its claim expires (the item type's ReclaimTTL) and
// the queue hands the item out again (btstat set scores to 0 while
// processing, and a crash stranded them there).
//
// # Two steps, and why that is safe
//
// A Lua script's keys must share one hash tag. A torrent's score record
// and seen set share the torrent's tag (so the apply reads the swarm and
// writes the score atomically), but the index must be sharded across
// tags, or one key pins the tracker to one slot. So applying a result is
// two scripts: score_apply.lua decides and writes the score (the one
// atomic read-multiply-or-remove-write the policy needs, idempotent per
// round: it stores the last applied round and ignores any round at or
// below it) and returns the torrent's state with a revision it bumps on
// every change; score_index.lua then sets the index entry to that state
// unless the shard has seen a newer revision. The index is a projection of
// the score records:
//   - a crash between the steps leaves the entry behind; the redelivered
//     event (the host acknowledges only when the hook returned nil) finds
//     the round applied and settles the entry to the current state, and
//     Discover re-indexes any scored torrent missing from its shard;
//   - reordered steps cannot move an entry back: revisions only grow.
//
// # Keys
//
//	hoard:bt:{<hex>}:score        HASH  the torrent's score record
//	hoard:bt:{<hex>}:score:seen   ZSET  IP -> last seen (ms), trimmed to NewWindow
//	hoard:bt:{<hex>}:score:trackers HASH external tracker URL -> max peers
//	hoard:bt:{<hex>}:score:trackers_at STRING when that list was written (ms)
//	hoard:bt:{<hex>}:score:seen:<id>    ZSET  per tracker (btstore.SourceID): IP -> last seen
//	hoard:bt:{<hex>}:score:pending:<id> ZSET  per tracker: IP -> round a worker saw it
//	hoard:bt:{<hex>}:score:history LIST  the last rounds, newest first
//	hoard:bt:{score:<n>}          ZSET  index shard n: hex -> score
//	hoard:bt:{score:<n>}:revs     HASH  hex -> revision the shard shows
//	hoard:bt:{score:<n>}:processed HASH unix minute -> results applied
//	hoard:bt:{score:<n>}:cycle HASH "cycle" -> id, hex -> round queued in that cycle
//
// # Score lines
//
// Every source has its own score line (the own swarm's, one per external
// tracker), moved by the policy with its own max peers; the torrent's
// score, which the index ranks, is the best line of the sources still
// registered. An external tracker that fails keeps its line for the
// TrackerGrace rounds in a row, then each failed round counts as no
// peers: a short outage decays nothing, a tracker gone for good stops
// pinning its torrents.
//
// # Coming back
//
// A removed torrent keeps a tombstone record with a snapshot of its torrent
// record (created, announces, registered). Discover brings it back at 1.0
// only when the record differs (it was announced or registered since), so
// it never comes back by itself (btstat's HEAD re-added torrents removed
// at scores in [0.00625, 0.01)). Its rounds go on from where they were, so
// item names stay unique.
package scoring
