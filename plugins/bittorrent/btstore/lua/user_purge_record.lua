-- user_purge_record.lua: deletes a purged user's record on one torrent, in
-- the torrent's slot, when the old user left it: no peer of the user
-- counted, and neither announced nor created since purge_before (when the
-- purge began). A record with a peer counted stays (the caller drops its
-- entry all the same, and says so: the record goes with its torrent).
--
-- KEYS[1] user   HASH  the user-torrent record
-- KEYS[2] users  SET   user ids with a record on the torrent
--
-- ARGV[1] user id
-- ARGV[2] purge_before (ms)
--
-- Returns 1 when deleted (or already gone), 0 when kept.

local u = redis.call('HMGET', KEYS[1], 'peers', 'last_announce', 'first_announce')
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
  return 1
end
local before = tonumber(ARGV[2])
local touched = math.max(tonumber(u[2]) or 0, tonumber(u[3]) or 0)
if (tonumber(u[1]) or 0) > 0 or touched >= before then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
