-- fail.lua: a claimant reports that it could not do its items (POST
-- /<slug>/fail). Each goes at once, instead of after its reclaim TTL, to
-- the failed items or back to todo:redo, as the project's fail_report_to
-- says, and the reason is recorded. Either every item is accepted or
-- nothing changes: every check runs before the first write.
--
-- KEYS[1]  config     HASH
-- KEYS[2]  deadlines  ZSET item -> reclaim deadline (ms): every claim out
-- KEYS[3]  claims     HASH item -> claim record
-- KEYS[4]  budget     HASH downloader -> items out (while a budget limit is set)
-- KEYS[5]  stats      HASH counters
-- KEYS[6]  failed     HASH item -> failed record
-- KEYS[7]  history    HASH item -> its ended claims
-- KEYS[8]  released   HASH item -> released record (items sent to redo)
-- KEYS[9]  redo       LIST todo:redo
-- KEYS[10..#KEYS-3]   the sub-queues of todo:redo of each limit group (LIST)
-- KEYS[#KEYS-2] batches  HASH claim batches (lua/prelude.lua): an item whose
--                     record names a batch leaves it
-- KEYS[#KEYS-1] batch_deadlines ZSET batch id -> reclaim deadline (ms)
-- KEYS[#KEYS] queued  SET the items waiting in the list queues
--
-- ARGV[1] now (ms)
-- ARGV[2] the reporting downloader
-- ARGV[3] the limit_groups_version the caller routed by
-- ARGV[4] the reason (checked by the caller: printable, bounded)
-- ARGV[5..] (item, d) pairs: d = 0 routes a redo to todo:redo, d >= 1 to
--         KEYS[9 + d], its limit group's redo sub-queue
--
-- Returns
--   {n, "failed" | "redo", to_failed}  accepted: n items left out;
--                          to_failed of them went to failed (all, or in
--                          redo mode those claimed max_claims times)
--   {R.NO_PROJECT}
--   {R.STALE_GROUPS}
--   {R.NOT_HANDED_OUT, item, ...}  refused, nothing changed: not out
--   {R.NOT_CLAIMANT, item, ...}    refused, nothing changed: out with
--                          someone else (only the current claimant may
--                          report: an earlier one would take the item away
--                          from the warrior working on it now)

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'limit_groups_version', 'fail_report_to', 'max_claims', 'downloader_budget')
if not cfg[1] then
  return {R.NO_PROJECT}
end
if (cfg[2] or '0') ~= ARGV[3] then
  return {R.STALE_GROUPS}
end
local now = tonumber(ARGV[1])
local downloader = ARGV[2]
local reason = ARGV[4]
local to_redo = cfg[3] == 'redo'
local max_claims = tonumber(cfg[4] or '0') or 0
local budget_on = budget_kept(cfg[5])

local records, unknown, strangers = {}, {}, {}
for i = 5, #ARGV, 2 do
  local item = ARGV[i]
  local record = redis.call('HGET', KEYS[3], item)
  if not record then
    unknown[#unknown + 1] = item
  else
    local count, at, claimant, _, earlier, _, batch = parse_claim(record)
    if claimant ~= downloader then
      strangers[#strangers + 1] = item
    else
      records[#records + 1] = {item = item, d = tonumber(ARGV[i + 1]), count = count or 1, at = at or now, earlier = earlier or '-', batch = batch}
    end
  end
end
if #unknown > 0 then
  table.insert(unknown, 1, R.NOT_HANDED_OUT)
  return unknown
end
if #strangers > 0 then
  table.insert(strangers, 1, R.NOT_CLAIMANT)
  return strangers
end

local to_failed = 0
local to = {}
-- The first released record moves config_version: frontends serve no
-- plain claim (claim_plain.lua) while released items exist.
local released_before = redis.call('EXISTS', KEYS[8]) == 1
for _, r in ipairs(records) do
  local item = r.item
  if budget_on then budget_decrement(KEYS[4], downloader) end
  claim_remove(KEYS[3], KEYS[2], KEYS[#KEYS - 2], KEYS[#KEYS - 1], item, r.batch)
  history_push(KEYS[7], item, downloader, r.at, 'reported', reason)
  if not to_redo or (max_claims > 0 and r.count >= max_claims) then
    fail_item(KEYS[6], KEYS[7], item, r.count, now, 'reported', reason)
    to_failed = to_failed + 1
  else
    redis.call('HSET', KEYS[8], item, string.format('%d %.0f %s', r.count, now, push_claimant(downloader, r.earlier, 5)))
    local key = r.d > 0 and KEYS[9 + r.d] or KEYS[9]
    to[key] = to[key] or {}
    table.insert(to[key], item)
  end
end
for key, items in pairs(to) do
  call_chunked('RPUSH', key, items)
  call_chunked('SADD', KEYS[#KEYS], items)
end
redis.call('HINCRBY', KEYS[5], 'items_fail_reported', #records)
if not released_before and redis.call('EXISTS', KEYS[8]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'config_version', 1)
end
if to_failed > 0 then
  redis.call('HINCRBY', KEYS[5], 'items_failed', to_failed)
end
return {#records, to_redo and 'redo' or 'failed', to_failed}
