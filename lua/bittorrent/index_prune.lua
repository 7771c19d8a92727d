-- index_prune.lua: swarm.Repair's prune of one torrent index (seeders,
-- leechers, snatches): removes the entries of torrents the caller read as
-- gone (record expired, or not registered in private mode), each only if
-- its score is still the one the caller's scan read. The record is in the
-- torrent's slot and the index in its own, so the read and the remove
-- cannot be one step; a torrent registered and announced in between has
-- had its count flushed into the entry (ZINCRBY), which changes the score,
-- and its entry stays (removed, the next deltas built a wrong count until
-- the next rewrite).
--
-- KEYS[1] index ZSET  hex info-hash -> count
--
-- ARGV[1], ARGV[2], ...: pairs of member and the score the scan read
--
-- Returns how many entries were removed.

local removed = 0
for i = 1, #ARGV, 2 do
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
