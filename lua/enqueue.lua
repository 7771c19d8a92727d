-- enqueue.lua: append items to one todo queue of a project.
--
-- KEYS[1] config    HASH
-- KEYS[2] queue     LIST the target queue (todo, todo:backfeed, todo:secondary,
--                        todo:redo or todo:d:<downloader>)
-- KEYS[3] extras    HASH item -> JSON object of extra keys
-- KEYS[4] stats     HASH counters
-- KEYS[5] reserved  SET  downloaders with a reserved queue
-- KEYS[6] claims    HASH item -> claim record
-- KEYS[7] done      SET
--
-- ARGV[1] the downloader when KEYS[2] is a reserved queue, else ""
-- ARGV[2] E, the number of (item, extras JSON) pairs that follow; then the
--         pairs; then the items.
--
-- Returns {queued, skipped, length}: items queued, items skipped because
-- they are out or done already, and the queue's length afterwards; or {-1}
-- when the project does not exist.
--
-- Note: an item already waiting in a queue is not looked for (that would
-- cost a scan, or an index of every item); if it is queued twice, the claim
-- script drops the second copy when it pops it.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local pairs_count = tonumber(ARGV[2])
local first_item = 3 + pairs_count * 2
if pairs_count > 0 then
  local extras = {}
  for i = 3, first_item - 1 do extras[#extras + 1] = ARGV[i] end
  call_chunked('HSET', KEYS[3], extras)
end
local items = {}
local skipped = 0
for i = first_item, #ARGV do
  local item = ARGV[i]
  if redis.call('HEXISTS', KEYS[6], item) == 1 or redis.call('SISMEMBER', KEYS[7], item) == 1 then
    skipped = skipped + 1
  else
    items[#items + 1] = item
  end
end
if #items > 0 then
  call_chunked('RPUSH', KEYS[2], items)
  redis.call('HINCRBY', KEYS[4], 'items_queued', #items)
  if ARGV[1] ~= '' then
    redis.call('SADD', KEYS[5], ARGV[1])
  end
end
return {#items, skipped, redis.call('LLEN', KEYS[2])}
