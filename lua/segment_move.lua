-- segment_move.lua: move an on-disk segment to another shared queue. Only
-- the record changes; the items follow when the segment is refilled.
--
-- KEYS[1] segments HASH id -> "state queue count node created source"
-- KEYS[2] offload  HASH "q:<queue>" -> items of the queue on disk
--
-- ARGV[1] id
-- ARGV[2] the shared queue to move to
--
-- Returns the segment's item count, or 0 when it is not on disk (nothing
-- changed).

local record = redis.call('HGET', KEYS[1], ARGV[1])
if not record then return 0 end
local state, queue, count, node, created = string.match(record, '^(%S+) (%S+) (%S+) (%S+) (%S+) ')
if state ~= 'disk' then return 0 end
if queue == ARGV[2] then return tonumber(count) end
redis.call('HSET', KEYS[1], ARGV[1], table.concat({state, ARGV[2], count, node, created, ARGV[2]}, ' '))
redis.call('HINCRBY', KEYS[2], 'q:' .. queue, -tonumber(count))
redis.call('HINCRBY', KEYS[2], 'q:' .. ARGV[2], tonumber(count))
return tonumber(count)
