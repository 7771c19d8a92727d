-- segment_index.lua: store the index of an on-disk segment written before
-- segment indexes existed (queues/segment_index.go), read from its file by
-- the frontend that owns it. The record is checked in the same step, so an
-- index never outlives its segment: a segment refilled or moved to the
-- archive meanwhile gets none.
--
-- KEYS[1] segments HASH id -> "state queue count node created source"
-- KEYS[2] index    STRING the segment's index
--
-- ARGV[1] id
-- ARGV[2] the item count the index was built from
-- ARGV[3] the index
--
-- Returns 1 when stored, 0 when the segment is not on disk with that count.

local record = redis.call('HGET', KEYS[1], ARGV[1])
if not record then return 0 end
local state, queue, count = string.match(record, '^(%S+) (%S+) (%S+) ')
if state ~= 'disk' or queue == 'done' or count ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[2], ARGV[3])
return 1
