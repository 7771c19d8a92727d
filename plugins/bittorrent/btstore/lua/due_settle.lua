-- due_settle.lua: after a sweep of one swarm, moves the swarm's entry in
-- its shard of the due index (swarms scored by their earliest peer
-- deadline) to the deadline the sweep saw next, or removes it when the
-- swarm has no peer left. An entry that changed since the sweep read it
-- (a new peer lowered it, or re-added it after it emptied) is never
-- removed or moved later, so a concurrent announce is never forgotten.
--
-- KEYS[1] due  ZSET  info-hash (hex) -> earliest peer deadline (ms)
--
-- ARGV[1] info-hash (hex)
-- ARGV[2] the score the sweep read (ms)
-- ARGV[3] the swarm's next deadline (ms), 0 when it has no peer left
--
-- Returns 1 when the entry was moved or removed, 0 when it was left as it was.

local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
local unchanged = current and tonumber(current) == tonumber(ARGV[2])
if ARGV[3] == '0' then
  if unchanged then
    redis.call('ZREM', KEYS[1], ARGV[1])
    return 1
  end
  return 0
end
if unchanged then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
else
  redis.call('ZADD', KEYS[1], 'LT', ARGV[3], ARGV[1])
end
return 1
