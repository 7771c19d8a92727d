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
--
-- ARGV[1] id
-- ARGV[2] "tail" or "head": the end of the target the items came from
--
-- Returns the number of items put back, or -1 when the segment is not
-- staged (nothing changed).

local record = redis.call('HGET', KEYS[2], ARGV[1])
if not record then return -1 end
local state, queue, count = string.match(record, '^(%S+) (%S+) (%S+) ')
if state ~= 'staging' then return -1 end
local items = redis.call('LRANGE', KEYS[1], 0, -1)
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
