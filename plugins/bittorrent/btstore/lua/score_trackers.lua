-- score_trackers.lua: replaces the external trackers registered for one
-- torrent (scoring announces to each once a round and keeps a score line
-- per tracker). The caller has checked every URL and max peers; the list
-- is replaced whole, in one step, so a reader never sees half of it. The
-- lines of trackers taken off go at the next applied round
-- (score_apply.lua); their seen sets expire by themselves. The list's
-- time of writing is its timestamp of interest for orphan cleanup (package
-- orphans): a list set for a torrent not registered yet is kept for the
-- protection window, and then only while the torrent is known.
--
-- KEYS[1] trackers    HASH    announce URL -> max peers
-- KEYS[2] trackers_at STRING  when the list was last written (ms)
--
-- ARGV[1] now (ms)
-- ARGV[2..]: URL, max peers, URL, max peers, … (none: clear the list)
--
-- Returns the number of trackers the torrent had before.

local before = redis.call('HLEN', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
  redis.call('SET', KEYS[2], ARGV[1])
end
return before
