-- outbox_fail.lua: records a failed webhook request for the events it
-- carried. An event whose attempts are used up goes to the dead set (kept
-- and counted, and an operator can retry it); any other is due again at
-- its retry time (the caller's backoff). An event is only touched when
-- its attempt count is still the one the caller took it with: if its
-- lease ended and another deliverer took it since, that attempt decides.
--
-- KEYS[1] pending   ZSET  id -> id
-- KEYS[2] due       ZSET  id -> ms
-- KEYS[3] attempts  HASH  id -> attempts begun
-- KEYS[4] dead      ZSET  id -> id
-- KEYS[5] errors    HASH  id -> the last failure
-- KEYS[6] stats     HASH  failures, dead (counters)
--
-- ARGV[1] max attempts
-- ARGV[2] the failure, in words
-- ARGV[3..] triples: id, attempt (as claimed), retry at (ms)
--
-- Returns {failed, died}: the events this failure counted for, and how
-- many of them went to the dead set.

local max_attempts = tonumber(ARGV[1])
local reason = ARGV[2]
local k_pending, k_due, k_attempts, k_dead, k_errors, k_stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

local failed, died = 0, 0
for i = 3, #ARGV, 3 do
  local id, attempt, retry_at = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if redis.call('ZSCORE', k_pending, id) and tonumber(redis.call('HGET', k_attempts, id)) == attempt then
    redis.call('HSET', k_errors, id, reason)
    failed = failed + 1
    if attempt >= max_attempts then
      redis.call('ZREM', k_pending, id)
      redis.call('ZREM', k_due, id)
      redis.call('ZADD', k_dead, id, id)
      died = died + 1
    else
      redis.call('ZADD', k_due, retry_at, id)
    end
  end
end
if failed > 0 then
  redis.call('HINCRBY', k_stats, 'failures', failed)
end
if died > 0 then
  redis.call('HINCRBY', k_stats, 'dead', died)
end
return {failed, died}
