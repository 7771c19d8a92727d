-- refill.lua: bring an on-disk segment's items back into its queue, routed
-- to the limit groups' sub-queues, and forget the segment, in one step.
-- Two frontends refilling the same segment queue it once: the second finds
-- no record.
--
-- KEYS[1] config   HASH (limit_groups_version, filters_version)
-- KEYS[2] segments HASH id -> "state queue count node created source"
-- KEYS[3] offload  HASH "q:<queue>" -> items of the queue on disk
-- KEYS[4] claims   HASH  \
-- KEYS[5] done     SET    > an item out or done (queued again while this
-- KEYS[6] recent_done ZSET/  copy was on disk, then served) is dropped
-- KEYS[7] failed   HASH the failed items: an item failed while this copy
--          was on disk is dropped (an operator requeues it from there)
-- KEYS[8] queued   SET the items waiting in the list queues: an item
--          already waiting (queued again while this copy was on disk) is
--          dropped, the others join it
-- KEYS[9] stats    HASH counters (items_filtered)
-- KEYS[10] index   STRING the segment's index, dropped with the segment
-- KEYS[11..] the target queues (LIST): the shared queue and its limit
--          groups' sub-queues
--
-- ARGV[1] id
-- ARGV[2] the limit_groups_version the items were routed by
-- ARGV[3] the filters_version the caller dropped filtered items by: a
--         filter added while the items were on disk applies when they
--         come back
-- ARGV[4] how many of the segment's items the caller dropped by the
--         filters (counted in items_filtered)
-- ARGV[5] the shared queue the caller routed the items for (the record's
--         queue when the caller listed it)
-- ARGV[6..] per item the filters let through: the item, then its target
--           (1-based, among the target queues)
--
-- Returns {n, dropped}: items queued, and items dropped because a copy was
-- waiting, out, done or failed already; {0} when the segment is not on disk any more
-- (refilled, moved away or never committed), {R.COUNT_DIFFERS} when the item
-- count does not match the record, {R.STALE_GROUPS} when the limit groups
-- or the filters changed, or {R.MOVED} when the segment was moved to
-- another queue since the caller listed it.

local record = redis.call('HGET', KEYS[2], ARGV[1])
if not record then return {0} end
local state, queue, count = string.match(record, '^(%S+) (%S+) (%S+) ')
if state ~= 'disk' then return {0} end
if queue ~= ARGV[5] then return {R.MOVED} end
if (redis.call('HGET', KEYS[1], 'limit_groups_version') or '0') ~= ARGV[2] then
  return {R.STALE_GROUPS}
end
if (redis.call('HGET', KEYS[1], 'filters_version') or '0') ~= ARGV[3] then
  return {R.STALE_GROUPS}
end
local filtered = tonumber(ARGV[4])
if (#ARGV - 5) / 2 + filtered ~= tonumber(count) then return {R.COUNT_DIFFERS} end
local to = {}
for i = 6, #ARGV, 2 do
  local key = KEYS[10 + tonumber(ARGV[i + 1])]
  to[key] = to[key] or {}
  table.insert(to[key], ARGV[i])
end
local index = KEYS[8]
local queued, dropped = 0, 0
for key, items in pairs(to) do
  local fresh = {}
  local placed = placed_already(items, index, KEYS[4], KEYS[5], KEYS[6], KEYS[7])
  for _, item in ipairs(items) do
    if placed[item] then
      dropped = dropped + 1
    else
      fresh[#fresh + 1] = item
    end
  end
  if #fresh > 0 then
    call_chunked('RPUSH', key, fresh)
    call_chunked('SADD', index, fresh)
    queued = queued + #fresh
  end
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[10])
if filtered > 0 then
  redis.call('HINCRBY', KEYS[9], 'items_filtered', filtered)
end
redis.call('HINCRBY', KEYS[3], 'q:' .. queue, -tonumber(count))
return {queued, dropped}
