-- block_write.lua: block or unblock nicknames or IPs in one project, and
-- move the config's config_version with it, so every frontend's copy of
-- the block list (the plain claim's, queues/plainclaim.go) is found stale.
--
-- KEYS[1] config   HASH (config_version is moved only when it exists: a
--                  counter alone would look like a project)
-- KEYS[2] blocked  HASH nickname or IP -> JSON entry
--
-- ARGV[1] "set" (ARGV[2..] field, value pairs) or "del" (ARGV[2..] fields)
--
-- Returns the number of fields set or deleted (HSET's or HDEL's reply).

local n
if ARGV[1] == 'set' then
  n = redis.call('HSET', KEYS[2], unpack(ARGV, 2))
else
  n = redis.call('HDEL', KEYS[2], unpack(ARGV, 2))
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'config_version', 1)
end
return n
