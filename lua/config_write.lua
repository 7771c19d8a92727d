-- config_write.lua: create a project, or change settings of an existing one.
--
-- KEYS[1] config HASH
-- KEYS[2] claims HASH item -> claim record   \ only for "create" and
-- KEYS[3] budget HASH downloader -> items out / "update" (see the note)
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
--
-- Note: the budget hash is kept only while the project has a budget limit
-- (downloader_budget above 0), so the claims of a project without one write
-- no budget. When a write turns a limit on, the budget is rebuilt here from
-- the claim records (each one's claimant), in the same step, so the scripts
-- that keep it from then on start from the truth; when it turns the limit
-- off, the budget goes. One pass over the claims: an operator's change,
-- never a request's.

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
local budget_was
if #KEYS >= 3 then budget_was = budget_kept(redis.call('HGET', KEYS[1], 'downloader_budget')) end
if #ARGV >= first then
  redis.call('HSET', KEYS[1], unpack(ARGV, first))
end
if #KEYS >= 3 then
  local budget_now = budget_kept(redis.call('HGET', KEYS[1], 'downloader_budget'))
  if budget_now and not budget_was then
    redis.call('DEL', KEYS[3])
    local out_by = {}
    for _, record in ipairs(redis.call('HVALS', KEYS[2])) do
      local _, _, claimant = parse_claim(record)
      if claimant then out_by[claimant] = (out_by[claimant] or 0) + 1 end
    end
    local fields = {}
    for claimant, n in pairs(out_by) do
      fields[#fields + 1] = claimant
      fields[#fields + 1] = n
    end
    call_chunked('HSET', KEYS[3], fields)
  elseif not budget_now then
    redis.call('DEL', KEYS[3])
  end
end
if ARGV[1] == 'create' then
  -- No item has extras yet: enqueue.lua sets it to 1 when it writes some.
  -- Every copy in its lists will have gone through the queued index:
  -- claim.lua need not look for duplicates when it pops (pop_check).
  redis.call('HSET', KEYS[1], 'has_extras', '0', 'pop_check', '0')
end
-- Every write moves config_version: frontends keep a copy of the settings
-- for the plain claim (claim_plain.lua), which compares it with this. A
-- project starts at Redis's clock in microseconds, not at 1, so a project
-- deleted and created again under its slug never matches a copy of the
-- one before.
if ARGV[1] == 'create' then
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'config_version', string.format('%d%06d', tonumber(t[1]), tonumber(t[2])))
else
  redis.call('HINCRBY', KEYS[1], 'config_version', 1)
end
if ARGV[1] == 'groups' then
  redis.call('HINCRBY', KEYS[1], 'limit_groups_version', 1)
elseif ARGV[1] == 'filters' then
  redis.call('HINCRBY', KEYS[1], 'filters_version', 1)
end
-- claim.lua and done.lua read the config on every call (HMGET of 21 and 7
-- fields). As a listpack, Redis's encoding for a small hash, each field is
-- a scan of the whole hash; as a hash table each is one look-up (HMGET of
-- claim's fields 1.7-3.5 us against 3.5-8.7, docs/warrior-path.md). A value
-- longer than hash-max-listpack-value (64 by default) makes Redis keep the
-- hash as a table, after a restart too, so every write adds this field:
-- a new project's config is a table from its creation, an older one's
-- from its next settings change.
redis.call('HSET', KEYS[1], 'encoding', 'hashtable: this value is longer than ' ..
  'hash-max-listpack-value, so Redis keeps the config as a hash table (one look-up per field read)')
-- A table that grew here (a new project's 33 fields outgrow the 32 slots
-- Redis sized it with) is moved to its larger size a slot per access, so
-- until some 32 accesses later any read changes its layout (and DUMP's
-- bytes, by which tests tell that a refused request changed nothing).
-- Reads here finish the move: an operator's write, not a request's.
for _ = 1, 64 do
  redis.call('HEXISTS', KEYS[1], 'encoding')
end

return 1
