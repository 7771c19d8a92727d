-- done_plain_many.lua: complete one item each for several downloaders of a
-- plain project at once, atomically: the one-item plain dones
-- (lua/done_plain.lua) that warriors of one project made at the same
-- moment, coalesced by their frontend into one call (queues/plainbatch.go),
-- so Redis pays one script call's fixed cost for them all. Each item is
-- checked against its own reporter exactly as done_plain.lua checks a done
-- of one item; the items that qualify are completed, the others are
-- answered 0 and left as they were, and their reporters run done.lua, one
-- by one, as they would have without this script.
--
-- KEYS[1] config     HASH  event_log, done_mode, has_extras,
--                          downloader_budget and log_length are read
-- KEYS[2] claims     HASH  item -> claim record
-- KEYS[3] done       SET
-- KEYS[4] deadlines  ZSET  item -> reclaim deadline (ms)
--
-- ARGV[1..n]     the items, one per report, each named once: the caller
--                sends a second report of an item to done.lua after this
--                call (it is then the usual duplicate)
-- ARGV[n+1..2n]  the reporters: ARGV[n+k] reports ARGV[k] (n at most 1000)
--
-- Returns
--   {log_length, r1, ..., rn}  log_length is the config's text ("" when
--                unset); rk is the k-th item's claim time (ms, text) when
--                it was completed now (new, its reporter's first claim), or
--                0 when it was not plain (no claim record, a claim batch's
--                item, a reclaim or release, a stranger's): nothing of it
--                changed
--   {R.NOT_PLAIN}      the project's settings are not plain: nothing changed;
--                      run done.lua for each
--   {R.CORRUPT, why}   the done set has the wrong type: nothing changed
--
-- Note: where the items go is written first (if that fails nothing has
-- changed), then their claims and deadlines are removed: the order of
-- done_plain.lua and done.lua's plain path.

local cfg = redis.call('HMGET', KEYS[1], 'event_log', 'done_mode', 'has_extras', 'downloader_budget', 'log_length')
if cfg[1] ~= '0' or cfg[2] ~= 'keep' or cfg[3] ~= '0' or cfg[4] ~= '0' then
  return {R.NOT_PLAIN}
end
local n = #ARGV / 2
local records = redis.call('HMGET', KEYS[2], unpack(ARGV, 1, n))
local reply, done, all = {cfg[5] or ''}, nil, true
for i = 1, n do
  local record, at = records[i], nil
  -- A claim batch's item ("#<id>" for its earlier claimants) needs its
  -- batch's keys: done.lua counts its batch down.
  if record and not string.find(record, '#', 1, true) then
    local claimant
    at, claimant = string.match(record, '^1 (%d+) (%S+) ')
    if claimant ~= ARGV[n + i] then at = nil end
  end
  if at then
    reply[i + 1] = at
  else
    reply[i + 1] = 0
    if all then
      -- The items so far all qualified: only now is a list of them built.
      all, done = false, {}
      for j = 1, i - 1 do done[j] = ARGV[j] end
    end
  end
  if at and not all then done[#done + 1] = ARGV[i] end
end
if all then
  local added = redis.pcall('SADD', KEYS[3], unpack(ARGV, 1, n))
  if type(added) == 'table' then
    return {R.CORRUPT, 'completions could not be kept: ' .. tostring(added.err)}
  end
  redis.call('HDEL', KEYS[2], unpack(ARGV, 1, n))
  redis.call('ZREM', KEYS[4], unpack(ARGV, 1, n))
elseif #done > 0 then
  local added = redis.pcall('SADD', KEYS[3], unpack(done))
  if type(added) == 'table' then
    return {R.CORRUPT, 'completions could not be kept: ' .. tostring(added.err)}
  end
  redis.call('HDEL', KEYS[2], unpack(done))
  redis.call('ZREM', KEYS[4], unpack(done))
end
return reply
