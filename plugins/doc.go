// Package plugins is the contract of hoard's plugin system: what every
// plugin implements (Plugin), what it may ask of the host (HostAPI), and
// the two ways to run one (in-process through its Factory, or as its own
// binary over hashicorp/go-plugin's gRPC, served by Serve). It imports
// nothing of hoard's: a plugin binary links neither the queue engine nor
// the metrics client. The host that runs and supervises plugins inside
// `hoard serve` is package pluginhost.
//
// # One contract, two transports
//
// A plugin is a Factory that builds a Plugin (Vault's builtin/external
// split). A builtin is listed in the host's Options.Builtins and called in-process,
// which is how every unit test runs a plugin. The same Factory becomes a
// binary with a one-line main:
//
//	func main() { plugins.Serve(bittorrent.New) }
//
// and the host reaches it through go-plugin (gRPC over a Unix socket with
// automatic mTLS, the protocol in pluginpb). The handshake checks a magic
// cookie and ProtocolVersion; a binary built for another protocol version
// is refused with ErrIncompatible and not restarted.
//
// Only control-plane calls cross the boundary. A plugin's hot path (the
// BitTorrent plugin's announce and scrape listeners, its swarm store) runs in
// the plugin's own process and talks to Redis directly: Configure hands it
// hoard's Redis URL and its own settings, and Describe lists the listeners it
// bound.
//
// # Work as item types
//
// A plugin's periodic work becomes ordinary hoard items, so it is claimed,
// reclaimed, counted and shown like any other work, and no deadline depends
// on a scheduler having run (the lesson of seed 000):
//
//	tick ──► plugin finds due work from stored timestamps ──► TickResult.Enqueue
//	     ──► host queues items into the plugin's project (todo)
//	     ──► a worker claims them (the plugin's own workers over Redis, or any
//	         warrior over the HTTP API), does the step, reports done
//	     ──► OnItemDone (from the project's event log, retried until it
//	         succeeds) lets the plugin advance at once; the next tick
//	         re-derives anything the capped log no longer held
//	     ──► a worker that dies leaves its claim to expire: OnReclaim, and the
//	         queue hands the item out again
//
// The unseeded reaper (seed 000) fits as item types in a project such as
// "bt-reaper": a job "reaper" (period 4h in Orpheus, shorter is fine) scans
// the torrents' stored last-seeded and notice timestamps and returns items
// "notify-initial:<infohash>:<epoch>", "notify-final:..." and "remove:...",
// capped per run (per user, and in total) for the breadth-first order the
// seed asks for. Whoever processes them (the plugin, or the site's worker
// sending the private messages) reports them done; OnItemDone moves the
// torrent's reaper state forward (initial → final → removed), and a reseed
// seen by the announce path clears it. Because every step is computed from
// stored timestamps, a reaper paused for a week resumes with one catch-up
// run that queues only the next step for each torrent, never a mass
// removal.
//
// The scoring policy (seed 002) fits the same way: a job "score" queues
// "score:<infohash>:<round>" items for torrents due, in score order; the
// worker counts the swarm's peers, multiplies the score (×0.5 with no peers,
// ×0.8 under the tracker's maximum, ×1.2 at the maximum with 5% new) and
// removes the torrent under 0.005. torrents.count and torrents.processed
// become the plugin's Stats gauges and counters.
//
// Item names must be unique per step (the queue engine keeps done items
// forever and skips queuing them again), hence the step and epoch or round
// in the names above. Hooks are delivered at least once: an event whose
// frontend died after the hook but before the acknowledgement comes again,
// and the capped event log can drop the oldest events of a plugin down for
// long. Hooks must be idempotent and never the only path forward.
package plugins
