-- release.lua: put claimed items back in todo:redo, atomically per item.
-- Used by a warrior giving up its own item and by operators releasing stale
-- or a downloader's claims.
--
-- KEYS[1] config     HASH
-- KEYS[2] redo       LIST todo:redo (released items go to its tail)
-- KEYS[3] deadlines  ZSET item -> reclaim deadline (ms): every claim out
-- KEYS[4] claims     HASH item -> claim record
-- KEYS[5] budget     HASH downloader -> items out (while a budget limit is set)
-- KEYS[6] stats      HASH counters
-- KEYS[7] released   HASH item -> released record
-- KEYS[8] failed     HASH item -> failed record: a released item claimed
--                    max_claims times goes here, not to redo
-- KEYS[9] history    HASH item -> its ended claims (a release adds one)
-- KEYS[10..#KEYS-3] the sub-queues of todo:redo of each limit group (LIST)
-- KEYS[#KEYS-2] batches HASH claim batches (lua/prelude.lua): an item whose
--                    record names a batch leaves it
-- KEYS[#KEYS-1] batch_deadlines ZSET batch id -> reclaim deadline (ms)
-- KEYS[#KEYS] queued SET the items waiting in the list queues: released
--           items join it
--
-- ARGV[1] now (ms)
-- ARGV[2] only items claimed by this downloader ("" = anyone's)
-- ARGV[3] only items claimed at or before this time in ms ("" = any time)
-- ARGV[4] the limit_groups_version the caller routed by
-- ARGV[5..] (item, d) pairs: d = 0 sends the item to todo:redo, d >= 1 to
--         KEYS[9 + d], the sub-queue of its limit group (so a release never
--         lets an item skip its group's limit)
--
-- Returns {released, not_out, filtered, failed}
--   released  items moved from out to todo:redo or, when claimed
--             max_claims times (the project's setting, 0 = off), to failed
--   failed    how many of the released went to failed
--   not_out   items that were not out (never handed out, done, or already released)
--   filtered  items out but excluded by ARGV[2] or ARGV[3]
--   {R.NO_PROJECT} when the project does not exist, {R.STALE_GROUPS} when the
--   routing is stale.
--
-- Note: a released item keeps its claim count and claimants in "released"
-- while it waits in redo, so a late done from a claimant still completes it
-- and the next claim continues the count (TTL x times claimed).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {R.NO_PROJECT}
end
local cfg = redis.call('HMGET', KEYS[1], 'limit_groups_version', 'max_claims', 'downloader_budget')
if (cfg[1] or '0') ~= ARGV[4] then
  return {R.STALE_GROUPS}
end
local max_claims = tonumber(cfg[2] or '0') or 0
local budget_on = budget_kept(cfg[3])
local now = tonumber(ARGV[1])
local only_downloader = ARGV[2]
local cutoff = tonumber(ARGV[3])

local released, not_out, filtered, failed = 0, 0, 0, 0
local to = {}
-- The first released record moves config_version: frontends serve no
-- plain claim (claim_plain.lua) while released items exist.
local released_before = redis.call('EXISTS', KEYS[7]) == 1
for i = 5, #ARGV, 2 do
  local item = ARGV[i]
  local d = tonumber(ARGV[i + 1])
  local record = redis.call('HGET', KEYS[4], item)
  if not record then
    not_out = not_out + 1
  else
    local count, claimed_at, claimant, _, earlier, _, batch = parse_claim(record)
    if (only_downloader ~= '' and claimant ~= only_downloader) or (cutoff and claimed_at > cutoff) then
      filtered = filtered + 1
    else
      if budget_on then budget_decrement(KEYS[5], claimant) end
      claim_remove(KEYS[4], KEYS[3], KEYS[#KEYS - 2], KEYS[#KEYS - 1], item, batch)
      history_push(KEYS[9], item, claimant, claimed_at, 'released')
      if max_claims > 0 and count >= max_claims then
        fail_item(KEYS[8], KEYS[9], item, count, now, 'max_claims', '')
        failed = failed + 1
      else
        redis.call('HSET', KEYS[7], item, string.format('%d %.0f %s', count, now, push_claimant(claimant, earlier, 5)))
        local key = d > 0 and KEYS[9 + d] or KEYS[2]
        to[key] = to[key] or {}
        table.insert(to[key], item)
      end
      released = released + 1
    end
  end
end
for key, items in pairs(to) do
  call_chunked('RPUSH', key, items)
  call_chunked('SADD', KEYS[#KEYS], items)
end
if released > 0 then
  redis.call('HINCRBY', KEYS[6], 'items_released', released)
end
if not released_before and redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'config_version', 1)
end
if failed > 0 then
  redis.call('HINCRBY', KEYS[6], 'items_failed', failed)
end
return {released, not_out, filtered, failed}
