-- user_remove.lua: unlists a passkey from its user (RemoveUser, or AddUser
-- moving the passkey to another user), in the user's slot. When the user
-- has no passkey left it is marked removed; orphan cleanup purges it once
-- the mark is older than the protection window (user_purge_start.lua), and
-- a passkey listed again before then undoes the mark (user_add.lua).
--
-- KEYS[1] passkeys HASH  passkey -> when it was listed (ms)
-- KEYS[2] gone     HASH  removed_at (ms), purge_before (ms)
--
-- ARGV[1] passkey
-- ARGV[2] now (ms)
--
-- Returns the user's removal time (ms) when the user has no passkey left
-- (the earlier one when it was marked before), or 0.

redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HLEN', KEYS[1]) > 0 then
  return 0
end
redis.call('HSETNX', KEYS[2], 'removed_at', ARGV[2])
return tonumber(redis.call('HGET', KEYS[2], 'removed_at'))
