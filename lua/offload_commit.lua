-- offload_commit.lua: a staged segment's file is on disk; drop the staged
-- copy and mark the segment as on disk, with the index of its items.
--
-- KEYS[1] staging  LIST the segment's staged items
-- KEYS[2] segments HASH id -> "state queue count node created source"
-- KEYS[3] index    STRING the segment's index (queues/segment_index.go):
--          written here, so it exists exactly while the items are on disk
--
-- ARGV[1] id
-- ARGV[2] the state the segment takes: "disk" (a queue's segment, to be
--         refilled) or "archived" (done items: the file is moved to its
--         final name next, then archive_finish.lua drops the record)
-- ARGV[3] the number of items the file holds (must match the record)
-- ARGV[4] the index of the items ("" for an archive: it needs none)
--
-- Returns 1, or 0 when the segment is no longer staged (it was aborted as
-- stale: its items are back in their queue and the file is an orphan), or
-- -1 when the count does not match (nothing changed).

local record = redis.call('HGET', KEYS[2], ARGV[1])
if not record then return 0 end
local state, queue, count, rest = string.match(record, '^(%S+) (%S+) (%S+) (.*)$')
if state ~= 'staging' then return 0 end
if count ~= ARGV[3] or redis.call('LLEN', KEYS[1]) ~= tonumber(count) then return -1 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], table.concat({ARGV[2], queue, count, rest}, ' '))
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[3], ARGV[4])
end
return 1
