-- done_plain.lua: complete items of a plain project, atomically, with only
-- the keys and commands such a done needs: a project that keeps a done set,
-- with no event log, extras or budget, whose items are each the reporter's
-- first claim (nearly every done). Anything else (a repeat, a reclaimed or
-- released item, a stranger's, another setting) is answered R.NOT_PLAIN
-- with nothing changed, and the frontend runs done.lua; a list naming an
-- item twice the frontend sends to done.lua without asking this script.
-- The settings are read here, not cached: a frontend of the build before
-- changing them cannot leave this script acting on a stale copy.
--
-- KEYS[1] config     HASH  event_log, done_mode, has_extras,
--                          downloader_budget and log_length are read
-- KEYS[2] claims     HASH  item -> claim record
-- KEYS[3] done       SET
-- KEYS[4] deadlines  ZSET  item -> reclaim deadline (ms)
-- KEYS[5] batches    HASH  claim batches (lua/prelude.lua): an item whose
--                          record names a batch leaves it
-- KEYS[6] batch_deadlines ZSET batch id -> reclaim deadline (ms)
-- (KEYS[5] and KEYS[6] are given only for batch_min or more items,
-- queues.plainKeys: without them an item of a batch is R.NOT_PLAIN.)
--
-- ARGV[1] downloader who reports the items
-- ARGV[2..] the items (at most 1000), each once: the caller sends a list
--            that names an item twice to done.lua (done.lua counts it once;
--            this script would count it twice)
--
-- Returns
--   "<at> <log_length>"  ARGV names one item, completed now (new, the
--                      reporter's first claim): its claim time (ms, text),
--                      a space, and the config's log_length text ("" when
--                      unset), as one bulk string
--   {1, log_length, at1, n1, at2, n2, ...}  ARGV names more items, every
--                      one completed now (as many new as ARGV names, none
--                      a duplicate):
--                      log_length is the config's text, "" when unset;
--                      then for each run of items sharing a claim record
--                      its claim time (ms, text) and the run's length, from
--                      which the caller sums now - at over the items. Flat,
--                      not done.lua's layout: each table in a reply costs
--                      Redis a walk of its own (this is a different script,
--                      so a frontend of the build before never reads it).
--   {R.NOT_PLAIN}      nothing changed; run done.lua
--   {R.CORRUPT, why}   the done set has the wrong type: nothing changed
--
-- Note: where the items go is written first (if that fails nothing has
-- changed), then their claims and deadlines are removed: the order of
-- done.lua's plain path. An item of a claim batch (its record's earlier
-- claimants are "#<id>", lua/prelude.lua) has no deadline of its own: its batch's count
-- goes down per run of its items, and the batch goes with its last item.
--
-- Note: a done of one item (nearly every call at multi=1) runs its own copy
-- of the checks and writes, in the same order, without the records' table,
-- the loop or unpack: about 5k of its ~63k Redis instructions inside FCALL
-- (docs/warrior-path.md). It answers one string, not a table: the table
-- (made element by element in Lua, then walked by Redis for err, ok,
-- double, map ... before its elements) and its garbage cost more than the
-- concatenation, 88.1k -> 82.6k Redis instructions per call (callgrind,
-- BenchmarkPlainScriptsDirect).
--
-- Note: nothing is formatted or converted to a number here (a printf or a
-- strtod per call, which the claim-to-done sum and log_length cost when
-- the script computed them): the caller does it from the text.

local cfg = redis.call('HMGET', KEYS[1], 'event_log', 'done_mode', 'has_extras', 'downloader_budget', 'log_length')
if cfg[1] ~= '0' or cfg[2] ~= 'keep' or cfg[3] ~= '0' or cfg[4] ~= '0' then
  return {R.NOT_PLAIN}
end
local downloader = ARGV[1]
local n = #ARGV - 1
if n == 1 then
  -- One item (nearly every done): the same checks and writes in the same
  -- order as below, with no table but the reply: HGET answers a string
  -- where HMGET's answer is a table Redis builds element by element, and
  -- the item is passed as it is.
  local item = ARGV[2]
  local record = redis.call('HGET', KEYS[2], item)
  if not record then return {R.NOT_PLAIN} end
  -- An item of a claim batch: its batch's keys come only with
  -- batch_min or more items, so done.lua counts its batch down.
  if string.find(record, '#', 1, true) then return {R.NOT_PLAIN} end
  local at, claimant = string.match(record, '^1 (%d+) (%S+) ')
  if claimant ~= downloader then return {R.NOT_PLAIN} end
  local added = redis.pcall('SADD', KEYS[3], item)
  if type(added) == 'table' then
    return {R.CORRUPT, 'completions could not be kept: ' .. tostring(added.err)}
  end
  redis.call('HDEL', KEYS[2], item)
  redis.call('ZREM', KEYS[4], item)
  return at .. ' ' .. (cfg[5] or '')
end
local records = redis.call('HMGET', KEYS[2], unpack(ARGV, 2))
-- A multi=N claim gave its N items one record, and Lua keeps one copy of
-- equal strings, so a record equal to the one before is the same string:
-- each run of items sharing a record is matched once, not once per item.
local reply, runs = {1, cfg[5] or ''}, 0
local last, run = nil, 0
local batch, left, unbatched = nil, nil, false
for i = 1, n do
  local record = records[i]
  if record ~= last then
    if not record then return {R.NOT_PLAIN} end
    if runs > 0 then reply[2 * runs + 2] = run end
    if batch then left[batch] = (left[batch] or 0) + run end
    local at, claimant = string.match(record, '^1 (%d+) (%S+) ')
    batch = nil
    -- A claim batch's item: its earlier claimants are "#<batch id>" (no
    -- other field of a record holds a "#"; a plain find costs a multi=1
    -- done less than matching the field).
    if string.find(record, '#', 1, true) then
      batch = string.match(record, '^%S+ %S+ %S+ %S+ #(%d+) %S+$')
      if batch and #KEYS < 6 then return {R.NOT_PLAIN} end
    end
    if claimant ~= downloader then return {R.NOT_PLAIN} end
    runs = runs + 1
    reply[2 * runs + 1] = at
    last, run = record, 0
    if batch then
      left = left or {}
    else
      unbatched = true
    end
  end
  run = run + 1
end
reply[2 * runs + 2] = run
if batch then left[batch] = (left[batch] or 0) + run end
local added = redis.pcall('SADD', KEYS[3], unpack(ARGV, 2))
if type(added) == 'table' then
  return {R.CORRUPT, 'completions could not be kept: ' .. tostring(added.err)}
end
redis.call('HDEL', KEYS[2], unpack(ARGV, 2))
if unbatched then
  redis.call('ZREM', KEYS[4], unpack(ARGV, 2))
end
if left then
  -- As the prelude's batch_leave (not prepended here).
  local batched = 0
  for id, k in pairs(left) do
    batched = batched + k
    if redis.call('HINCRBY', KEYS[5], 'n' .. id, -k) <= 0 then
      redis.call('HDEL', KEYS[5], 'n' .. id, 'i' .. id)
      redis.call('ZREM', KEYS[6], id)
    end
  end
  redis.call('HINCRBY', KEYS[5], 'out', -batched)
end
return reply
