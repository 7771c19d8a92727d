-- passkey_drop.lua: unmaps a passkey only if it still maps to the user
-- the caller unlisted it from (RemoveUser), so a passkey given to another
-- user meanwhile keeps working.
--
-- KEYS[1] passkey STRING user id
--
-- ARGV[1] user id
--
-- Returns 1 when deleted, 0 otherwise.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
