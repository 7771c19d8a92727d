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
-- Returns
--   {0}  kept
--   {1}  deleted (or already gone), with no numbered change to feed
--   {1, w, last_announce, seq, uploaded, downloaded, up_extra,
--    down_extra, seed_ms, leech_ms, snatched}  deleted: the record's
--      writer stamp ("" when none) and its figures at its newest seq, so
--      the caller delivers the row if its writer's "fed up to" is before
--      last_announce (the lead's decision 5, s43: the writer may have
--      died with the row only in its memory). Read only on this path:
--      the record is read a second time only when it goes.

local u = redis.call('HMGET', KEYS[1], 'peers', 'last_announce', 'first_announce')
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
  return {1}
end
local before = tonumber(ARGV[2])
local touched = math.max(tonumber(u[2]) or 0, tonumber(u[3]) or 0)
if (tonumber(u[1]) or 0) > 0 or touched >= before then
  return {0}
end
local f = redis.call('HMGET', KEYS[1], 'w', 'seq', 'uploaded', 'downloaded', 'up_extra', 'down_extra',
  'seed_ms', 'leech_ms', 'snatched')
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
local seq = tonumber(f[2]) or 0
if seq == 0 then
  return {1}
end
return {1, f[1] or '', u[2] or '0', f[2], f[3] or '0', f[4] or '0', f[5] or '0', f[6] or '0', f[7] or '0',
  f[8] or '0', f[9] or '0'}
