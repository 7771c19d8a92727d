-- config_write.lua: create a project, or change settings of an existing one.
--
-- KEYS[1] config HASH
--
-- ARGV[1] "create" (fails if the project exists), "update" (fails if it
--         does not) or "groups" (an update that also bumps
--         limit_groups_version, so every frontend rebuilds its claim KEYS)
--         or "filters" (an update that also bumps filters_version, so every
--         frontend's enqueue is refused until it reads the new filters)
-- ARGV[2..] field, value pairs. Every setting is always written with an
--         explicit value (the Go side fills defaults), so no script needs
--         defaults of its own.
--
-- Returns 1 on success, 0 when creating a project that exists, -1 when
-- updating a project that does not.

local exists = redis.call('EXISTS', KEYS[1]) == 1
if ARGV[1] == 'create' and exists then return 0 end
if ARGV[1] ~= 'create' and not exists then return -1 end
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
if ARGV[1] == 'create' then
  -- No item has extras yet: enqueue.lua sets it to 1 when it writes some.
  redis.call('HSET', KEYS[1], 'has_extras', '0')
end
if ARGV[1] == 'groups' then
  redis.call('HINCRBY', KEYS[1], 'limit_groups_version', 1)
elseif ARGV[1] == 'filters' then
  redis.call('HINCRBY', KEYS[1], 'filters_version', 1)
end
return 1
