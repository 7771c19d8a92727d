-- offload_take.lua: take a segment's worth of items off a list into the
-- segment's staging list, and record the segment, in one step. The items
-- stay in Redis (in staging) until their file is safely on disk, so a crash
-- at any point leaves every item in exactly one place.
--
-- KEYS[1] source   LIST a queue's list (its tail is taken), or done_archive
--                  (its head is taken)
-- KEYS[2] staging  LIST the new segment's staging list (must not exist)
-- KEYS[3] segments HASH id -> "state queue count node created source"
-- KEYS[4] offload  HASH "q:<queue>" -> items of the queue on disk
-- KEYS[5] queued   SET  the items waiting in the list queues: items taken
--                  off a queue leave it (the archive's are never in it)
--
-- ARGV[1] id, the new segment's id: it must be above the project's id
--         sequence ("seq" in KEYS[4]), which it then becomes. Ids are handed
--         out here, in the step that records them, because orphan cleanup
--         raises seq past every id it found unreferenced (orphan_check.lua):
--         such an id is never recorded later, so its file is never live.
-- ARGV[2] "tail" or "head": the end of the source to take from
-- ARGV[3] the most items to take
-- ARGV[4] keep: leave at least this many items in the source
-- ARGV[5] the shared queue the items belong to ("done" for the archive,
--         which is not counted as waiting)
-- ARGV[6] node, the frontend that will own the file
-- ARGV[7] now (ms)
-- ARGV[8] source, KEYS[1] without the project's prefix
--
-- Returns the number of items taken: 0 when the source has no more than
-- keep items, or -1 when the id is at or below seq or already in use (the
-- caller proposes the next one).

local id = tonumber(ARGV[1])
local seq = tonumber(redis.call('HGET', KEYS[4], 'seq') or '0') or 0
if not id or id <= seq or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
local want, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local take = math.min(want, redis.call('LLEN', KEYS[1]) - keep)
if take <= 0 then return 0 end
local items
if ARGV[2] == 'tail' then
  items = redis.call('LRANGE', KEYS[1], -take, -1)
  redis.call('LTRIM', KEYS[1], 0, -take - 1)
else
  items = redis.call('LRANGE', KEYS[1], 0, take - 1)
  redis.call('LTRIM', KEYS[1], take, -1)
end
redis.call('HSET', KEYS[4], 'seq', ARGV[1])
call_chunked('RPUSH', KEYS[2], items)
redis.call('HSET', KEYS[3], ARGV[1],
  table.concat({'staging', ARGV[5], take, ARGV[6], ARGV[7], ARGV[8]}, ' '))
if ARGV[5] ~= 'done' then
  redis.call('HINCRBY', KEYS[4], 'q:' .. ARGV[5], take)
  call_chunked('SREM', KEYS[5], items)
end
return take
