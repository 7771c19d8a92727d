-- user_sets.lua: copies a user's state on one torrent (computed in the
-- torrent's slot by announce.lua or expire.lua) into the user's sets,
-- which live in the user's slot. Frontends flush these copies in batches
-- and in any order, so each carries the version its state was given and
-- an older version never overwrites a newer one. Applying the same
-- version again is harmless, which lets a repair resend everything.
--
-- KEYS[1] active      SET   torrent ids with a peer of this user
-- KEYS[2] complete    SET   torrent ids the user has had complete
-- KEYS[3] incomplete  SET   torrent ids the user announced, never complete
-- KEYS[4] hnr         SET   torrent ids snatched and left unseeded
-- KEYS[5] versions    HASH  torrent id -> version of the state applied
-- KEYS[6] torrents    HASH  torrent id -> hex info-hash of the record the
--                           state came from, so orphan cleanup can tell
--                           an entry whose user-torrent record is gone
--
-- ARGV[1] torrent id
-- ARGV[2] version
-- ARGV[3] state bits: 1 active, 2 complete, 4 incomplete, 8 hit-and-run
-- ARGV[4] hex info-hash ("" leaves KEYS[6] as it is)
--
-- Returns 1 when applied, 0 when a newer version was already applied.

local torrent = ARGV[1]
local version = tonumber(ARGV[2])
local bits = tonumber(ARGV[3])
local applied = tonumber(redis.call('HGET', KEYS[5], torrent) or '-1')
if version < applied then
  return 0
end
local flags = {1, 2, 4, 8}
for i, flag in ipairs(flags) do
  if bits % (2 * flag) >= flag then
    redis.call('SADD', KEYS[i], torrent)
  else
    redis.call('SREM', KEYS[i], torrent)
  end
end
redis.call('HSET', KEYS[5], torrent, ARGV[2])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[6], torrent, ARGV[4])
end
return 1
