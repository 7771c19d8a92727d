-- outbox_claim.lua: a deliverer takes up to limit due events of the
-- outbox for one webhook request. Each taken event gets a lease: it stays
-- pending, its due time moves to now + lease, and its attempt count goes
-- up by one, so a deliverer killed mid-request loses nothing: the event
-- is due again when the lease ends, and any deliverer takes it then. An
-- event due again with its attempts used up (its last deliverer died)
-- goes to the dead set instead of being tried once more.
--
-- KEYS[1] due       ZSET  id -> ms when a deliverer may next try it
-- KEYS[2] events    HASH  id -> record
-- KEYS[3] attempts  HASH  id -> attempts begun
-- KEYS[4] pending   ZSET  id -> id
-- KEYS[5] dead      ZSET  id -> id: kept until an operator retries them
-- KEYS[6] errors    HASH  id -> the last failure, in words
-- KEYS[7] stats     HASH  attempts, dead (counters)
--
-- ARGV[1] now (ms)
-- ARGV[2] lease (ms)
-- ARGV[3] limit: the most events taken
-- ARGV[4] max attempts
--
-- Returns {died, id, attempt, record, id, attempt, record, ...}: died is
-- how many events went to the dead set; the triples are the events taken
-- (none when nothing is due).

local now = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local max_attempts = tonumber(ARGV[4])
local k_due, k_events, k_attempts, k_pending, k_dead, k_errors, k_stats =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]

local ids = redis.call('ZRANGEBYSCORE', k_due, '-inf', now, 'LIMIT', 0, limit)
local out = {0}
local died, taken = 0, 0
for _, id in ipairs(ids) do
  local record = redis.call('HGET', k_events, id)
  local attempt = tonumber(redis.call('HGET', k_attempts, id)) or 0
  if not record then
    -- No record to send: only a hand edit gets here. Drop the stray id
    -- rather than hand it out forever.
    redis.call('ZREM', k_due, id)
    redis.call('ZREM', k_pending, id)
    redis.call('HDEL', k_attempts, id)
  elseif attempt >= max_attempts then
    redis.call('ZREM', k_due, id)
    redis.call('ZREM', k_pending, id)
    redis.call('ZADD', k_dead, id, id)
    if redis.call('HEXISTS', k_errors, id) == 0 then
      redis.call('HSET', k_errors, id, 'the lease of the last attempt ended without an answer (its deliverer stopped)')
    end
    died = died + 1
  else
    attempt = attempt + 1
    redis.call('HSET', k_attempts, id, attempt)
    redis.call('ZADD', k_due, now + lease, id)
    out[#out + 1] = id
    out[#out + 1] = attempt
    out[#out + 1] = record
    taken = taken + 1
  end
end
out[1] = died
if taken > 0 then
  redis.call('HINCRBY', k_stats, 'attempts', taken)
end
if died > 0 then
  redis.call('HINCRBY', k_stats, 'dead', died)
end
return out
