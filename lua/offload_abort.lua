-- offload_abort.lua: put a staged segment's items back where they came from,
-- and forget the segment. Used for a segment whose offload stopped (a crash
-- between taking the items and committing the file) once it is older than
-- the protection window.
--
-- KEYS[1] staging  LIST the segment's staged items
-- KEYS[2] segments HASH id -> "state queue count node created source"
-- KEYS[3] offload  HASH "q:<queue>" -> items of the queue on disk
-- KEYS[4] target   LIST where the items go back (the source, or the plain
--                  queue when the source was a limit group now forgotten)
-- KEYS[5] queued   SET  the items waiting in the list queues: a queue's
--                  items join it again
-- KEYS[6] claims   HASH  \
-- KEYS[7] done     SET    | a staged item queued again while it was staged
-- KEYS[8] recent_done ZSET| (staged items are in no index), and since then
-- KEYS[9] failed   HASH  /  waiting, out, done or failed, is dropped: no
--                           list holds a copy the queued index let past
--
-- ARGV[1] id
-- ARGV[2] "tail" or "head": the end of the target the items came from
--
-- Returns the number of items put back (dropped copies are not counted), or
-- -1 when the segment is not staged (nothing changed).

local record = redis.call('HGET', KEYS[2], ARGV[1])
if not record then return -1 end
local state, queue, count = string.match(record, '^(%S+) (%S+) (%S+) ')
if state ~= 'staging' then return -1 end
local staged = redis.call('LRANGE', KEYS[1], 0, -1)
local items = staged
if queue ~= 'done' then
  items = {}
  local placed = placed_already(staged, KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
  for _, item in ipairs(staged) do
    if not placed[item] then items[#items + 1] = item end
  end
end
if ARGV[2] == 'tail' then
  call_chunked('RPUSH', KEYS[4], items)
else
  -- Back to the head in their original order.
  for i = #items, 1, -1000 do
    local first = math.max(1, i - 999)
    local slice = {}
    for j = i, first, -1 do slice[#slice + 1] = items[j] end
    redis.call('LPUSH', KEYS[4], unpack(slice))
  end
end
if queue ~= 'done' then call_chunked('SADD', KEYS[5], items) end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if queue ~= 'done' then
  redis.call('HINCRBY', KEYS[3], 'q:' .. queue, -tonumber(count))
end
return #items
