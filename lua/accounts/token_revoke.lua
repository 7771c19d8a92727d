-- token_revoke.lua: revoke one token of an account: its record, its id,
-- its name and its last use go, so it authenticates nobody from now on.
--
-- KEYS[1] tokens          HASH token hash -> token record (JSON)
-- KEYS[2] token_ids       HASH token id -> token hash
-- KEYS[3] last_used       HASH token id -> last use (ms)
-- KEYS[4] account_tokens  HASH token id -> token hash, the account's own
-- KEYS[5] token_names     HASH token name -> token id, the account's own
--
-- ARGV[1] token id
-- ARGV[2] token name (as the caller read it with the record)
--
-- Returns 1 revoked, 0 when the account holds no token of that id.
local hash = redis.call('HGET', KEYS[4], ARGV[1])
if not hash then return 0 end
redis.call('HDEL', KEYS[1], hash)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('HGET', KEYS[5], ARGV[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[5], ARGV[2])
end
return 1
