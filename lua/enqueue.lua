-- enqueue.lua: append items to one todo queue of a project.
--
-- KEYS[1] config    HASH
-- KEYS[2] queue     LIST the target queue (todo, todo:backfeed, todo:secondary,
--                        todo:redo or todo:d:<downloader>)
-- KEYS[3] extras    HASH item -> JSON object of extra keys
-- KEYS[4] stats     HASH counters
-- KEYS[5] reserved  SET  downloaders with a reserved queue
--
-- ARGV[1] the downloader when KEYS[2] is a reserved queue, else ""
-- ARGV[2] E, the number of (item, extras JSON) pairs that follow; then the
--         pairs; then the items.
--
-- Returns the queue's length afterwards, or -1 when the project does not exist.
--
-- Note: duplicates are not looked for here (that would cost a scan or an
-- index of every item); the claim script drops an item popped while it is
-- already out or done.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local pairs_count = tonumber(ARGV[2])
local first_item = 3 + pairs_count * 2
if pairs_count > 0 then
  local extras = {}
  for i = 3, first_item - 1 do extras[#extras + 1] = ARGV[i] end
  call_chunked('HSET', KEYS[3], extras)
end
local items = {}
for i = first_item, #ARGV do items[#items + 1] = ARGV[i] end
local length = call_chunked('RPUSH', KEYS[2], items)
if #items > 0 then
  length = redis.call('LLEN', KEYS[2])
  redis.call('HINCRBY', KEYS[4], 'items_queued', #items)
  if ARGV[1] ~= '' then
    redis.call('SADD', KEYS[5], ARGV[1])
  end
else
  length = redis.call('LLEN', KEYS[2])
end
return length
