-- score_trackers.lua: replaces the external trackers registered for one
-- torrent (scoring announces to each once a round and keeps a score line
-- per tracker). The caller has checked every URL and max peers; the list
-- is replaced whole, in one step, so a reader never sees half of it. The
-- lines of trackers taken off go at the next applied round
-- (score_apply.lua); their seen sets expire by themselves.
--
-- KEYS[1] trackers HASH  announce URL -> max peers
--
-- ARGV: URL, max peers, URL, max peers, … (none: clear the list)
--
-- Returns the number of trackers the torrent had before.

local before = redis.call('HLEN', KEYS[1])
redis.call('DEL', KEYS[1])
if #ARGV > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
return before
