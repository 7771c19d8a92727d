-- outbox_ack.lua: marks outbox events delivered (the webhook answered
-- 2xx, or a polling site acknowledged them): they leave the pending and
-- due sets and join the delivered set, which keeps only the newest
-- keep_delivered records; older delivered records are deleted here, so
-- the outbox stays bounded.
--
-- KEYS[1] pending    ZSET  id -> id
-- KEYS[2] due        ZSET  id -> ms
-- KEYS[3] attempts   HASH  id -> attempts begun
-- KEYS[4] errors     HASH  id -> the last failure
-- KEYS[5] events     HASH  id -> record
-- KEYS[6] delivered  ZSET  id -> ms delivered
-- KEYS[7] config     HASH  keep_delivered (the plugin's setting, when saved)
-- KEYS[8] stats      HASH  delivered (counter)
-- KEYS[9] seq        STRING the last event id given
-- KEYS[10] dead      ZSET  id -> ms it was given up
--
-- ARGV[1] now (ms)
-- ARGV[2] strict: "1" refuses the whole call when an id was never
--         given or is dead (a polling site's ack), "0" skips such ids (a
--         deliverer whose event someone else delivered first). Either way
--         an id already delivered is not an error: a site that retries an
--         ack after a timeout gets the same success, and nothing changes
--         for that id (it counts in `already`).
-- ARGV[3] keep_delivered when config has none
-- ARGV[4..] event ids
--
-- Returns
--   {acked, trimmed, already}  events marked delivered now; delivered
--                         records deleted; ids that were delivered before
--   {R.UNKNOWN, id}       strict and id was never given: nothing changed
--   {R.DEAD, id}          strict and id is dead (retry it first): nothing
--                         changed

local now = tonumber(ARGV[1])
local strict = ARGV[2] == '1'
local k_pending, k_due, k_attempts, k_errors, k_events, k_delivered, k_config, k_stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]

-- Ids are given in order (KEYS[9]), so one that is neither pending nor
-- dead and not above the last id given was delivered: trimmed from the
-- delivered set already, perhaps, but delivered.
if strict then
  local last = tonumber(redis.call('GET', KEYS[9]) or '0')
  for i = 4, #ARGV do
    local id = ARGV[i]
    if not redis.call('ZSCORE', k_pending, id) then
      if tonumber(id) > last then
        return {R.UNKNOWN, id}
      end
      if redis.call('ZSCORE', KEYS[10], id) then
        return {R.DEAD, id}
      end
    end
  end
end

local acked, already = 0, 0
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', k_pending, id) == 1 then
    redis.call('ZREM', k_due, id)
    redis.call('HDEL', k_attempts, id)
    redis.call('HDEL', k_errors, id)
    redis.call('ZADD', k_delivered, now, id)
    acked = acked + 1
  else
    already = already + 1
  end
end
if acked > 0 then
  redis.call('HINCRBY', k_stats, 'delivered', acked)
end

local keep = tonumber(redis.call('HGET', k_config, 'keep_delivered')) or tonumber(ARGV[3])
local over = redis.call('ZCARD', k_delivered) - keep
local trimmed = 0
while over > 0 do
  local chunk = math.min(over, 1000)
  local old = redis.call('ZRANGE', k_delivered, 0, chunk - 1)
  redis.call('HDEL', k_events, unpack(old))
  redis.call('ZREMRANGEBYRANK', k_delivered, 0, chunk - 1)
  trimmed = trimmed + chunk
  over = over - chunk
end
return {acked, trimmed, already}
