-- outbox_retry.lua: an operator gives dead outbox events another life:
-- they leave the dead set, are pending again (listed for polling sites)
-- and due at once, with their attempts starting from zero.
--
-- KEYS[1] dead      ZSET  id -> id
-- KEYS[2] pending   ZSET  id -> id
-- KEYS[3] due       ZSET  id -> ms
-- KEYS[4] attempts  HASH  id -> attempts begun
-- KEYS[5] stats     HASH  retried (counter)
--
-- ARGV[1] now (ms)
-- ARGV[2] strict: "1" refuses the whole call when an id is not dead,
--         "0" skips such ids
-- ARGV[3..] event ids
--
-- Returns
--   {retried}          events moved back to pending
--   {R.UNKNOWN, id}    strict and id is not dead: nothing changed

local now = tonumber(ARGV[1])
local strict = ARGV[2] == '1'
local k_dead, k_pending, k_due, k_attempts, k_stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

if strict then
  for i = 3, #ARGV do
    if not redis.call('ZSCORE', k_dead, ARGV[i]) then
      return {R.UNKNOWN, ARGV[i]}
    end
  end
end

local retried = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', k_dead, id) == 1 then
    redis.call('ZADD', k_pending, id, id)
    redis.call('ZADD', k_due, now, id)
    redis.call('HDEL', k_attempts, id)
    retried = retried + 1
  end
end
if retried > 0 then
  redis.call('HINCRBY', k_stats, 'retried', retried)
end
return {retried}
