-- archive_finish.lua: an archive segment's file is in place under its final
-- name; forget the segment. An archive file needs no record once it is in
-- place (orphan cleanup never looks at finished archive files), so the
-- segments hash holds only the archive files being written or moved, and
-- stays small however long a project archives. The items are counted per
-- frontend, so an export can tell when some are on another frontend.
--
-- KEYS[1] segments HASH id -> "state queue count node created source"
-- KEYS[2] offload  HASH "archive:<node>" -> items in archive files in that
--                  frontend's data directory
--
-- ARGV[1] id
-- ARGV[2] node, the frontend whose data directory holds the file
--
-- Returns the number of items in the file, or 0 when the segment is not a
-- committed archive segment (nothing changed).

local record = redis.call('HGET', KEYS[1], ARGV[1])
if not record then return 0 end
local state, queue, count = string.match(record, '^(%S+) (%S+) (%S+) ')
if state ~= 'archived' or queue ~= 'done' then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[2], 'archive:' .. ARGV[2], tonumber(count))
return tonumber(count)
