-- account_remove.lua: remove an account and every token it holds, so no
-- token outlives its account.
--
-- KEYS[1] accounts        HASH name -> account record (JSON)
-- KEYS[2] tokens          HASH token hash -> token record (JSON)
-- KEYS[3] token_ids       HASH token id -> token hash
-- KEYS[4] last_used       HASH token id -> last use (ms)
-- KEYS[5] account_tokens  HASH token id -> token hash, the account's own
-- KEYS[6] token_names     HASH token name -> token id, the account's own
--
-- ARGV[1] name
--
-- Returns the number of tokens removed with it, or -1 when there is no
-- such account.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
local owned = redis.call('HGETALL', KEYS[5])
local n = 0
for i = 1, #owned, 2 do
  redis.call('HDEL', KEYS[2], owned[i + 1])
  redis.call('HDEL', KEYS[3], owned[i])
  redis.call('HDEL', KEYS[4], owned[i])
  n = n + 1
end
redis.call('DEL', KEYS[5], KEYS[6])
return n
