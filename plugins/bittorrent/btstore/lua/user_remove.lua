-- user_remove.lua: unlists a passkey from its user, in the user's slot:
-- for RemoveUser, for AddUser moving the passkey to another user, and for
-- orphan cleanup dropping a stale listing (a passkey listed, then
-- unmapped: a walk that listed it while a RemoveUser ran). When the user
-- has no passkey left it is marked removed; orphan cleanup purges it once
-- the mark is older than the protection window (user_purge_start.lua),
-- and a passkey added before then undoes the mark (user_add.lua).
--
-- KEYS[1] passkeys HASH  passkey -> when it was listed (ms)
-- KEYS[2] gone     HASH  removed_at (ms), purge_before (ms)
--
-- ARGV[1] passkey
-- ARGV[2] now (ms)
-- ARGV[3] "" to unlist at once; else the listing time the caller read,
--         and the passkey is unlisted only if it is still that one (a
--         passkey listed again since is kept), and an existing mark keeps
--         its time (the user lost its last mapped passkey then)
--
-- Returns the user's removal time (ms) when it has no passkey left, 0
-- when it has, -1 when the listing changed since the caller read it.

local conditional = ARGV[3] ~= ''
if conditional and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[3] then
  return -1
end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HLEN', KEYS[1]) > 0 then
  return 0
end
-- a new removal counts from now (a mark left from an earlier one, made
-- inert by a passkey listed since, must not purge at once); a purge
-- under way, or a stale listing dropped, keeps its time
if conditional or redis.call('HEXISTS', KEYS[2], 'purge_before') == 1 then
  redis.call('HSETNX', KEYS[2], 'removed_at', ARGV[2])
else
  redis.call('HSET', KEYS[2], 'removed_at', ARGV[2])
end
return tonumber(redis.call('HGET', KEYS[2], 'removed_at'))
