-- claim_plain_many.lua: hand out one item each from todo to several
-- downloaders of a plain project at once, atomically: the one-item plain
-- claims (lua/claim_plain.lua) that warriors of one project made at the
-- same moment, coalesced by their frontend into one call
-- (queues/plainbatch.go), so Redis pays one script call's fixed cost for
-- them all. Each item gets its own claim record (its own downloader and
-- IP) and its own deadline, exactly as claim_plain.lua writes them for a
-- claim of one item. The frontend decides per request, from its cached copy
-- of the project's settings, that the request is plain (plainConfig.serves:
-- blocks, minimum version, reservations, global blocks), as for
-- claim_plain.lua; this script checks that the copy is current.
--
-- KEYS[1] config     HASH  project settings: config_version, has_extras and
--                          pop_check are read
-- KEYS[2] todo       LIST
-- KEYS[3] queued     SET   the items waiting in the list queues: a popped
--                          item leaves it
-- KEYS[4] claims     HASH  item -> claim record
-- KEYS[5] deadlines  ZSET  item -> reclaim deadline (ms)
--
-- ARGV[1] the config_version the frontend's copy was read at ("0" when the
--         config had none)
-- ARGV[2k], ARGV[2k+1] for the k-th request (k = 1..n, n = (#ARGV-1)/2,
--         at most 1000): its claim record, "1 <now> <downloader> <ip> - -"
--         (the prelude's format_claim, built by the caller), and its
--         reclaim deadline (ms): now + the reclaim TTL
--
-- Returns
--   {item1, ..., itemm}     the items claimed from todo's head, m <= n:
--                           item k is the k-th request's. When todo held
--                           fewer than n items (m < n, possibly 0), the
--                           requests after the m-th got nothing here and
--                           changed nothing: the caller serves them with
--                           claim.lua, which serves the other queues and
--                           reclaims, as it would one by one.
--                           (Not prefixed with a code: the pop's own table
--                           is the reply, so none is built. A code reply's
--                           first element is an integer, an item never is.)
--   {R.STALE_CONFIG}        as claim_plain.lua's: nothing changed
--   {R.CORRUPT, why}        a key has the wrong type: nothing changed (items
--                           popped are back at todo's head, in order, and in
--                           the queued index)
--
-- Note: the writes of claim_plain.lua in its order: pop, the queued index,
-- the claim records, the deadlines; what fails after the pop undoes the
-- writes before it and pushes the items back. No counters are written: the
-- frontend counts each request from its own answer (queues/counters.go).

local cfg = redis.call('HMGET', KEYS[1], 'config_version', 'has_extras', 'pop_check')
if (cfg[1] or '0') ~= ARGV[1] or cfg[2] ~= '0' or cfg[3] ~= '0' then
  return {R.STALE_CONFIG}
end
local wanted = (#ARGV - 1) / 2
local batch = redis.pcall('LPOP', KEYS[2], wanted)
if type(batch) == 'table' and batch.err then
  return {R.CORRUPT, KEYS[2] .. ': ' .. batch.err}
end
if not batch then
  return {}
end
local n = #batch
local claim_args, deadline_args = {}, {}
for i = 1, n do
  local item = batch[i]
  claim_args[2 * i - 1], claim_args[2 * i] = item, ARGV[2 * i]
  deadline_args[2 * i - 1], deadline_args[2 * i] = ARGV[2 * i + 1], item
end
-- A command that fails writes nothing, so each write is undone only if it
-- was made. (Replies are integers; an error is a table.)
local failed_at, why
local reply = redis.pcall('SREM', KEYS[3], unpack(batch))
if type(reply) == 'table' then
  failed_at, why = KEYS[3], reply.err
else
  reply = redis.pcall('HSET', KEYS[4], unpack(claim_args))
  if type(reply) == 'table' then
    failed_at, why = KEYS[4], reply.err
    redis.pcall('SADD', KEYS[3], unpack(batch))
  else
    reply = redis.pcall('ZADD', KEYS[5], unpack(deadline_args))
    if type(reply) == 'table' then
      failed_at, why = KEYS[5], reply.err
      redis.pcall('HDEL', KEYS[4], unpack(batch))
      redis.pcall('SADD', KEYS[3], unpack(batch))
    end
  end
end
if failed_at then
  local reversed = {}
  for i = n, 1, -1 do reversed[n - i + 1] = batch[i] end
  redis.pcall('LPUSH', KEYS[2], unpack(reversed))
  return {R.CORRUPT, failed_at .. ': ' .. tostring(why)}
end
return batch
