-- release.lua: put claimed items back in todo:redo, atomically per item.
-- Used by a warrior giving up its own item and by operators releasing stale
-- or a downloader's claims.
--
-- KEYS[1] config     HASH
-- KEYS[2] redo       LIST todo:redo (released items go to its tail)
-- KEYS[3] out        ZSET item -> claimed at (ms)
-- KEYS[4] deadlines  ZSET item -> reclaim deadline (ms)
-- KEYS[5] claims     HASH item -> claim record
-- KEYS[6] budget     HASH downloader -> items out
-- KEYS[7] stats      HASH counters
--
-- ARGV[1] only items claimed by this downloader ("" = anyone's)
-- ARGV[2] only items claimed at or before this time in ms ("" = any time)
-- ARGV[3..] the items
--
-- Returns {released, not_out, filtered}
--   released  items moved from out to todo:redo
--   not_out   items that were not out (never handed out, done, or already released)
--   filtered  items out but excluded by ARGV[1] or ARGV[2]
--   {-1} when the project does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local only_downloader = ARGV[1]
local cutoff = tonumber(ARGV[2])

local released, not_out, filtered = {}, 0, 0
for i = 3, #ARGV do
  local item = ARGV[i]
  local record = redis.call('HGET', KEYS[5], item)
  if not record then
    not_out = not_out + 1
  else
    local _, claimed_at, claimant = parse_claim(record)
    if (only_downloader ~= '' and claimant ~= only_downloader) or (cutoff and claimed_at > cutoff) then
      filtered = filtered + 1
    else
      budget_decrement(KEYS[6], claimant)
      redis.call('HDEL', KEYS[5], item)
      redis.call('ZREM', KEYS[3], item)
      redis.call('ZREM', KEYS[4], item)
      released[#released + 1] = item
    end
  end
end
if #released > 0 then
  call_chunked('RPUSH', KEYS[2], released)
  redis.call('HINCRBY', KEYS[7], 'items_released', #released)
end
return {#released, not_out, filtered}
