-- user_purge_drop.lua: drops torrents from a user being purged, in the
-- user's slot, once their records in the torrents' slots were dealt with
-- (user_purge_record.lua); when none is left, deletes the user's sets,
-- versions, totals and mark (its listing is empty, so gone). Every step
-- checks that the purge that read the entries is still the one under way
-- (purge_before), so a purge cut off and begun again, or finished by
-- AddUser meanwhile, is not confused with it. A passkey listed meanwhile
-- (the passkeys walk found one mapped, which only a write outside
-- AddUser can do once the purge began) is kept, like one AddUser lists
-- after finishing the purge: the user goes on as a new one with that
-- passkey, never stuck half-purged.
--
-- KEYS[1] gone        HASH  removed_at, purge_before
-- KEYS[2] torrents    HASH  torrent id -> hex info-hash
-- KEYS[3] versions    HASH  torrent id -> version
-- KEYS[4] active      SET
-- KEYS[5] complete    SET
-- KEYS[6] incomplete  SET
-- KEYS[7] hnr         SET
-- KEYS[8] stats       HASH  the user's totals
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
  dropped = dropped + redis.call('HDEL', KEYS[2], t)
  redis.call('HDEL', KEYS[3], t)
  for k = 4, 7 do redis.call('SREM', KEYS[k], t) end
end
if redis.call('HLEN', KEYS[2]) > 0 then
  return {dropped, 0}
end
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[1])
return {dropped, 1}
