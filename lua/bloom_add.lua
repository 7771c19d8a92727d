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
-- Redis runs nothing else while a script runs, so the caller sizes each
-- batch by its cost (queues.bloomBatchSize: items x the k bits of every
-- generation) to keep one call within a few milliseconds. Measured on
-- redis-server 7.0, a bit costs 0.7-1 us whichever command touches it, most
-- of it in passing arguments from Lua; so the script spends calls where
-- they count: one HMGET/SMISMEMBER/ZMSCORE per place checks every item of
-- the batch, a new item's bits are set with one BITFIELD (a quarter cheaper
-- than k SETBITs), and reads stop at the first zero bit (a bulk
-- BITFIELD_RO of every bit costs more: it reads all k where GETBIT reads
-- one or two).
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
-- KEYS[9+G .. #KEYS-2] the target queues (LIST): a queue and its limit
--                  groups' sub-queues
-- KEYS[#KEYS-1]    failed HASH (nor a failed item: an operator requeues it)
-- KEYS[#KEYS]      queued SET the items waiting in the list queues (nor an
--                  item waiting already; the queued items join it)
--
-- ARGV[1] a salt, fresh for each request ("" = no check: an admin call)
-- ARGV[2] sha1hex(salt .. the backfeed secret offered): the secret itself
--         is never an argument, so SLOWLOG and MONITOR never show it
-- ARGV[3] G, the number of generations the caller saw
-- ARGV[4] the shapes of generations 1..G the caller saw ("" when G = 0)
-- ARGV[5] "m:k:cap", the shape generation G+1 takes if this batch starts it,
--         or "" when the caller judged the batch cannot start it (the
--         newest generation has room for every item): then no item carries
--         G+1's locations, and a batch that could start it is refused
--         with R.STALE_FILTER before any write
-- ARGV[6] the limit_groups_version the items were routed by
-- ARGV[7] the filters_version the caller dropped filtered items by
-- ARGV[8] how many items of this batch the caller dropped by the filters
--         (counted in stats.items_filtered when the batch is accepted)
-- ARGV[9..] per item: the item, its target (1-based, among the target
--         queues), then for each generation 1..G (and G+1 when ARGV[5]
--         names its shape) its k bit locations, already reduced mod that
--         generation's m
--
-- Returns {new, duplicates, G', placed, waiting, count} where G' is the
--   generation count now, of the duplicates, placed were out, done,
--   released or failed and waiting were queued already (the rest were in the filter),
--   and count is how many items the newest generation holds now, or
--   {R.NO_PROJECT} no such project; {R.BAD_SECRET} wrong secret or backfeed
--   disabled; {R.STALE_FILTER} the caller's generations differ from meta
--   (re-read it); {R.STALE_GROUPS} limit groups or filters changed.
--
-- Note: an item is a duplicate when ANY generation has all its bits set, or
-- when it is out, done (in the done set or recent_done), released or
-- waiting in a queue.

if redis.call('EXISTS', KEYS[1]) == 0 then return {R.NO_PROJECT} end
if ARGV[1] ~= '' then
  local secret = redis.call('HGET', KEYS[1], 'backfeed_secret') or ''
  -- The salt makes the digest useless anywhere else: it matches only this
  -- salt, and says nothing about whether two projects share a secret.
  if secret == '' or redis.sha1hex(ARGV[1] .. secret) ~= ARGV[2] then return {R.BAD_SECRET} end
end
local gens = tonumber(ARGV[3])
local meta = redis.call('HMGET', KEYS[2], 'gens', 'count', 'shapes', 'm', 'k')
local shapes = meta[3]
if not shapes and meta[4] then
  -- A filter from before shapes were recorded: every generation has the one
  -- m and k, and the capacity the caller also assumes for it.
  -- (ARGV[4] carries it too, built the same way, when ARGV[5] is "".)
  local cap = string.match(ARGV[5] ~= '' and ARGV[5] or ARGV[4], ':(%d+)$')
  local one = meta[4] .. ':' .. meta[5] .. ':' .. cap
  local list = {}
  for _ = 1, tonumber(meta[1]) do table.insert(list, one) end
  shapes = table.concat(list, ',')
  redis.call('HSET', KEYS[2], 'shapes', shapes)
  redis.call('HDEL', KEYS[2], 'm', 'k')
end
if (shapes or '') ~= ARGV[4] or tonumber(meta[1] or '0') ~= gens then
  return {R.STALE_FILTER}
end
local versions = redis.call('HMGET', KEYS[1], 'limit_groups_version', 'filters_version')
if (versions[1] or '0') ~= ARGV[6] or (versions[2] or '0') ~= ARGV[7] then
  return {R.STALE_GROUPS}
end
local filtered = tonumber(ARGV[8])

local ks, caps = {}, {}
local function add_shape(text)
  local m, k, cap = string.match(text, '^(%d+):(%d+):(%d+)$')
  table.insert(ks, tonumber(k))
  table.insert(caps, tonumber(cap))
end
if gens > 0 then
  for text in string.gmatch(ARGV[4], '[^,]+') do add_shape(text) end
end
local with_next = ARGV[5] ~= ''
if with_next then add_shape(ARGV[5]) end
-- offsets[g]: where generation g's locations start within an item's block.
local offsets, stride = {}, 2
for g = 1, #ks do
  offsets[g] = stride
  stride = stride + ks[g]
end
local first_item = 9
local n = math.floor((#ARGV - first_item + 1) / stride)
if n == 0 then
  if filtered > 0 then redis.call('HINCRBY', KEYS[3], 'items_filtered', filtered) end
  return {0, 0, gens}
end
local count = tonumber(meta[2] or '0')
if not with_next and (gens == 0 or count + n > caps[gens]) then
  -- This batch could start generation G+1, whose locations the caller
  -- left out: nothing is written; it re-reads the count and retries.
  return {R.STALE_FILTER}
end
-- Accepted from here on: the filtered items are counted once.
if filtered > 0 then redis.call('HINCRBY', KEYS[3], 'items_filtered', filtered) end

-- One command over many arguments, in slices: unpack() of a table longer
-- than Lua's C stack (8,000) fails. Returns the replies concatenated.
local function call_sliced(command, key, args)
  local step = 6000
  if #args <= step then return redis.call(command, key, unpack(args)) end
  local out = {}
  for i = 1, #args, step do
    local reply = redis.call(command, key, unpack(args, i, math.min(i + step - 1, #args)))
    for _, v in ipairs(reply) do out[#out + 1] = v end
  end
  return out
end

-- Where each item already is: out, done, released, recently done or failed. These
-- places don't change during the script, so one bulk look-up per place
-- answers for the whole batch.
local items = {}
for i = 1, n do items[i] = ARGV[first_item + (i - 1) * stride] end
local placed = {}
local function mark(reply, is_member)
  for i, v in ipairs(reply) do
    if is_member(v) then placed[i] = true end
  end
end
local function present(v) return v ~= false end
local function one(v) return v == 1 end
mark(call_sliced('HMGET', KEYS[4], items), present)
mark(call_sliced('SMISMEMBER', KEYS[5], items), one)
mark(call_sliced('HMGET', KEYS[6], items), present)
if redis.call('EXISTS', KEYS[7]) == 1 then
  mark(call_sliced('ZMSCORE', KEYS[7], items), present)
end
if redis.call('EXISTS', KEYS[#KEYS - 1]) == 1 then
  mark(call_sliced('HMGET', KEYS[#KEYS - 1], items), present)
end
local placed_count = 0
for _ in pairs(placed) do placed_count = placed_count + 1 end
local index = KEYS[#KEYS]
local waiting = {}
for i, v in ipairs(call_sliced('SMISMEMBER', index, items)) do
  if v == 1 and not placed[i] then waiting[i] = true end
end
local waiting_count = 0
for i in pairs(waiting) do
  placed[i] = true
  waiting_count = waiting_count + 1
end

local first_target = 9 + gens
local current = gens -- the generation new items go into (KEYS[7 + current])
local fresh, duplicates = 0, 0
local to = {}
for i = 1, n do
  local at = first_item + (i - 1) * stride
  local item, target = ARGV[at], tonumber(ARGV[at + 1])
  local seen = placed[i] == true
  if not seen then
    -- A new item's first zero bit usually comes within a read or two,
    -- so GETBIT with an early exit reads fewer bits than a bulk read.
    for g = 1, current do
      local all = true
      local base = at + offsets[g]
      for j = 0, ks[g] - 1 do
        if redis.call('GETBIT', KEYS[7 + g], ARGV[base + j]) == 0 then
          all = false
          break
        end
      end
      if all then seen = true break end
    end
  end
  if seen then
    duplicates = duplicates + 1
  else
    if current == gens and (gens == 0 or count >= caps[gens]) then
      -- No generation yet, or the newest is full: start the next one.
      current = gens + 1
      count = 0
    end
    -- All k bits in one BITFIELD: a quarter cheaper than k SETBITs.
    local base = at + offsets[current]
    local ops = {}
    for j = 0, ks[current] - 1 do
      ops[#ops + 1] = 'SET'
      ops[#ops + 1] = 'u1'
      ops[#ops + 1] = ARGV[base + j]
      ops[#ops + 1] = '1'
    end
    redis.call('BITFIELD', KEYS[7 + current], unpack(ops))
    count = count + 1
    local key = KEYS[first_target + target - 1]
    to[key] = to[key] or {}
    table.insert(to[key], item)
    fresh = fresh + 1
  end
end
for key, list in pairs(to) do
  call_chunked('RPUSH', key, list)
  call_chunked('SADD', index, list)
end
if current > gens then
  if gens > 0 then shapes = ARGV[4] .. ',' .. ARGV[5] else shapes = ARGV[5] end
  redis.call('HSET', KEYS[2], 'gens', current, 'count', count, 'shapes', shapes)
elseif fresh > 0 then
  redis.call('HSET', KEYS[2], 'count', count)
end
if fresh > 0 then redis.call('HINCRBY', KEYS[3], 'items_queued', fresh) end
if duplicates > 0 then redis.call('HINCRBY', KEYS[3], 'bloom_duplicates', duplicates) end
return {fresh, duplicates, current, placed_count, waiting_count, count}
