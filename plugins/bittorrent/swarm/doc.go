// Package swarm is the BitTorrent plugin's swarm store on Redis or Redis
// Cluster: it implements bittorrent.Swarms for the announce and scrape
// listeners, and gives the admin API and CLI a registry of torrents,
// users and whitelisted clients.
//
// # Where things live, and why
//
// Everything about one torrent (its record, its seeders and leechers, the
// peers' deadlines and records, and each user's record on
// it) shares the torrent's hash tag, so one Lua script per announce
// (announce.lua) writes the peer and the torrent's counters atomically,
// picks the reply's peers, and returns in one round trip.
//
// Global keys (counters, the sorted indexes) and a user's sets cannot
// share a torrent's slot on a cluster (a script may only touch one slot),
// and writing them in the same request would cost a second round trip
// and turn the global counters into one hot key. So the scripts return what changed (count deltas, a
// user's new state with a version) and the store batches these in memory
// and flushes them every Config.FlushInterval in one pipeline, the way
// Ocelot batches its database writes. Count deltas commute, and user
// states carry versions (user_sets.lua keeps the newest), so flushes from
// many frontends may arrive in any order. What a crash loses before its
// flush (at most one interval) is restored by Repair, which recomputes
// the global and per-user views from the per-torrent truth; it runs every
// Config.RepairInterval on one frontend at a time.
//
// # Expiry
//
// Each peer has a deadline, Config.PeerTimeout (two announce intervals)
// after its last announce, kept in two places: the swarm's deadline index
// scores it, and the swarm's entry in the sharded due index is scored at
// or before the earliest deadline of the swarm. The sweep (every
// Config.SweepInterval, 15 s) reads the due index for swarms with passed
// deadlines and removes their peers with expire.lua, which rechecks the
// deadline, so it never removes a peer that has announced since. A peer
// thus leaves up to one sweep interval after its deadline (15 s on a
// default timeout of an hour). Builds before issue 27's cut also wrote a timeout key per
// peer, expiring at its deadline, whose keyspace expiry event removed the
// peer within moments: a 22k-instruction SET per announce and a key per
// peer, for seconds on an hour. The listener for those events stays while
// a rolling upgrade may leave such keys (they expire by their TTL, within
// one PeerTimeout of the last older frontend); its event runs the same
// expire.lua for the one peer.
//
// # Plain re-announces, written behind
//
// An announce with no event, from a peer this frontend accepted within its
// timeout, in the same role, at the same address, for the same user (a
// plain re-announce) changes no swarm. It is answered from this frontend's
// view of the swarm (at most 950ms old; a stale view is read in the same
// refresh.lua call that writes the announce, for a torrent with another
// plain re-announce here within 950ms; a rarer one runs announce.lua, as
// cheap as that read) and its refresh is queued, coalesced per torrent,
// and written within Config.WriteBehind by refresh.lua: a view read of
// the torrent takes its queue along, else the call that writes it when
// it is due (nine tenths of WriteBehind after its oldest) reads the view
// too. refresh.lua rechecks each peer against its record and drops one
// that changed elsewhere (its next announce runs announce.lua). Stop
// writes the queue; a SIGKILL loses at most one WriteBehind of plain
// re-announces, which the peers' next announces make up, because transfer
// is taken from cumulative counters (writebehind.go).
//
// # What is exact
//
// Per torrent, everything an event, a joining or leaving peer, or a role
// or address change does is exact and atomic, and a plain re-announce's
// refresh lands within one WriteBehind: the role hashes are the
// seeder and leecher counts, and snatches, announces, last_action, the
// peer records and each user's record on the torrent (transfer, seed
// time, hit-and-run state) change in the same script as the peer. The
// global counters, the indexes, the users' sets and the users' transfer
// totals (btstore.UserStatsKey) are derived from those, lag by up to one
// FlushInterval, and may miss a crashed frontend's last batch: Repair
// restores all of them but the transfer totals, which a site that needs
// them exact should sum from the per-torrent user records.
package swarm
