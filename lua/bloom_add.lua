-- bloom_add.lua: queue the items a Bloom filter has not seen, and add them
-- to it, in one step: test-and-set of the bits and the push happen
-- atomically, so two frontends receiving the same item at once queue it
-- once. Backfeed uses it, and so does `queue add --register`.
--
-- KEYS[1] config  HASH (backfeed_secret is checked here)
-- KEYS[2] meta    HASH bloom: m, k, gens, count
-- KEYS[3] stats   HASH counters
-- KEYS[4] claims  HASH (an item out is not queued again)
-- KEYS[5] done    SET  (nor an item done)
-- KEYS[6 .. 5+G]  STRING the filter's generations 1..G, then generation G+1
--                 (used when generation G fills up during this batch)
-- KEYS[7+G ..]    the target queues (LIST): a queue and its limit groups'
--                 sub-queues
--
-- ARGV[1] the backfeed secret to check ("" = no check: an admin call)
-- ARGV[2] G, the number of generations the caller saw
-- ARGV[3] m, ARGV[4] k: the filter's size in bits and hashes (used when
--         the filter is created; afterwards they must match meta)
-- ARGV[5] capacity: items per generation before a new one starts
-- ARGV[6] the limit_groups_version the items were routed by
-- ARGV[7..] per item: the item, its target (1-based, among the target
--         queues), then k bit locations (already reduced mod m)
--
-- Returns {new, duplicates, G'} where G' is the generation count now, or
--   {-1} no such project; {-2} wrong secret or backfeed disabled;
--   {-3, gens, m, k} stale: the caller's G, m or k differ from meta;
--   {-4} limit groups changed.
--
-- Note: an item is a duplicate when ANY generation has all its k bits set,
-- or when it is out or done.

if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if ARGV[1] ~= '' then
  local secret = redis.call('HGET', KEYS[1], 'backfeed_secret') or ''
  -- Compare digests, so the comparison says nothing about the secret.
  if secret == '' or redis.sha1hex(secret) ~= redis.sha1hex(ARGV[1]) then return {-2} end
end
local gens = tonumber(ARGV[2])
local m, k, capacity = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local meta = redis.call('HMGET', KEYS[2], 'm', 'k', 'gens', 'count')
if not meta[1] then
  redis.call('HSET', KEYS[2], 'm', m, 'k', k, 'gens', 1, 'count', 0)
  meta = {tostring(m), tostring(k), '1', '0'}
end
if tonumber(meta[1]) ~= m or tonumber(meta[2]) ~= k or tonumber(meta[3]) ~= gens then
  return {-3, tonumber(meta[3]), tonumber(meta[1]), tonumber(meta[2])}
end
if (redis.call('HGET', KEYS[1], 'limit_groups_version') or '0') ~= ARGV[6] then
  return {-4}
end
local count = tonumber(meta[4])
local first_target = 7 + gens
local current = gens -- the generation new items go into (KEYS[5 + current])

local fresh, duplicates = 0, 0
local to = {}
local i = 7
while i <= #ARGV do
  local item, target = ARGV[i], tonumber(ARGV[i + 1])
  local seen = false
  for g = 1, current do
    local all = true
    for j = 0, k - 1 do
      if redis.call('GETBIT', KEYS[5 + g], ARGV[i + 2 + j]) == 0 then
        all = false
        break
      end
    end
    if all then seen = true break end
  end
  if not seen and (redis.call('HEXISTS', KEYS[4], item) == 1 or redis.call('SISMEMBER', KEYS[5], item) == 1) then
    seen = true
  end
  if seen then
    duplicates = duplicates + 1
  else
    if count >= capacity and current == gens then
      -- The newest generation is full: start the next one.
      current = gens + 1
      count = 0
    end
    for j = 0, k - 1 do
      redis.call('SETBIT', KEYS[5 + current], ARGV[i + 2 + j], 1)
    end
    count = count + 1
    local key = KEYS[first_target + target - 1]
    to[key] = to[key] or {}
    table.insert(to[key], item)
    fresh = fresh + 1
  end
  i = i + 2 + k
end
for key, items in pairs(to) do
  call_chunked('RPUSH', key, items)
end
redis.call('HSET', KEYS[2], 'gens', current, 'count', count)
if fresh > 0 then redis.call('HINCRBY', KEYS[3], 'items_queued', fresh) end
if duplicates > 0 then redis.call('HINCRBY', KEYS[3], 'bloom_duplicates', duplicates) end
return {fresh, duplicates, current}
