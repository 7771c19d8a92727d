-- authenticate.lua: look a token up by its hash and return its record and
-- its account's, in one round trip; record the time of use, at most once
-- per interval per token, so an admin call costs a write only now and then.
--
-- KEYS[1] tokens     HASH token hash -> token record (JSON)
-- KEYS[2] accounts   HASH name -> account record (JSON)
-- KEYS[3] last_used  HASH token id -> last use (ms)
--
-- ARGV[1] token hash
-- ARGV[2] now (ms)
-- ARGV[3] the interval (ms) within which a later use is not recorded
--
-- The token's id, account and expiry (expires_ms, 0 = never) are read from
-- its record.
--
-- Returns {token record, account record, last use (ms)}, or false when no
-- token has that hash, it has expired, or its account is gone.
local token = redis.call('HGET', KEYS[1], ARGV[1])
if not token then return false end
local rec = cjson.decode(token)
local now = tonumber(ARGV[2])
local expires = tonumber(rec['expires_ms'] or 0)
if expires > 0 and now >= expires then return false end
local account = redis.call('HGET', KEYS[2], rec['account'])
if not account then return false end
local last = redis.call('HGET', KEYS[3], rec['id'])
if not last or now - tonumber(last) >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[3], rec['id'], ARGV[2])
  last = ARGV[2]
end
return {token, account, last}
