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
--         defaults of its own. In "filters" mode ARGV[2] comes first: the
--         filters_version the new list was made from ("" for any), so two
--         operators adding a filter at once can't lose one (the second is
--         refused, re-reads and adds to the first's list).
--
-- Returns 1 on success, 0 when creating a project that exists, -1 when
-- updating a project that does not, -2 when the filters changed since
-- ARGV[2] (nothing written).

local exists = redis.call('EXISTS', KEYS[1]) == 1
if ARGV[1] == 'create' and exists then return 0 end
if ARGV[1] ~= 'create' and not exists then return -1 end
local first = 2
if ARGV[1] == 'filters' then
  first = 3
  if ARGV[2] ~= '' and (redis.call('HGET', KEYS[1], 'filters_version') or '0') ~= ARGV[2] then
    return -2
  end
end
if #ARGV >= first then
  redis.call('HSET', KEYS[1], unpack(ARGV, first))
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
