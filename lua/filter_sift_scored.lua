-- filter_sift_scored.lua: drop the items a project's filters match from
-- the score-ordered queue (a ZSET), beside live traffic and without a lock:
-- the caller scans the set a page at a time, decides which items its
-- filters drop, and this script removes those still there. Items claimed
-- meanwhile are no longer members and are not counted.
--
-- KEYS[1] config  HASH  (filters_version)
-- KEYS[2] scored  ZSET  the score-ordered queue
-- KEYS[3] stats   HASH  items_filtered (counter)
-- KEYS[4] extras  HASH  item -> JSON: a dropped item's extras go with it
--
-- ARGV[1] the filters_version the decisions were made with
-- ARGV[2..] the items to drop
--
-- Returns {dropped}; {R.NO_PROJECT} when the project does not exist,
-- {R.STALE_GROUPS} when the filters changed since the decisions.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {R.NO_PROJECT}
end
if (redis.call('HGET', KEYS[1], 'filters_version') or '0') ~= ARGV[1] then
  return {R.STALE_GROUPS}
end
local dropped = {}
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    dropped[#dropped + 1] = ARGV[i]
  end
end
if #dropped > 0 then
  call_chunked('HDEL', KEYS[4], dropped)
  redis.call('HINCRBY', KEYS[3], 'items_filtered', #dropped)
end
return {#dropped}
