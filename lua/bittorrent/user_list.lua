-- user_list.lua: lists a passkey the caller found mapped to this user
-- (orphan cleanup's passkeys walk), in the user's slot. It covers the
-- passkeys mapped before listings existed and a RemoveUser cut off
-- between its two steps: a user with a mapped passkey is never purged.
-- A listing written here undoes a removal mark, unless the purge began
-- (then the purge's finish refuses to drop a user with a listed passkey,
-- and the passkey keeps working).
--
-- KEYS[1] passkeys HASH  passkey -> when it was listed (ms)
-- KEYS[2] gone     HASH  removed_at (ms), purge_before (ms)
--
-- ARGV[1] passkey
-- ARGV[2] now (ms)
--
-- Returns 1 when the passkey was not listed, 0 when it was.

local added = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
if redis.call('HEXISTS', KEYS[2], 'purge_before') == 0 then
  redis.call('DEL', KEYS[2])
end
return added
