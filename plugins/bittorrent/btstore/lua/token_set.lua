-- token_set.lua: grants or revokes a user's personal freeleech token on
-- one torrent, kept in the user's record on the torrent (the torrent's
-- slot) so announce.lua reads it with the record it already reads
-- (prelude's user_credit). A grant starts afresh: the previous grant's
-- first use and end are forgotten, so the new grant's are reported.
--
-- KEYS[1] torrent  HASH  the torrent's record (must be registered to grant)
-- KEYS[2] user     HASH  the user's record on the torrent: token (end, ms;
--                        0: never ends), token_used, token_ended (ms)
-- KEYS[3] users    SET   user ids with a record on the torrent
--
-- ARGV[1] user id
-- ARGV[2] the token's end (ms), 0: it never ends, -1: revoke
--
-- Returns 1, or 0 when there is nothing to do it to: granting on a
-- torrent that is not registered, revoking a token the user does not
-- have (nothing written either way).

if ARGV[2] == '-1' then
  if redis.call('HEXISTS', KEYS[2], 'token') == 0 then
    return 0
  end
  redis.call('HDEL', KEYS[2], 'token', 'token_used', 'token_ended')
  return 1
end
if redis.call('HEXISTS', KEYS[1], 'id') == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], 'token_used', 'token_ended')
redis.call('HSET', KEYS[2], 'token', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1]) -- the record may be new
return 1
