-- done_drain.lua: empty the done set of a project that no longer keeps done
-- items (done_mode count or archive), a batch at a time: the items are
-- counted as discarded, and in archive mode queued for the archive file.
--
-- KEYS[1] config       HASH (done_mode)
-- KEYS[2] done         SET
-- KEYS[3] stats        HASH counters
-- KEYS[4] done_archive LIST completions waiting for the archive file
--
-- ARGV[1] the most items to drain
--
-- Returns the number drained (0 when the mode is keep or the set is empty).

local mode = redis.call('HGET', KEYS[1], 'done_mode') or 'keep'
if mode == 'keep' then return 0 end
local items = redis.call('SPOP', KEYS[2], tonumber(ARGV[1]))
if #items == 0 then return 0 end
redis.call('HINCRBY', KEYS[3], 'done_discarded', #items)
if mode == 'archive' then call_chunked('RPUSH', KEYS[4], items) end
return #items
