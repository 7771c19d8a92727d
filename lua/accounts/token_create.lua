-- token_create.lua: store a new API token of an existing account. Only its
-- hash is stored: the token itself is shown once, to its creator.
--
-- KEYS[1] accounts        HASH name -> account record (JSON)
-- KEYS[2] tokens          HASH token hash -> token record (JSON)
-- KEYS[3] token_ids       HASH token id -> token hash
-- KEYS[4] account_tokens  HASH token id -> token hash, the account's own
-- KEYS[5] token_names     HASH token name -> token id, the account's own
--
-- ARGV[1] account name
-- ARGV[2] token hash (hex SHA-256 of the token)
-- ARGV[3] token id
-- ARGV[4] token name (unique per account)
-- ARGV[5] token record (JSON)
--
-- Returns 1 stored, -1 no such account, -2 the account has a token of
-- that name, -3 the id or hash is taken (a random collision: try again).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
if redis.call('HEXISTS', KEYS[5], ARGV[4]) == 1 then return -2 end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 or redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then
  return -3
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[5], ARGV[4], ARGV[3])
return 1
