-- bloom_add.lua: queue the items a Bloom filter has not seen, and add them
-- to it, in one step: test-and-set of the bits and the push happen
-- atomically, so two frontends receiving the same item at once queue it
-- once. Backfeed uses it, and so does `queue add --register`.
--
-- Every generation keeps the shape it was created with (m bits, k hashes,
-- capacity), recorded in meta's `shapes`. Changing bloom_capacity or
-- bloom_fp_rate therefore shapes only generations started afterwards; the
-- bits already set stay valid.
--
-- KEYS[1] config   HASH (backfeed_secret is checked here)
-- KEYS[2] meta     HASH bloom: gens, count (items in the newest generation),
--                  shapes ("m:k:cap,m:k:cap,..." one per generation)
-- KEYS[3] stats    HASH counters
-- KEYS[4] claims   HASH (an item out is not queued again)
-- KEYS[5] done     SET  (nor an item done)
-- KEYS[6] released HASH (nor an item an operator released, waiting in redo)
-- KEYS[7] recent_done ZSET (nor an item done recently when done_mode is
--                  count or archive, which keep no done set)
-- KEYS[8 .. 7+G]   STRING the filter's generations 1..G, then generation G+1
--                  (started when generation G fills up during this batch)
-- KEYS[9+G ..]     the target queues (LIST): a queue and its limit groups'
--                  sub-queues
--
-- ARGV[1] the backfeed secret to check ("" = no check: an admin call)
-- ARGV[2] G, the number of generations the caller saw
-- ARGV[3] the shapes of generations 1..G the caller saw ("" when G = 0)
-- ARGV[4] "m:k:cap", the shape generation G+1 takes if this batch starts it
-- ARGV[5] the limit_groups_version the items were routed by
-- ARGV[6..] per item: the item, its target (1-based, among the target
--         queues), then for each generation 1..G+1 its k bit locations,
--         already reduced mod that generation's m
--
-- Returns {new, duplicates, G'} where G' is the generation count now, or
--   {-1} no such project; {-2} wrong secret or backfeed disabled;
--   {-3} stale: the caller's generations differ from meta (re-read it);
--   {-4} limit groups changed.
--
-- Note: an item is a duplicate when ANY generation has all its bits set, or
-- when it is out, done (in the done set or recent_done) or released.

if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if ARGV[1] ~= '' then
  local secret = redis.call('HGET', KEYS[1], 'backfeed_secret') or ''
  -- Compare digests, so the comparison says nothing about the secret.
  if secret == '' or redis.sha1hex(secret) ~= redis.sha1hex(ARGV[1]) then return {-2} end
end
local gens = tonumber(ARGV[2])
local meta = redis.call('HMGET', KEYS[2], 'gens', 'count', 'shapes', 'm', 'k')
local shapes = meta[3]
if not shapes and meta[4] then
  -- A filter from before shapes were recorded: every generation has the one
  -- m and k, and the capacity the caller also assumes for it.
  local cap = string.match(ARGV[4], ':(%d+)$')
  local one = meta[4] .. ':' .. meta[5] .. ':' .. cap
  local list = {}
  for _ = 1, tonumber(meta[1]) do table.insert(list, one) end
  shapes = table.concat(list, ',')
  redis.call('HSET', KEYS[2], 'shapes', shapes)
  redis.call('HDEL', KEYS[2], 'm', 'k')
end
if (shapes or '') ~= ARGV[3] or tonumber(meta[1] or '0') ~= gens then
  return {-3}
end
if (redis.call('HGET', KEYS[1], 'limit_groups_version') or '0') ~= ARGV[5] then
  return {-4}
end

local ks, caps = {}, {}
local function add_shape(text)
  local m, k, cap = string.match(text, '^(%d+):(%d+):(%d+)$')
  table.insert(ks, tonumber(k))
  table.insert(caps, tonumber(cap))
end
if gens > 0 then
  for text in string.gmatch(ARGV[3], '[^,]+') do add_shape(text) end
end
add_shape(ARGV[4])
-- offsets[g]: where generation g's locations start within an item's block.
local offsets, stride = {}, 2
for g = 1, gens + 1 do
  offsets[g] = stride
  stride = stride + ks[g]
end

local count = tonumber(meta[2] or '0')
local first_target = 9 + gens
local current = gens -- the generation new items go into (KEYS[7 + current])

local any_recent = redis.call('EXISTS', KEYS[7]) == 1
local fresh, duplicates = 0, 0
local to = {}
local i = 6
while i <= #ARGV do
  local item, target = ARGV[i], tonumber(ARGV[i + 1])
  local seen = false
  for g = 1, current do
    local all = true
    local base = i + offsets[g]
    for j = 0, ks[g] - 1 do
      if redis.call('GETBIT', KEYS[7 + g], ARGV[base + j]) == 0 then
        all = false
        break
      end
    end
    if all then seen = true break end
  end
  if not seen and (redis.call('HEXISTS', KEYS[4], item) == 1
      or redis.call('SISMEMBER', KEYS[5], item) == 1
      or redis.call('HEXISTS', KEYS[6], item) == 1
      or (any_recent and redis.call('ZSCORE', KEYS[7], item))) then
    seen = true
  end
  if seen then
    duplicates = duplicates + 1
  else
    if current == gens and (gens == 0 or count >= caps[gens]) then
      -- No generation yet, or the newest is full: start the next one.
      current = gens + 1
      count = 0
    end
    local base = i + offsets[current]
    for j = 0, ks[current] - 1 do
      redis.call('SETBIT', KEYS[7 + current], ARGV[base + j], 1)
    end
    count = count + 1
    local key = KEYS[first_target + target - 1]
    to[key] = to[key] or {}
    table.insert(to[key], item)
    fresh = fresh + 1
  end
  i = i + stride
end
for key, items in pairs(to) do
  call_chunked('RPUSH', key, items)
end
if current > gens then
  if gens > 0 then shapes = ARGV[3] .. ',' .. ARGV[4] else shapes = ARGV[4] end
  redis.call('HSET', KEYS[2], 'gens', current, 'count', count, 'shapes', shapes)
elseif fresh > 0 then
  redis.call('HSET', KEYS[2], 'count', count)
end
if fresh > 0 then redis.call('HINCRBY', KEYS[3], 'items_queued', fresh) end
if duplicates > 0 then redis.call('HINCRBY', KEYS[3], 'bloom_duplicates', duplicates) end
return {fresh, duplicates, current}
