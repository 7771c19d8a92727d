-- import_state.lua: carry done items and claims over from another tracker
-- (a universal-tracker's Redis), atomically per batch. An item that is
-- already out, done or failed here is skipped, so an import can be run
-- again and a failed item stays in its one place until an operator
-- requeues it.
--
-- KEYS[1] config       HASH (done_mode, recent_done, reclaim_ttl_ms;
--                      bloom_only is cleared when items are imported)
-- KEYS[2] deadlines    ZSET item -> reclaim deadline (ms)
-- KEYS[3] claims       HASH item -> claim record
-- KEYS[4] done         SET
-- KEYS[5] recent_done  ZSET item -> done at (ms)
-- KEYS[6] budget       HASH downloader -> items out (while a budget limit is set)
-- KEYS[7] stats        HASH counters
-- KEYS[8] failed       HASH item -> failed record
-- KEYS[9] queued       SET  the items waiting in the list queues: an item
--                      imported while a copy waits there sets the config's
--                      pop_check to "1" (claim.lua then drops that copy
--                      when it pops it, as it did before pop_check)
--
-- ARGV[1] now (ms)
-- ARGV[2] "done" or "claims"
-- then, for "done": the items; for "claims": per claim the item, the
--   downloader, the IP and the claim time (ms).
--
-- Returns {imported, skipped}, or {R.NO_PROJECT}, or {R.CORRUPT, why}
-- (nothing changed).

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'done_mode', 'recent_done', 'reclaim_ttl_ms', 'downloader_budget', 'pop_check')
if not cfg[1] then
  return {R.NO_PROJECT}
end
local expected = {[2] = 'zset', [3] = 'hash', [4] = 'set', [5] = 'zset', [6] = 'hash', [7] = 'hash', [8] = 'hash'}
for i, want in pairs(expected) do
  local have = redis.call('TYPE', KEYS[i])['ok']
  if have ~= 'none' and have ~= want then
    return {R.CORRUPT, KEYS[i] .. ' is a ' .. have .. ', not a ' .. want}
  end
end
local now = tonumber(ARGV[1])
local done_mode = cfg[2] or 'keep'
local recent_max = tonumber(cfg[3] or '1000000') or 1000000
local ttl = reclaim_ttl(cfg[4])

local function known(item)
  return redis.call('HEXISTS', KEYS[3], item) == 1 or redis.call('SISMEMBER', KEYS[4], item) == 1
    or redis.call('ZSCORE', KEYS[5], item) ~= false or redis.call('HEXISTS', KEYS[8], item) == 1
end

local imported, skipped = 0, 0
local landed = {} -- the items this batch imported
if ARGV[2] == 'done' then
  local fresh = {}
  local seen = {}
  for i = 3, #ARGV do
    local item = ARGV[i]
    if seen[item] or known(item) then
      skipped = skipped + 1
    else
      seen[item] = true
      fresh[#fresh + 1] = item
    end
  end
  if #fresh > 0 then
    -- Imported completions were archived (or not) by the old tracker:
    -- none is queued for this project's archive file.
    keep_completions(done_mode, fresh, now, KEYS[4], KEYS[5], recent_max, KEYS[7], nil)
    hincr_capped(KEYS[7], 'items_done', #fresh)
    hincr_capped(KEYS[7], 'items_imported_done', #fresh)
    imported = #fresh
    for _, item in ipairs(fresh) do landed[#landed + 1] = item end
  end
else
  for i = 3, #ARGV, 4 do
    local item, downloader, ip, at = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    if known(item) then
      skipped = skipped + 1
    else
      -- The record keeps the claim time; every claim has a deadline.
      redis.call('HSET', KEYS[3], item, format_claim(1, at, downloader, ip, '-', '-'))
      redis.call('ZADD', KEYS[2], int(at + ttl), item)
      if budget_kept(cfg[5]) then redis.call('HINCRBY', KEYS[6], downloader, 1) end
      imported = imported + 1
      landed[#landed + 1] = item
    end
  end
  if imported > 0 then hincr_capped(KEYS[7], 'claims_imported', imported) end
end
-- Imported items bypassed the Bloom filter: bloom_add.lua looks up the
-- items its filter has not seen from here on (see enqueue.lua).
if imported > 0 then redis.call('HDEL', KEYS[1], 'bloom_only') end
-- A copy still waiting in a list would be handed out again by a claim that
-- does not look for duplicates: such a project goes back to looking.
if cfg[6] == '0' and #landed > 0 then
  for _, waiting in ipairs(call_chunked_list('SMISMEMBER', KEYS[9], landed)) do
    if waiting == 1 then
      redis.call('HSET', KEYS[1], 'pop_check', '1')
      break
    end
  end
end
return {imported, skipped}
