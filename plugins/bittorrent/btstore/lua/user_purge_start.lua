-- user_purge_start.lua: begins purging a removed user (orphan cleanup),
-- in the user's slot: check and mark in one step. A user is purged when it
-- has no listed passkey, was marked removed longer ago than the
-- protection window, and a whole pass of the passkeys walk began after
-- the removal (so any passkey still mapped to the user, however old, has
-- been listed by now and has undone the mark). The mark records
-- purge_before, now: the user has not been able to announce since its
-- removal plus the passkey cache's life, long before, and from here on
-- AddUser finishes the purge before it lists a passkey, so every record
-- of the user was touched before it; one touched later (which nothing
-- here lets happen) would not be the old user's and stays
-- (user_purge_record.lua).
--
-- KEYS[1] passkeys HASH  passkey -> when it was listed (ms)
-- KEYS[2] gone     HASH  removed_at (ms), purge_before (ms)
--
-- ARGV[1] now (ms)
-- ARGV[2] protection window (ms)
-- ARGV[3] start (ms) of the passkeys walk's last finished pass (0: none)
--
-- Returns {state, removed_at, purge_before}:
--   "live"     the user has a passkey or no removal mark (removed_at 0)
--   "waiting"  marked, not purged yet (the window or the pass)
--   "purging"  the purge began now or before

local now, window, covered = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local g = redis.call('HMGET', KEYS[2], 'removed_at', 'purge_before')
local removed = tonumber(g[1])
if g[2] then
  return {'purging', g[1] or '0', g[2]}
end
if not removed or redis.call('HLEN', KEYS[1]) > 0 then
  return {'live', '0', '0'}
end
if now - removed <= window or covered <= removed then
  return {'waiting', g[1], '0'}
end
local before = tostring(now)
redis.call('HSET', KEYS[2], 'purge_before', before)
return {'purging', g[1], before}
