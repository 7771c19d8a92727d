-- user_add.lua: lists a passkey under its user (AddUser), in the user's
-- slot. The listing is how orphan cleanup knows a user still has a way to
-- announce: AddUser lists the passkey before it maps it, RemoveUser
-- unlists it before it unmaps it, so a mapped passkey is always listed
-- (but between the two steps of a RemoveUser, which the purge's pass
-- condition covers: see user_purge_start.lua).
--
-- A user being purged (removed for longer than the protection window, and
-- the purge begun) is not listed: the caller finishes the purge first, so
-- the user comes back as a new one with nothing of the old one's, never
-- with half of it.
--
-- KEYS[1] passkeys HASH  passkey -> when it was listed (ms)
-- KEYS[2] gone     HASH  removed_at (ms), purge_before (ms, set when the
--                        purge began)
--
-- ARGV[1] passkey
-- ARGV[2] now (ms)
--
-- Returns "listed", or "purging" (nothing changed: finish the purge, then
-- call again).

if redis.call('HEXISTS', KEYS[2], 'purge_before') == 1 then
  return 'purging'
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
-- a removal within the window (a passkey rotation) is undone: the user
-- keeps everything
redis.call('DEL', KEYS[2])
return 'listed'
