-- outbox_append.lua: appends one batch of events to the BitTorrent
-- plugin's outbox (plugins/bittorrent/outbox), all or nothing. An event
-- whose idempotency key was appended within the dedup window (and is
-- still in the bounded dedup record) is not stored again; nor is a
-- second event with the same key in one batch. A new event is pending
-- (listed for polling sites) and due at once (for the deliverer).
--
-- KEYS[1] seq      STRING  the last event id given
-- KEYS[2] events   HASH    id -> record (JSON: key, kind, body, at)
-- KEYS[3] pending  ZSET    id -> id: not delivered, not dead (poll order)
-- KEYS[4] due      ZSET    id -> ms when a deliverer may next try it
-- KEYS[5] dedup    ZSET    idempotency key -> ms it was appended
-- KEYS[6] stats    HASH    appended, duplicates (counters)
--
-- ARGV[1] now (ms)
-- ARGV[2] dedup window (ms): keys appended longer ago are forgotten
-- ARGV[3] dedup max: the record keeps at most this many keys (oldest go)
-- ARGV[4] max pending: refuse a batch that would pass it (0: no limit)
-- ARGV[5..] pairs: idempotency key, record
--
-- Returns
--   {appended, duplicates, id...}  the ids given to the new events
--   {R.FULL, pending}              refused, nothing changed: the batch
--                                  would put more than max pending events
--                                  in the outbox

local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local dedup_max = tonumber(ARGV[3])
local max_pending = tonumber(ARGV[4])
local k_seq, k_events, k_pending, k_due, k_dedup, k_stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

redis.call('ZREMRANGEBYSCORE', k_dedup, '-inf', '(' .. (now - window))

local fresh = {}
local in_batch = {}
local n = (#ARGV - 4) / 2
for i = 0, n - 1 do
  local key = ARGV[5 + 2 * i]
  if not in_batch[key] and not redis.call('ZSCORE', k_dedup, key) then
    in_batch[key] = true
    fresh[#fresh + 1] = i
  end
end

if max_pending > 0 then
  local pending = redis.call('ZCARD', k_pending)
  if pending + #fresh > max_pending then
    return {R.FULL, pending}
  end
end

local out = {#fresh, n - #fresh}
for _, i in ipairs(fresh) do
  local id = redis.call('INCR', k_seq)
  redis.call('HSET', k_events, id, ARGV[6 + 2 * i])
  redis.call('ZADD', k_pending, id, id)
  redis.call('ZADD', k_due, now, id)
  redis.call('ZADD', k_dedup, now, ARGV[5 + 2 * i])
  out[#out + 1] = id
end

local over = redis.call('ZCARD', k_dedup) - dedup_max
if over > 0 then
  redis.call('ZREMRANGEBYRANK', k_dedup, 0, over - 1)
end
if #fresh > 0 then
  redis.call('HINCRBY', k_stats, 'appended', #fresh)
end
if n - #fresh > 0 then
  redis.call('HINCRBY', k_stats, 'duplicates', n - #fresh)
end
return out
