-- bloom_add.lua: queue the items a Bloom filter has not seen, and add them
-- to it, in one step: test-and-set of the bits and the push happen
-- atomically, so two frontends receiving the same item at once queue it
-- once. Backfeed uses it, and so does `queue add --register`.
--
-- Every generation keeps the shape it was created with, recorded in meta's
-- `shapes`: "m:k:cap" for a classic generation (k bits anywhere in m), as
-- every generation before blocked ones was, "m:k:cap:wW" for a blocked
-- one (k bits in each of W 32-bit words; queues/bloomblocked.go), or
-- "sB:cap" for a sets one (each item's 32-bit fingerprint in one of B
-- SETs, its buckets; queues/bloomsets.go). New generations are blocked or
-- sets (bloom_kind). Changing bloom_kind, bloom_capacity or bloom_fp_rate
-- shapes only generations started afterwards; what is already set stays
-- valid.
--
-- Redis runs nothing else while a script runs, so the caller sizes each
-- batch by its cost (queues.bloomBatchSize) to keep one call short. What an
-- item costs is mostly the arguments passed from Lua to Redis commands, so
-- the script spends calls where they count:
-- - a blocked generation's words are read with one BITFIELD_RO for the
--   whole batch and each word this batch changed is written once, with one
--   BITFIELD for the batch: a few operations per item. The caller lists the
--   batch's distinct words once, and an item names its words by their place in that list and
--   its masks as bytes: Lua neither hashes offset strings nor parses
--   numbers per item (tonumber is two strtod calls), which was a third of
--   the script's cost (callgrind, docs/warrior-api.md "Backfeed");
-- - a classic generation is read with GETBIT, stopping at the first zero
--   bit, and a new item's k bits are set with one BITFIELD;
-- - a sets generation is read with one SISMEMBER per item, except the
--   newest generation before this batch, which the SADD that adds an item
--   to it answers for: one command of three arguments per new item, no
--   read-modify-write of words, and a small AOF record (27.4k Redis
--   instructions per new item against the blocked default's 80.5k,
--   callgrind, docs/warrior-api.md "Backfeed (s44)");
-- - only the items the filter has not seen are looked up in the places an
--   item can be without having passed the filter (out, done, released,
--   recently done, failed, queued): one bulk HMGET/SMISMEMBER/ZMSCORE per
--   place for the batch, skipped where the key does not exist, and not at
--   all in a project whose every item entered through the filter (config's
--   bloom_only, set here when a batch starts the filter of a project no
--   item has entered yet, and cleared by the scripts that let items in
--   without the filter: enqueue.lua, enqueue_scored.lua, import_state.lua).
--   There, an item the filter has not seen was never in the project, so it
--   is nowhere; the look-ups were ~4.3k of ~62k Redis instructions per new
--   item (callgrind).
-- Writes come last, pushes before bits, so a failing command (a wrongly
-- typed key) leaves no item in the filter that is queued nowhere. The one
-- write before the pushes, a sets generation's SADD (whose answer says
-- whether the item is new), is undone with SREM when a later command of
-- the script fails.
--
-- KEYS[1] config   HASH (backfeed_secret is checked here; bloom_only "1":
--                  every item entered through this filter, set here)
-- KEYS[2] meta     HASH bloom: gens, count (items in the newest generation),
--                  shapes ("m:k:cap[:wW],..." one per generation)
-- KEYS[3] stats    HASH counters (items_queued: whether any item entered
--                  before the filter started)
-- KEYS[4] claims   HASH (an item out is not queued again)
-- KEYS[5] done     SET  (nor an item done)
-- KEYS[6] released HASH (nor an item an operator released, waiting in redo)
-- KEYS[7] recent_done ZSET (nor an item done recently when done_mode is
--                  count or archive, which keep no done set)
-- KEYS[8 .. 7+G]   STRING the filter's generations 1..G, then generation G+1
--                  (started when generation G fills up during this batch;
--                  a sets generation's is never written, only its buckets)
-- KEYS[9+G .. 8+G+n*S] SET per item, for each of the S sets generations
--                  among 1..G (and G+1 when ARGV[5] names its shape), in
--                  order: the bucket its fingerprint falls in
-- KEYS[9+G+n*S .. #KEYS-2] the target queues (LIST): a queue and its limit
--                  groups' sub-queues
-- KEYS[#KEYS-1]    failed HASH (nor a failed item: an operator requeues it)
-- KEYS[#KEYS]      queued SET the items waiting in the list queues (nor an
--                  item waiting already; the queued items join it)
--
-- ARGV[1] a salt, fresh for each request ("" = no check: an admin call,
--         which also looks up the places of items the filter knows)
-- ARGV[2] sha1hex(salt .. the backfeed secret offered): the secret itself
--         is never an argument, so SLOWLOG and MONITOR never show it
-- ARGV[3] G, the number of generations the caller saw
-- ARGV[4] the shapes of generations 1..G the caller saw ("" when G = 0)
-- ARGV[5] the shape generation G+1 takes if this batch starts it, or ""
--         when the caller judged the batch cannot start it (the newest
--         generation has room for every item): then no item carries G+1's
--         locations, and a batch that could start it is refused with
--         R.STALE_FILTER before any write
-- ARGV[6] the limit_groups_version the items were routed by
-- ARGV[7] the filters_version the caller dropped filtered items by
-- ARGV[8] how many items of this batch the caller dropped by the filters
--         (counted in stats.items_filtered when the batch is accepted)
-- ARGV[9] n, the number of items
-- ARGV[10..] per item: the item, its target (1-based, among the target
--         queues; only when there are several: with one, every item goes
--         to it), its sets member (a signed 32-bit decimal; only when S >
--         0), then for each other generation 1..G (and G+1 when ARGV[5]
--         names its shape) its locations: for a classic generation its k
--         bit locations, already reduced mod m; for a blocked one a string
--         of 6 bytes per word (queues.blockedBatch): the word's 1-based
--         place in that generation's word list (2 bytes, big-endian) and
--         the mask of the item's bits in it (4 bytes, big-endian)
--         then, for each blocked generation among them in order, its word
--         list: the count U, then U BITFIELD offsets "#<word>" (i32 units),
--         each word once
--
-- Returns {new, duplicates, G', placed, waiting, count} where G' is the
--   generation count now, of the duplicates, placed were out, done,
--   released or failed and waiting were queued already (the rest were in the filter),
--   and count is how many items the newest generation holds now, or
--   {R.NO_PROJECT} no such project; {R.BAD_SECRET} wrong secret or backfeed
--   disabled; {R.STALE_FILTER} the caller's generations differ from meta
--   (re-read it); {R.STALE_GROUPS} limit groups or filters changed.
--
-- Note: an item is a duplicate when ANY generation had all its bits set
-- before this batch, or when it is out, done (in the done set or
-- recent_done), released, failed or waiting in a queue, or came earlier in
-- this batch (the same string; the bits earlier items of the batch set are
-- not tested again, so an item they cover by chance is queued, not lost as
-- a false positive; in a sets generation the SADD does see them, so an
-- item whose fingerprint an earlier item of the batch took is a false
-- positive there as anywhere). An item already in the newest sets
-- generation is looked up in the places above before its SADD says so, so
-- it may be counted as placed or waiting rather than as in the filter.
-- Runs without the prelude: R holds only the codes above.

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
  local cap = string.match(ARGV[4], '^%d+:%d+:(%d+)') or string.match(ARGV[5], '^%d+:%d+:(%d+)')
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
local versions = redis.call('HMGET', KEYS[1], 'limit_groups_version', 'filters_version', 'bloom_only')
if (versions[1] or '0') ~= ARGV[6] or (versions[2] or '0') ~= ARGV[7] then
  return {R.STALE_GROUPS}
end
local filtered = tonumber(ARGV[8])

-- Each generation's shape: a classic one ("m:k:cap") carries an item's k
-- bit locations; a blocked one ("m:k:cap:wW") one string naming its W words
-- (their places in the generation's word list) and its masks in them; a
-- sets one ("sB:cap") nothing of its own: its bucket is a key and the
-- item's member serves every sets generation. sets[g] is generation g's
-- place among the sets generations, or nil.
local ks, caps, words, widths, sets = {}, {}, {}, {}, {}
local set_count = 0
local function add_shape(text)
  local g = #caps + 1
  local _, k, cap, w = string.match(text, '^(%d+):(%d+):(%d+):w(%d+)$')
  if not k then
    _, k, cap = string.match(text, '^(%d+):(%d+):(%d+)$')
  end
  if not k then
    _, cap = string.match(text, '^s(%d+):(%d+)$')
    k = 0
    set_count = set_count + 1
    sets[g] = set_count
  end
  ks[g], caps[g] = tonumber(k), tonumber(cap)
  words[g] = tonumber(w) or 0
  if sets[g] then
    widths[g] = 0
  elseif words[g] > 0 then
    widths[g] = 1
  else
    widths[g] = ks[g]
  end
end
if gens > 0 then
  for text in string.gmatch(ARGV[4], '[^,]+') do add_shape(text) end
end
local with_next = ARGV[5] ~= ''
if with_next then add_shape(ARGV[5]) end
-- offsets[g]: where generation g's locations start within an item's block.
-- An item carries its target only when there are several, and its sets
-- member only when a generation is a sets one.
local n = tonumber(ARGV[9])
local first_bucket = 9 + gens
local first_target = first_bucket + n * set_count
local targeted = #KEYS - 2 > first_target
local offsets, stride = {}, targeted and 2 or 1
local member_at = stride
if set_count > 0 then stride = stride + 1 end
for g = 1, #ks do
  offsets[g] = stride
  stride = stride + widths[g]
end
local first_item = 10
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
-- This batch starts the filter (once in a project's life): if no item has
-- entered the project yet, every item from now on enters through the
-- filter until enqueue.lua, enqueue_scored.lua or import_state.lua lets one
-- in another way and clears bloom_only. Judged here, before this batch's
-- writes, and never again: a filter started in a project with items (or
-- one of the build before) never skips the look-ups.
local starts_empty = false
if gens == 0 then
  starts_empty = tonumber(redis.call('HGET', KEYS[3], 'items_queued') or '0') == 0
    and redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[#KEYS - 1], KEYS[#KEYS]) == 0
end

-- One command over many arguments, in slices: unpack() of a table longer
-- than Lua's C stack (8,000) fails. Returns the replies concatenated.
local function call_sliced(command, key, args, first, last, step)
  if last - first < step then return redis.call(command, key, unpack(args, first, last)) end
  local out = {}
  for i = first, last, step do
    local reply = redis.call(command, key, unpack(args, i, math.min(i + step - 1, last)))
    if type(reply) == 'table' then
      local c = #out
      for j = 1, #reply do out[c + j] = reply[j] end
    end
  end
  return out
end

-- A blocked generation's words, read once for the whole batch: cache[g][p]
-- is the value of the p-th word of its list (as BITFIELD i32 reads it),
-- kept up to date as this batch sets bits. listed[g] is where the list's
-- first offset is in ARGV. A generation that does not exist yet reads as
-- zeros.
local cache, listed = {}, {}
local at_list = first_item + n * stride
for g = 1, #ks do
  if words[g] > 0 then
    local u = tonumber(ARGV[at_list])
    listed[g] = at_list + 1
    local known = {}
    if u > 0 and (g <= gens or redis.call('EXISTS', KEYS[7 + g]) == 1) then
      local ops, c = {}, 0
      for j = at_list + 1, at_list + u do
        ops[c + 1], ops[c + 2], ops[c + 3] = 'GET', 'i32', ARGV[j]
        c = c + 3
      end
      known = call_sliced('BITFIELD_RO', KEYS[7 + g], ops, 1, c, 6000)
    end
    cache[g] = known
    at_list = at_list + 1 + u
  end
end

local band, bor, tobit, byte = bit.band, bit.bor, bit.tobit, string.byte
-- A sets generation g's bucket for item i.
local function bucket(g, i)
  return KEYS[first_bucket + (i - 1) * set_count + sets[g] - 1]
end
-- Whether generation g holds all the item's bits, or its fingerprint (at =
-- the item's first argument, i its place in the batch).
local function in_generation(g, at, i)
  if sets[g] then
    return redis.call('SISMEMBER', bucket(g, i), ARGV[at + member_at]) == 1
  end
  local base = at + offsets[g]
  if words[g] > 0 then
    local known, ref = cache[g], ARGV[base]
    for w = 0, 6 * (words[g] - 1), 6 do
      local p1, p2, m1, m2, m3, m4 = byte(ref, w + 1, w + 6)
      local mask = tobit(((m1 * 256 + m2) * 256 + m3) * 256 + m4)
      if band(known[p1 * 256 + p2] or 0, mask) ~= mask then return false end
    end
    return true
  end
  -- Classic: GETBIT, stopping at the first zero bit (usually the first
  -- or second), reads fewer bits than a bulk read of all k.
  for j = 0, ks[g] - 1 do
    if redis.call('GETBIT', KEYS[7 + g], ARGV[base + j]) == 0 then return false end
  end
  return true
end

-- First the filter as it was before this batch: most duplicates of a
-- backfeed end here, without the look-ups below. An admin call (no salt)
-- looks every item up, to report where the known ones are. The newest
-- generation, when it is a sets one, is left to the SADD below (deferred),
-- whose answer says whether the item was in it.
local in_filter, candidates, candidate_at, c = {}, {}, {}, 0
local admin = ARGV[1] == ''
local deferred = gens > 0 and sets[gens] ~= nil
local tested = deferred and gens - 1 or gens
for i = 1, n do
  local at = first_item + (i - 1) * stride
  for g = 1, tested do
    if in_generation(g, at, i) then in_filter[i] = true break end
  end
  if admin or not in_filter[i] then
    c = c + 1
    candidates[c] = ARGV[at]
    candidate_at[c] = i
  end
end

-- Where each item the filter has not seen already is: out, done, released,
-- recently done, failed, or waiting in a queue (queued or registered by a
-- path that does not go through the filter). These places don't change
-- during the script, so one bulk look-up per place answers for the batch.
local placed, waiting = {}, {}
local placed_count, waiting_count = 0, 0
-- An admin call looks up even there: it reports where known items are.
if c > 0 and (admin or versions[3] ~= '1') then
  -- Numeric loops: ipairs calls its iterator once per element.
  local function mark(command, key, absent)
    local reply = call_sliced(command, key, candidates, 1, c, 6000)
    for j = 1, c do
      local v = reply[j]
      if v ~= absent and v ~= false then
        local i = candidate_at[j]
        if not placed[i] then
          placed[i] = true
          placed_count = placed_count + 1
        end
      end
    end
  end
  -- HMGET answers false for a missing field; SMISMEMBER 0 for a non-member.
  mark('HMGET', KEYS[4])
  mark('SMISMEMBER', KEYS[5], 0)
  if redis.call('EXISTS', KEYS[6]) == 1 then mark('HMGET', KEYS[6]) end
  if redis.call('EXISTS', KEYS[7]) == 1 then mark('ZMSCORE', KEYS[7]) end
  if redis.call('EXISTS', KEYS[#KEYS - 1]) == 1 then mark('HMGET', KEYS[#KEYS - 1]) end
  local queued = call_sliced('SMISMEMBER', KEYS[#KEYS], candidates, 1, c, 6000)
  for j = 1, c do
    local i = candidate_at[j]
    if queued[j] == 1 and not placed[i] then
      waiting[i] = true
      waiting_count = waiting_count + 1
    end
  end
end

local current = gens -- the generation new items go into (KEYS[7 + current])
local fresh, duplicates = 0, 0
local to, all = {}, {}
local batch = {} -- batch[item]: queued by this batch already
local target_key = {} -- an item's target argument -> its queue's key
local dirty = {} -- dirty[g][p]: a blocked word this batch changed
-- The SADDs done (keys and members): the only writes before the pushes,
-- undone if a later command fails (a wrongly typed bucket or queue), so
-- no item is left in the filter that is queued nowhere.
local added, added_at = {}, {}
local function undo_adds()
  for j = 1, #added do redis.call('SREM', added[j], added_at[j]) end
end
for i = 1, n do
  local at = first_item + (i - 1) * stride
  local item = ARGV[at]
  local known = in_filter[i] or placed[i] or waiting[i] or batch[item]
  if not known then
    batch[item] = true
    if current == gens and (gens == 0 or count >= caps[gens]) then
      -- No generation yet, or the newest is full: start the next one.
      current = gens + 1
      count = 0
    end
    if current > gens and deferred then
      -- Past the deferred generation: test it as the others were (after
      -- this batch's first SADDs, so a failure undoes them).
      local tested_ok, hit = pcall(in_generation, gens, at, i)
      if not tested_ok then
        undo_adds()
        error(hit)
      end
      known = hit
    end
    if not known and sets[current] then
      local key, member = bucket(current, i), ARGV[at + member_at]
      local reply = redis.pcall('SADD', key, member)
      if type(reply) == 'table' then
        undo_adds()
        return reply
      end
      known = reply == 0
      if not known then
        added[#added + 1] = key
        added_at[#added] = member
      end
    end
  end
  if known then
    duplicates = duplicates + 1
  else
    local base = at + offsets[current]
    if sets[current] then
      -- Added above.
    elseif words[current] > 0 then
      local cached, ref = cache[current], ARGV[base]
      local changed = dirty[current] or {}
      dirty[current] = changed
      for w = 0, 6 * (words[current] - 1), 6 do
        local p1, p2, m1, m2, m3, m4 = byte(ref, w + 1, w + 6)
        local p = p1 * 256 + p2
        cached[p] = bor(cached[p] or 0, ((m1 * 256 + m2) * 256 + m3) * 256 + m4)
        changed[p] = true
      end
    else
      -- Classic: all k bits in one BITFIELD, now, since the next items
      -- test them with GETBIT.
      local ops = {}
      for j = 0, ks[current] - 1 do
        ops[#ops + 1] = 'SET'
        ops[#ops + 1] = 'u1'
        ops[#ops + 1] = ARGV[base + j]
        ops[#ops + 1] = '1'
      end
      redis.call('BITFIELD', KEYS[7 + current], unpack(ops))
    end
    count = count + 1
    local target = targeted and ARGV[at + 1] or '1'
    local key = target_key[target]
    if not key then
      key = KEYS[first_target + tonumber(target) - 1]
      target_key[target] = key
    end
    local list = to[key]
    if not list then
      list = {}
      to[key] = list
    end
    list[#list + 1] = item
    all[#all + 1] = item
    fresh = fresh + 1
  end
end
-- The pushes before the blocked words: a push that fails (a wrongly typed
-- queue) leaves no item in the filter that is queued nowhere.
local pushed, err = pcall(function()
  for key, list in pairs(to) do
    call_sliced('RPUSH', key, list, 1, #list, 1000)
  end
  if #all > 0 then call_sliced('SADD', KEYS[#KEYS], all, 1, #all, 1000) end
end)
if not pushed then
  undo_adds()
  error(err)
end
local format = string.format
for g, changed in pairs(dirty) do
  local ops, c = {}, 0
  local known, list = cache[g], listed[g] - 1
  for p in pairs(changed) do
    -- '%d': a number argument would be formatted with '%.17g', a
    -- floating-point conversion that cost more than the BITFIELD itself.
    ops[c + 1], ops[c + 2], ops[c + 3], ops[c + 4] = 'SET', 'i32', ARGV[list + p], format('%d', known[p])
    c = c + 4
  end
  call_sliced('BITFIELD', KEYS[7 + g], ops, 1, c, 6000)
end
if current > gens then
  if gens > 0 then shapes = ARGV[4] .. ',' .. ARGV[5] else shapes = ARGV[5] end
  redis.call('HSET', KEYS[2], 'gens', current, 'count', count, 'shapes', shapes)
  if starts_empty then redis.call('HSET', KEYS[1], 'bloom_only', '1') end
elseif fresh > 0 then
  redis.call('HSET', KEYS[2], 'count', count)
end
if filtered > 0 then redis.call('HINCRBY', KEYS[3], 'items_filtered', filtered) end
if fresh > 0 then redis.call('HINCRBY', KEYS[3], 'items_queued', fresh) end
if duplicates > 0 then redis.call('HINCRBY', KEYS[3], 'bloom_duplicates', duplicates) end
return {fresh, duplicates, current, placed_count, waiting_count, count}
