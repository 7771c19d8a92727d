-- enqueue.lua: append items to a project's queues. The caller routes each
-- item (to a todo queue, a limit group's sub-queue, or a reserved queue);
-- this script appends each list of items to its key.
--
-- KEYS[1] config    HASH (has_extras is set to 1 when extras are written;
--                   bloom_only is cleared when items are queued)
-- KEYS[2] extras    HASH item -> JSON object of extra keys
-- KEYS[3] stats     HASH counters
-- KEYS[4] reserved  SET  downloaders with a reserved queue (a new one moves
--                   the config's config_version)
-- KEYS[5] claims    HASH item -> claim record
-- KEYS[6] done      SET
-- KEYS[7] recent_done ZSET the latest completions (done_mode count or
--                   archive keep these instead of a done set)
-- KEYS[8..#KEYS-2] the target queues (LIST)
-- KEYS[#KEYS-1] failed HASH the failed items: an item there is skipped (an
--                   operator requeues it from there)
-- KEYS[#KEYS] queued SET the items waiting in the list queues (queues.QueuedKey)
--
-- ARGV[1] the downloader when a target is a reserved queue, else ""
-- ARGV[2] the limit_groups_version the caller routed by ("" = not checked:
--         no item was routed by groups)
-- ARGV[3] the filters_version the caller dropped filtered items by ("" = not
--         checked)
-- ARGV[4] how many items the caller dropped by the filters (counted in
--         stats.items_filtered once the versions match)
-- ARGV[5] E, the number of (item, extras JSON) pairs that follow; then the
--         pairs; then, for each target in KEYS order, its item count
--         followed by its items.
--
-- Returns {queued, skipped, length of the last target, already_queued}:
-- items queued, items skipped because they are out, done already (in the
-- done set, or among the recent completions) or failed, and items skipped because they
-- are waiting in a queue already (the queued index, or earlier in this
-- batch); or {R.NO_PROJECT} when the project does not exist,
-- {R.STALE_GROUPS, version} when the routing or the filtering is stale.
--
-- Note: each item costs a few O(1) look-ups (claims, done, recent_done, the
-- queued index), never a scan of a queue. An item whose copy is in an
-- offloaded segment is not in the index; refill.lua drops that copy.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {R.NO_PROJECT}
end
if ARGV[2] ~= '' then
  local current = redis.call('HGET', KEYS[1], 'limit_groups_version') or '0'
  if current ~= ARGV[2] then return {R.STALE_GROUPS, current} end
end
if ARGV[3] ~= '' then
  local current = redis.call('HGET', KEYS[1], 'filters_version') or '0'
  if current ~= ARGV[3] then return {R.STALE_GROUPS, current} end
end
local filtered = tonumber(ARGV[4])
if filtered > 0 then
  redis.call('HINCRBY', KEYS[3], 'items_filtered', filtered)
end
local pairs_count = tonumber(ARGV[5])
local pos = 6 + pairs_count * 2
-- Extras are written for the items this call queues only: an item skipped
-- (out, done or already waiting) keeps what it has, and a skipped item
-- leaves no extras behind.
local extras_of = {}
for i = 6, pos - 1, 2 do extras_of[ARGV[i]] = ARGV[i + 1] end
local extras = {}
local any_recent = redis.call('EXISTS', KEYS[7]) == 1
local any_failed = redis.call('EXISTS', KEYS[#KEYS - 1]) == 1
local index = KEYS[#KEYS]
local queued, skipped, already, length = 0, 0, 0, 0
for k = 8, #KEYS - 2 do
  local n = tonumber(ARGV[pos])
  pos = pos + 1
  local items = {}
  for i = pos, pos + n - 1 do
    local item = ARGV[i]
    if redis.call('HEXISTS', KEYS[5], item) == 1 or redis.call('SISMEMBER', KEYS[6], item) == 1
        or (any_recent and redis.call('ZSCORE', KEYS[7], item))
        or (any_failed and redis.call('HEXISTS', KEYS[#KEYS - 1], item) == 1) then
      skipped = skipped + 1
    elseif redis.call('SADD', index, item) == 0 then
      already = already + 1
    else
      items[#items + 1] = item
      if extras_of[item] then
        extras[#extras + 1] = item
        extras[#extras + 1] = extras_of[item]
      end
    end
  end
  pos = pos + n
  if #items > 0 then
    call_chunked('RPUSH', KEYS[k], items)
    queued = queued + #items
  end
  length = redis.call('LLEN', KEYS[k])
end
if #extras > 0 then
  call_chunked('HSET', KEYS[2], extras)
  -- Set where extras are written, so claim.lua and done.lua need not ask
  -- whether any exist (config_write.lua starts a project at "0").
  redis.call('HSET', KEYS[1], 'has_extras', '1')
end
if queued > 0 then
  redis.call('HINCRBY', KEYS[3], 'items_queued', queued)
  -- Items that bypassed the Bloom filter are waiting now: bloom_add.lua
  -- looks up the items its filter has not seen from here on (it sets
  -- bloom_only when it starts the filter of a project no item has entered
  -- yet). HDEL of a field that is gone writes nothing, not even to the AOF.
  redis.call('HDEL', KEYS[1], 'bloom_only')
  -- A new reservation moves config_version: frontends serve a downloader
  -- with one through claim.lua, which serves its reserved queue first.
  if ARGV[1] ~= '' and redis.call('SADD', KEYS[4], ARGV[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'config_version', 1)
  end
end
return {queued, skipped, length, already}
