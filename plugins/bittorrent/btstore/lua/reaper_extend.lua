-- reaper_extend.lua: a moderator's extension of a torrent's grace (Orpheus's
-- "Reaper Extensions"): moves its reaper row's unseeded_date into the
-- future, atomically. Every later step counts from unseeded_date (and
-- from when the notice before really went out), so the final notice and
-- the removal move by the same time. The row gets a new generation (gen),
-- so the steps already queued for it do nothing ("out of order") and the
-- next run queues them afresh under new names, which the queue has not
-- seen done.
--
-- KEYS[1] reaper  HASH  the torrent's reaper row (package swarm ReaperKey)
--
-- ARGV[1] now (ms)
-- ARGV[2] the extension (ms, > 0): unseeded_date becomes
--         max(unseeded_date, now) + ARGV[2]
--
-- Returns
--   { 1, new unseeded_date (ms), notify }  extended
--   {-1, reason}  nothing changed: "no notice" (the torrent is not in the
--                 reaper's process: no row, or only a claim window),
--                 "removed" (too late)

local now = tonumber(ARGV[1])
local add = tonumber(ARGV[2])
local k_reaper = KEYS[1]

local r = redis.call('HMGET', k_reaper, 'state', 'notify', 'unseeded_date', 'initial_at', 'gen')
if not r[1] or not r[2] then
  return {-1, 'no notice'}
end
if r[2] == 'removed' then
  return {-1, 'removed'}
end
local from = math.max(tonumber(r[3]) or now, now)
local new_date = string.format('%.0f', from + add)
local gen = math.max(now, (tonumber(r[5] or r[4]) or 0) + 1)
redis.call('HSET', k_reaper, 'unseeded_date', new_date, 'gen', string.format('%.0f', gen),
  'extended_at', ARGV[1])
redis.call('HDEL', k_reaper, 'pending', 'pending_at')
return {1, new_date, r[2]}
