-- claim_plain.lua: hand out items from todo to one downloader of a plain
-- project, atomically, with only the keys and commands such a claim needs.
-- The frontend decides from its cached copy of the project's settings
-- (queues/plainclaim.go) that the project is plain: no pause, minimum
-- version above the client's, rate, budget, claims limit, limit groups,
-- blocks of this downloader or its IP, reservation for it, scored queue,
-- released items, extras or duplicate look-up. This script checks that the copy is current
-- (one HMGET) and pops; anything it cannot do it answers with a code and
-- changes nothing, and the frontend runs claim.lua, the general claim.
--
-- KEYS[1] config     HASH  project settings: config_version, has_extras and
--                          pop_check are read
-- KEYS[2] todo       LIST
-- KEYS[3] queued     SET   the items waiting in the list queues: a popped
--                          item leaves it
-- KEYS[4] claims     HASH  item -> claim record
-- KEYS[5] deadlines  ZSET  item -> reclaim deadline (ms): a claim of fewer
--                          than batch_min items
-- KEYS[6] batches    HASH  claim batches (lua/prelude.lua): a claim of
--                          batch_min or more items writes one
-- KEYS[7] batch_deadlines ZSET batch id -> reclaim deadline (ms)
-- (KEYS[6] and KEYS[7] are given only with ARGV[2] of batch_min or more:
-- queues.plainKeys; each key costs a call ~0.5k instructions.)
--
-- ARGV[1] the config_version the frontend's copy was read at ("0" when the
--         config had none)
-- ARGV[2] items wanted (1..1000; the caller caps it by max_multi)
-- ARGV[3] the claim record of a first claim, "1 <now> <downloader> <ip> - -"
--         (the prelude's format_claim, built by the caller)
-- ARGV[4] the reclaim deadline of a first claim (ms): now + the reclaim TTL
--
-- Returns
--   item                    ARGV[2] is "1": the one item claimed from todo's
--                           head, as a bulk string (no table to build or
--                           walk, here or in the reply)
--   "item1\nitem2\n..."     ARGV[2] is more: exactly ARGV[2] items claimed
--                           from todo's head, in order, joined by "\n" (no
--                           name holds one: queues.ValidateItem) as one bulk
--                           string: a batch's claim writes the same join
--                           into its record anyway, and one string costs
--                           Redis one reply where a table of N cost N, each
--                           walked (~0.8k instructions per item at
--                           multi=100) and the frontend N strings to read
--   {R.STALE_CONFIG}        the settings changed since the caller's copy
--                           (config_version), or the project went (no
--                           has_extras), or has_extras or pop_check are no
--                           longer "0" (a frontend of the build before sets
--                           them without moving config_version): nothing
--                           changed; re-read the settings, claim with claim.lua
--   {R.NOT_PLAIN}           todo holds fewer than ARGV[2] items (the general
--                           claim serves the other queues and reclaims):
--                           nothing changed
--   {R.CORRUPT, why}        a key has the wrong type: nothing changed (items
--                           popped are back at todo's head, in order, and in
--                           the queued index)
--
-- Note: the same writes in the same order as claim.lua's plain path: pop,
-- the queued index, the claim record (what done.lua and reclaims go by),
-- the deadline; what fails after the pop undoes the writes before it and
-- pushes the items back. No counters are written here: the frontend counts
-- the request from the reply (queues/counters.go). The prelude is not
-- prepended (its functions would be closures made on every call).
--
-- Note: a claim of one item (seesaw's request without multi, nearly every
-- call) runs its own copy of the writes and their undo, in the same order:
-- it pops without a count and passes the item and ARGV as they are, so no
-- table is built for the pop's reply, the writes' arguments or the reply,
-- and no number is converted (LPOP's count was a tonumber and, as an
-- argument, a printf per call). Per call that is about a sixth of the
-- script's Redis instructions (docs/warrior-path.md).
--
-- Note: a claim of batch_min (queues.claimBatchMin, 4) or more items
-- shares one deadline, written once (a claim batch, lua/prelude.lua): the
-- pop, the queued index, the batch (its id, record and items, count,
-- deadline), then the claim records naming it; what fails undoes the same
-- way. The per-item ZADD here and ZREM at the done were a quarter of
-- Redis's instructions per item at multi=100. A claim of fewer items keeps
-- a deadline per item, which costs less than the batch's four commands.
-- The batch is written inline, not as a function: a function would be a
-- closure made on every call.

local cfg = redis.call('HMGET', KEYS[1], 'config_version', 'has_extras', 'pop_check')
if (cfg[1] or '0') ~= ARGV[1] or cfg[2] ~= '0' or cfg[3] ~= '0' then
  return {R.STALE_CONFIG}
end
if ARGV[2] == '1' then
  local item = redis.pcall('LPOP', KEYS[2])
  if type(item) == 'table' then
    return {R.CORRUPT, KEYS[2] .. ': ' .. tostring(item.err)}
  end
  if not item then
    return {R.NOT_PLAIN}
  end
  local failed_at, why
  local reply = redis.pcall('SREM', KEYS[3], item)
  if type(reply) == 'table' then
    failed_at, why = KEYS[3], reply.err
  else
    reply = redis.pcall('HSET', KEYS[4], item, ARGV[3])
    if type(reply) == 'table' then
      failed_at, why = KEYS[4], reply.err
      redis.pcall('SADD', KEYS[3], item)
    else
      reply = redis.pcall('ZADD', KEYS[5], ARGV[4], item)
      if type(reply) == 'table' then
        failed_at, why = KEYS[5], reply.err
        redis.pcall('HDEL', KEYS[4], item)
        redis.pcall('SADD', KEYS[3], item)
      end
    end
  end
  if failed_at then
    redis.pcall('LPUSH', KEYS[2], item)
    return {R.CORRUPT, failed_at .. ': ' .. tostring(why)}
  end
  return item
end
local wanted = tonumber(ARGV[2])
local batch = redis.pcall('LPOP', KEYS[2], wanted)
if type(batch) == 'table' and batch.err then
  return {R.CORRUPT, KEYS[2] .. ': ' .. batch.err}
end
if not batch then
  return {R.NOT_PLAIN}
end
local n = #batch
if n < wanted then
  -- Put back as they were: the general claim takes them with the rest.
  local reversed = {}
  for i = n, 1, -1 do reversed[n - i + 1] = batch[i] end
  redis.call('LPUSH', KEYS[2], unpack(reversed))
  return {R.NOT_PLAIN}
end
local record, deadline = ARGV[3], ARGV[4]
local failed_at, why, joined
if #KEYS == 7 then
  -- HINCRBY proves the batches hash's type, so its HSET and HINCRBY
  -- cannot fail after it.
  local reply = redis.pcall('SREM', KEYS[3], unpack(batch))
  local id
  if type(reply) == 'table' then
    failed_at, why = KEYS[3], reply.err
  else
    id = redis.pcall('HINCRBY', KEYS[6], 'seq', 1)
    if type(id) == 'table' then
      failed_at, why = KEYS[6], id.err
      id = nil
    end
  end
  if id then
    id = tostring(id)
    joined = table.concat(batch, '\n')
    redis.call('HSET', KEYS[6], 'i' .. id, record .. '\n' .. joined, 'n' .. id, n)
    redis.call('HINCRBY', KEYS[6], 'out', n)
    reply = redis.pcall('ZADD', KEYS[7], deadline, id)
    if type(reply) == 'table' then
      failed_at, why = KEYS[7], reply.err
    else
      -- ARGV[3] ends in "- -": the earlier claimants name the batch.
      local mine, claim_args = string.sub(record, 1, -4) .. '#' .. id .. ' -', {}
      for i = 1, n do
        claim_args[2 * i - 1], claim_args[2 * i] = batch[i], mine
      end
      reply = redis.pcall('HSET', KEYS[4], unpack(claim_args))
      if type(reply) == 'table' then
        failed_at, why = KEYS[4], reply.err
        redis.call('ZREM', KEYS[7], id)
      end
    end
    if failed_at then
      redis.call('HDEL', KEYS[6], 'i' .. id, 'n' .. id)
      redis.call('HINCRBY', KEYS[6], 'out', -n)
    end
  end
  if failed_at and failed_at ~= KEYS[3] then redis.pcall('SADD', KEYS[3], unpack(batch)) end
else
  local claim_args, deadline_args = {}, {}
  for i = 1, n do
    claim_args[2 * i - 1], claim_args[2 * i] = batch[i], record
    deadline_args[2 * i - 1], deadline_args[2 * i] = deadline, batch[i]
  end
  -- A command that fails writes nothing, so each write is undone only if it
  -- was made. (Replies are integers; an error is a table.)
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
end
if failed_at then
  local reversed = {}
  for i = n, 1, -1 do reversed[n - i + 1] = batch[i] end
  redis.pcall('LPUSH', KEYS[2], unpack(reversed))
  return {R.CORRUPT, failed_at .. ': ' .. tostring(why)}
end
return joined or table.concat(batch, '\n')
