-- account_put.lua: create an account, or replace an existing account's
-- roles, in one step.
--
-- KEYS[1] accounts  HASH name -> account record (JSON)
--
-- ARGV[1] name
-- ARGV[2] the account record to store (JSON, with its roles)
-- ARGV[3] mode: "create" (refused if the account exists) or "update"
--         (refused if it does not)
--
-- Returns 1 stored, 0 refused (exists for create, missing for update).
local exists = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if ARGV[3] == 'create' and exists then return 0 end
if ARGV[3] == 'update' and not exists then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
