-- filter_sift.lua: drop the items a project's filters match from the head
-- of one list queue, beside live traffic and without a lock, as sift.lua
-- re-routes for limit groups: the caller peeks at the head, decides which
-- items its filters drop, and this script pops the head and applies the
-- decisions. Kept items rotate to the tail (a pass over the queue's length
-- leaves them in their order).
--
-- KEYS[1] config  HASH  (filters_version)
-- KEYS[2] source  LIST
-- KEYS[3] queued  SET   the items waiting in the list queues: a dropped
--                       item leaves it
-- KEYS[4] stats   HASH  items_filtered (counter)
-- KEYS[5] extras  HASH  item -> JSON: a dropped item's extras go with it
--
-- ARGV[1] the filters_version the decisions were made with
-- ARGV[2] K, how many items to pop from the source head
-- ARGV[3..] (item, d) pairs: d = 1 drops the item, d = 0 keeps it (rotated
--         to the tail)
--
-- Returns {popped, dropped, rotated, unseen}; unseen items (the head moved
-- under a claim after the caller peeked) are pushed back to the head in
-- order, undecided. {R.NO_PROJECT} when the project does not exist,
-- {R.STALE_GROUPS} when the filters changed since the decisions.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {R.NO_PROJECT}
end
if (redis.call('HGET', KEYS[1], 'filters_version') or '0') ~= ARGV[1] then
  return {R.STALE_GROUPS}
end
local batch = redis.call('LPOP', KEYS[2], tonumber(ARGV[2]))
if not batch then
  return {0, 0, 0, 0}
end
local decisions = {}
for i = 3, #ARGV, 2 do
  decisions[ARGV[i]] = ARGV[i + 1]
end
local drop, rotate, unseen = {}, {}, {}
for _, item in ipairs(batch) do
  local d = decisions[item]
  if d == nil then
    unseen[#unseen + 1] = item
  elseif d == '1' then
    drop[#drop + 1] = item
  else
    rotate[#rotate + 1] = item
  end
end
if #drop > 0 then
  call_chunked('SREM', KEYS[3], drop)
  call_chunked('HDEL', KEYS[5], drop)
  redis.call('HINCRBY', KEYS[4], 'items_filtered', #drop)
end
if #rotate > 0 then
  call_chunked('RPUSH', KEYS[2], rotate)
end
if #unseen > 0 then
  local back = {}
  for i = #unseen, 1, -1 do back[#back + 1] = unseen[i] end
  call_chunked('LPUSH', KEYS[2], back)
end
return {#batch, #drop, #rotate, #unseen}
