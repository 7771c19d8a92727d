-- expire_scan.lua: write the claims whose reclaim deadline passed to the
-- project's event log, once each, and move the cursor past them. An
-- expired claim that claim.lua reclaims before this scan reaches it is
-- logged by claim.lua instead (its deadline is then past the cursor), so
-- every expiry is logged exactly once, whichever comes first, and an
-- expired claim nobody reclaims (an idle project) is still logged.
--
-- KEYS[1] config      HASH
-- KEYS[2] deadlines   ZSET item -> reclaim deadline (ms)
-- KEYS[3] claims      HASH item -> claim record
-- KEYS[4] events      STREAM the event log
-- KEYS[5] expired_to  STRING the deadline (ms) logged up to
-- KEYS[6] batches     HASH claim batches (lua/prelude.lua)
-- KEYS[7] batch_deadlines ZSET batch id -> reclaim deadline (ms): a due
--                          batch is moved to deadlines (per item, at the
--                          batch's deadline) before the scan reads them
--
-- ARGV[1] now (ms)
-- ARGV[2] the most expiries to log in this call (>= 1)
--
-- Returns
--   {1, logged, more}  logged expiries; more = 1 when due ones remain
--   {0}                the project's event log is off; nothing changed
--   {R.NO_PROJECT}     no such project
--   {R.CORRUPT, why}   corrupt state, nothing changed

local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'event_log')
if not cfg[1] then
  return {R.NO_PROJECT}
end
local events_max = event_log_max(cfg[2])
if not events_max then
  return {0}
end
local expected = {[2] = 'zset', [3] = 'hash', [4] = 'stream', [5] = 'string', [6] = 'hash', [7] = 'zset'}
for i, want in pairs(expected) do
  local have = redis.call('TYPE', KEYS[i])['ok']
  if have ~= 'none' and have ~= want then
    return {R.CORRUPT, KEYS[i] .. ' is a ' .. have .. ', not a ' .. want}
  end
end
local raw = redis.call('GET', KEYS[5])
local cursor = tonumber(raw or '0')
if not cursor then
  return {R.CORRUPT, KEYS[5] .. ' is not a number'}
end
if cursor >= now then
  return {1, 0, 0}
end
-- Due claim batches become claims of their own first, so the scan below
-- sees every due claim. When a page of them was full, more may be due:
-- this call logs only up to the last one moved (and the batches sharing
-- its deadline, moved too), and says there is more.
local batches_more = false
local last_batch = batches_explode_due(KEYS[3], KEYS[2], KEYS[6], KEYS[7], now, limit)
if last_batch then
  batches_more = true
  local same = redis.call('ZRANGEBYSCORE', KEYS[7], int(last_batch), int(last_batch), 'WITHSCORES')
  for i = 1, #same, 2 do
    batch_explode(KEYS[3], KEYS[2], KEYS[6], KEYS[7], same[i], same[i + 1])
  end
  -- (A batch rescored to before the cursor never moves it back.)
  now = math.max(last_batch, cursor)
end

local page = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. int(cursor), int(now), 'WITHSCORES', 'LIMIT', 0, limit)
local n = #page / 2
local more = batches_more and 1 or 0
if n == 0 then
  redis.call('SET', KEYS[5], int(now))
  return {1, 0, more}
end
local last = tonumber(page[#page])
local upto = n
if n == limit then
  more = 1
  -- A full page may cut through items sharing the last deadline: stop
  -- before them, unless they are the whole page, then take all of them.
  while upto > 0 and tonumber(page[upto * 2]) == last do upto = upto - 1 end
  if upto == 0 then
    page = redis.call('ZRANGEBYSCORE', KEYS[2], int(last), int(last), 'WITHSCORES')
    upto = #page / 2
  else
    last = tonumber(page[upto * 2])
  end
else
  last = now
end

for i = 1, upto do
  local item, deadline = page[2 * i - 1], tonumber(page[2 * i])
  local record = redis.call('HGET', KEYS[3], item)
  local holder = ''
  if record then
    local _, _, claimant = parse_claim(record)
    holder = claimant or ''
  end
  log_event(KEYS[4], events_max, 'reclaim', {item}, holder, deadline)
end
redis.call('SET', KEYS[5], int(last))
return {1, upto, more}
