-- counters_flush.lua: add one frontend's buffered counters of one project
-- (queues/counters.go) in one step, once a second: the warrior path's
-- statistics (request and completion counters, the hourly, per-downloader,
-- per-file-group and chart series hashes) are counted in the frontend, so
-- claim.lua and done.lua spend no commands on them.
--
-- KEYS[1..n] the hashes to add to (all of one project, so one slot)
--
-- ARGV, for each key in KEYS order: its TTL in seconds (0 = none), its
-- kind ("+" add, "d" add with domain_bytes' 64-group cap, "=" set), F
-- the number of (field, value) pairs, then the pairs.
--
-- Returns the number of fields written.
--
-- Note: values saturate at 2^62 instead of failing, and a field that is not
-- an integer (it cannot be: only this script and the import write these
-- hashes, but a failing command would keep this flush half applied) is
-- replaced by the increment. domain_bytes keeps at most 64 groups; further
-- groups count under "other", as done.lua did.

local cap = 4611686018427387904
-- HMGET in slices of 1000 fields: unpack() of a very long table overflows
-- Lua's C stack.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
local written = 0
local pos = 1
for k = 1, #KEYS do
  local key = KEYS[k]
  local ttl = tonumber(ARGV[pos])
  local kind = ARGV[pos + 1]
  local n = tonumber(ARGV[pos + 2])
  pos = pos + 3
  if kind == '=' then
    for i = pos, pos + 2 * n - 1, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
  else
    local fields, adds = {}, {}
    for i = pos, pos + 2 * n - 1, 2 do
      local field, add = ARGV[i], tonumber(ARGV[i + 1])
      if adds[field] == nil then fields[#fields + 1] = field; adds[field] = 0 end
      adds[field] = adds[field] + add
    end
    if kind == 'd' then
      -- New groups past the 64th count under "other".
      local have = redis.call('HLEN', key)
      local known = hmget(key, fields)
      local kept, kept_adds = {}, {}
      for i, field in ipairs(fields) do
        local target = field
        if not known[i] then
          if have >= 64 then target = 'other' else have = have + 1 end
        end
        if kept_adds[target] == nil then kept[#kept + 1] = target; kept_adds[target] = 0 end
        kept_adds[target] = kept_adds[target] + adds[field]
      end
      fields, adds = kept, kept_adds
    end
    -- HINCRBY keeps the sums exact (Lua's numbers are doubles); the
    -- current values only decide whether one would overflow or fail.
    local current = hmget(key, fields)
    for i, field in ipairs(fields) do
      local value = current[i]
      local add = adds[field]
      if value and not (#value <= 19 and string.find(value, '^%-?%d+$')) then
        redis.call('HSET', key, field, string.format('%.0f', add))
      elseif (tonumber(value or '0') or 0) + add >= cap then
        redis.call('HSET', key, field, '4611686018427387904')
      else
        redis.call('HINCRBY', key, field, string.format('%.0f', add))
      end
    end
  end
  written = written + n
  pos = pos + 2 * n
  if ttl > 0 then redis.call('EXPIRE', key, ttl) end
end
return written
