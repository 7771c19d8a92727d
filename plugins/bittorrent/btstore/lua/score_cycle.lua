-- score_cycle.lua: fixes the round each torrent of one score index shard
-- is queued with in one scoring cycle. The host runs a cycle again when
-- the plugin died under it (the run stays due), and by then some of its
-- items are done and applied: their "last applied round + 1" names a new
-- item, a second round for the torrent in one cycle. Recorded here before
-- the items are queued, the rounds of a cycle are the same on every run
-- of it, so a run again queues the same items (the queue skips those out
-- or done, rescores those waiting) and the caller skips those applied.
--
-- KEYS[1] cycle HASH "cycle" -> the id of the cycle the rounds belong to;
--               hex info-hash -> the round its item has in that cycle.
--               A new cycle replaces the whole hash, so it holds at most
--               the shard's torrents.
--
-- ARGV[1] the cycle's id (the run's scheduled time, ms)
-- ARGV[2..] pairs: hex info-hash, the round proposed (last applied + 1)
--
-- Returns the rounds to queue, one per pair, in order: the round recorded
-- for the torrent in this cycle, else the one proposed (now recorded).

local cycle = ARGV[1]
if redis.call('HGET', KEYS[1], 'cycle') ~= cycle then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'cycle', cycle)
end
local hexes = {}
for i = 2, #ARGV, 2 do
  hexes[#hexes + 1] = ARGV[i]
end
if #hexes == 0 then
  return {}
end
local have = redis.call('HMGET', KEYS[1], unpack(hexes))
local rounds, fresh = {}, {}
for i, hex in ipairs(hexes) do
  local round = tonumber(have[i])
  if not round then
    round = tonumber(ARGV[2 * i + 1])
    fresh[#fresh + 1] = hex
    fresh[#fresh + 1] = round
  end
  rounds[i] = round
end
if #fresh > 0 then
  redis.call('HSET', KEYS[1], unpack(fresh))
end
return rounds
