-- user_purge_drop.lua: drops torrents from a user being purged, in the
-- user's slot, once their records in the torrents' slots were dealt with
-- (user_purge_record.lua); when none is left, deletes the user's sets,
-- versions, totals, listing and mark. Every step checks that the purge
-- that read the entries is still the one under way (purge_before), so a
-- purge cut off and begun again, or finished by AddUser meanwhile, is not
-- confused with it. A user that has a listed passkey again (a passkey
-- found still mapped by the passkeys walk) is not deleted: its mark stays
-- and the next start reports it purging until an operator looks.
--
-- KEYS[1] gone        HASH  removed_at, purge_before
-- KEYS[2] passkeys    HASH
-- KEYS[3] torrents    HASH  torrent id -> hex info-hash
-- KEYS[4] versions    HASH  torrent id -> version
-- KEYS[5] active      SET
-- KEYS[6] complete    SET
-- KEYS[7] incomplete  SET
-- KEYS[8] hnr         SET
-- KEYS[9] stats       HASH  the user's totals
--
-- ARGV[1] purge_before the caller read
-- ARGV[2..] torrent ids whose records were dealt with
--
-- Returns {dropped, finished (1 when the user's keys were deleted)}

if redis.call('HGET', KEYS[1], 'purge_before') ~= ARGV[1] then
  return {0, 0}
end
local dropped = 0
for i = 2, #ARGV do
  local t = ARGV[i]
  dropped = dropped + redis.call('HDEL', KEYS[3], t)
  redis.call('HDEL', KEYS[4], t)
  for k = 5, 8 do redis.call('SREM', KEYS[k], t) end
end
if redis.call('HLEN', KEYS[3]) > 0 or redis.call('HLEN', KEYS[2]) > 0 then
  return {dropped, 0}
end
redis.call('DEL', KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[1])
return {dropped, 1}
