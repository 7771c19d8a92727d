-- orphan_user.lua: orphan cleanup of a user's set entries (package
-- orphans) whose user-torrent record is gone. The record lives in the
-- torrent's slot and these in the user's, so the caller read that the
-- record is missing; this script deletes an entry only if its version is
-- still the one read with it. Versions are at least the time (ms) of the
-- state change they carry (user_write in prelude.lua), so a record
-- created again after the caller's read brings a newer version: either it
-- arrived first (the version differs, the entry stays) or it arrives
-- after (and adds the entry back). The caller passes only versions older
-- than the protection window.
--
-- KEYS[1] active      SET
-- KEYS[2] complete    SET
-- KEYS[3] incomplete  SET
-- KEYS[4] hnr         SET
-- KEYS[5] versions    HASH  torrent id -> version
-- KEYS[6] torrents    HASH  torrent id -> hex info-hash
--
-- ARGV[1], ARGV[2], ...: pairs of torrent id and the version read
--
-- Returns how many entries were removed.

local removed = 0
for i = 1, #ARGV, 2 do
  local torrent, version = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', KEYS[5], torrent) == version then
    for k = 1, 4 do redis.call('SREM', KEYS[k], torrent) end
    redis.call('HDEL', KEYS[5], torrent)
    redis.call('HDEL', KEYS[6], torrent)
    removed = removed + 1
  end
end
return removed
