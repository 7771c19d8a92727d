-- user_list.lua: lists a passkey the caller found mapped to this user
-- (orphan cleanup's passkeys walk), in the user's slot. It covers the
-- passkeys mapped before listings existed and a RemoveUser cut off
-- between its two steps: a user with a listed passkey is never purged
-- (user_purge_start.lua). A removal mark stays, inert while the listing
-- is not empty: a listing this walk wrote while a RemoveUser ran is
-- stale once the passkey is unmapped, and cleanup drops it a window
-- later (user_remove.lua, conditional), which leaves the user removed
-- since its first mark.
--
-- KEYS[1] passkeys HASH  passkey -> when it was listed (ms)
--
-- ARGV[1] passkey
-- ARGV[2] now (ms)
--
-- Returns 1 when the passkey was not listed, 0 when it was.

return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
