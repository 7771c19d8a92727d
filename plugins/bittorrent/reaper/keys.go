package reaper

// The reaper's own keys. A torrent's reaper keys (its row, claims and
// snatchers) carry the torrent's hash tag and are built by package swarm
// (ReaperKey, ReaperClaimsKey, SnatchersKey), beside the torrent's other
// keys; only the global counters are here. No script touches them.

// countsKey holds the reaper's counts (HASH): the torrents in each state
// at the last run (never_initial, never_final, unseeded_initial,
// unseeded_final, claim_windows, rewards_waiting, counted_at ms) and the
// steps done since the start (initial_done, final_done, removed, invited,
// claims, rewards, extensions, notices). Written with HSET and HINCRBY
// after each step's script: a crash between the two may lose one count,
// never a step.
const countsKey = "hoard:bt:reaper:counts"
