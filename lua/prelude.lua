-- prelude.lua: helpers prepended to every script by queues.loadScript, so
-- the claim-record format lives in one place. It defines functions only; it
-- reads no KEYS or ARGV and returns nothing.

-- A claim record is "<times claimed> <claimed at ms> <downloader> <ip>
-- <earlier claimants> <limit group>": the claimants a comma-separated list
-- (newest first, at most 4) or "-", the group the item was served under or
-- "-" (a reclaim spends that group's rate). Downloaders match
-- [-_a-zA-Z0-9]{3,30}, group names [-_a-z0-9]{1,32}, and IPs hold no spaces
-- or commas, so this is unambiguous and cheaper than cjson.
--
-- A claim of several items at once by claim_plain.lua (or claim.lua's
-- plain path) shares one deadline: the record's earlier claimants (none
-- for a first claim) are "#<batch id>", and the deadline is the batch's
-- (see the batch functions below), not the item's in deadlines.
-- parse_claim returns the batch id as a seventh value (nil for a record
-- of one item's own deadline) and "-" as the earlier claimants. In that
-- field a build from before batches still reads the record (as no
-- earlier claimant; "#" is no downloader's), so its done, fail or release
-- of a batched item works; only the batch's count is then left high
-- until its deadline (batch_explode).
local function parse_claim(record)
  local count, at, downloader, ip, earlier, group = string.match(record, '^(%d+) (%d+) (%S+) (%S+) (%S+) (%S+)$')
  local batch
  if earlier and string.byte(earlier) == 35 then -- "#<batch id>"
    batch, earlier = string.sub(earlier, 2), '-'
  end
  return tonumber(count), tonumber(at), downloader, ip, earlier, group, batch
end

local function format_claim(count, at, downloader, ip, earlier, group)
  return string.format('%d %.0f %s %s %s %s', count, at, downloader, ip, earlier, group)
end

-- A released record ("released" hash) keeps what a later done or claim of
-- a released item needs: "<times claimed> <released at ms> <claimants>".
local function parse_released(record)
  local count, at, claimants = string.match(record, '^(%d+) (%d+) (%S+)$')
  return tonumber(count), tonumber(at), claimants
end

-- Prepends name to a claimant list, without repeats, keeping at most max.
local function push_claimant(name, list, max)
  local out = {name}
  if list ~= '-' then
    for other in string.gmatch(list, '[^,]+') do
      if #out >= max then break end
      if other ~= name then out[#out + 1] = other end
    end
  end
  return table.concat(out, ',')
end

local function in_list(name, list)
  return string.find(',' .. list .. ',', ',' .. name .. ',', 1, true) ~= nil
end

-- Integral numbers as text without Lua 5.1's exponent formatting.
local function int(n)
  return string.format('%.0f', n)
end

-- A claim's reclaim TTL in ms, from the config's reclaim_ttl_ms: 6 hours
-- when it is unset or not positive (queues.DefaultReclaimTTL), so every
-- claim has a deadline.
local function reclaim_ttl(value)
  local ttl = tonumber(value or '0') or 0
  if ttl <= 0 then return 21600000 end
  return ttl
end

-- The budget hash (downloader -> items out) is kept only while the
-- project has a budget limit (the config's downloader_budget above 0):
-- config_write.lua rebuilds it from the claims when a limit is set and
-- drops it when the limit goes, so a project without one pays nothing for
-- it. value is the config's downloader_budget.
local function budget_kept(value)
  return (tonumber(value or '0') or 0) > 0
end

-- One fewer item out for a downloader; the field goes when it reaches zero
-- so the budget hash stays as small as the set of active downloaders.
-- A field that is not an integer (it can't be, but a script must not fail
-- after its first write) is dropped rather than incremented. Callers call
-- it only while the budget is kept (budget_kept).
local function budget_decrement(key, downloader)
  local value = redis.call('HGET', key, downloader)
  if not value or #value > 18 or not string.find(value, '^%-?%d+$') or tonumber(value) <= 1 then
    redis.call('HDEL', key, downloader)
  else
    redis.call('HINCRBY', key, downloader, -1)
  end
end

-- Counters saturate at 2^62 instead of letting HINCRBY fail on overflow:
-- a failing command midway would leave a script's earlier writes applied.
local counter_cap = 4611686018427387904
local function hincr_capped(key, field, n)
  local current = tonumber(redis.call('HGET', key, field) or '0') or 0
  if current + n >= counter_cap then
    redis.call('HSET', key, field, '4611686018427387904')
  else
    redis.call('HINCRBY', key, field, int(n))
  end
end

-- Calls a variadic command with args in slices of at most 1000, because
-- unpack() of a very long table overflows Lua's C stack.
local function call_chunked(command, key, args)
  local total = 0
  for i = 1, #args, 1000 do
    local last = math.min(i + 999, #args)
    total = total + redis.call(command, key, unpack(args, i, last))
  end
  return total
end

-- The same for a command that replies with one element per argument
-- (HMGET, SMISMEMBER): the replies of the slices, concatenated.
local function call_chunked_list(command, key, args)
  local out = {}
  for i = 1, #args, 1000 do
    local part = redis.call(command, key, unpack(args, i, math.min(i + 999, #args)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end

-- Claim batches (queues.BatchesKey, a HASH, and queues.BatchDeadlinesKey,
-- a ZSET batch id -> reclaim deadline ms). A claim of several items writes
-- one batch: field "i<id>" holds the batch's claim record (without the id)
-- and its items, "\n"-separated (items hold no "\n"); "n<id>" how many of
-- them are still out in it; "seq" the last id given; "out" how many items
-- are out in batches (what the project's "out" adds to ZCARD deadlines).
-- An item leaves its batch when its claim ends (done, fail, release);
-- the batch goes with its last item. A due batch is moved to the per-item
-- layout (batch_explode) before anything reclaims or logs its items, so
-- reclaims and the expiry log only ever read deadlines.

-- Writes items (a claim of batch_min or more, each a first claim) as one
-- batch: the batch (its id, record and items, count, deadline), then the
-- claim records naming it. A command that fails writes nothing, and what
-- was written before it is undone; HINCRBY proves the batches hash's type,
-- so its HSET and HINCRBY cannot fail after it. Returns the batch id, or
-- nil, the key that failed and why. claim_plain.lua does the same inline;
-- batch_leave of every item undoes it.
local batch_min = 4
local function batch_write(claims_key, batches_key, batch_deadlines_key, items, record, deadline)
  local id = redis.pcall('HINCRBY', batches_key, 'seq', 1)
  if type(id) == 'table' then return nil, batches_key, id.err end
  id = tostring(id)
  local n = #items
  redis.call('HSET', batches_key, 'i' .. id, record .. '\n' .. table.concat(items, '\n'), 'n' .. id, n)
  redis.call('HINCRBY', batches_key, 'out', n)
  local failed_at, reply
  reply = redis.pcall('ZADD', batch_deadlines_key, deadline, id)
  if type(reply) == 'table' then
    failed_at = batch_deadlines_key
  else
    -- record is a first claim's, "... - -": its earlier claimants name the batch.
    local mine, claim_args = string.sub(record, 1, -4) .. '#' .. id .. ' -', {}
    for i = 1, n do
      claim_args[2 * i - 1], claim_args[2 * i] = items[i], mine
    end
    for i = 1, #claim_args, 1000 do
      reply = redis.pcall('HSET', claims_key, unpack(claim_args, i, math.min(i + 999, #claim_args)))
      if type(reply) == 'table' then break end
    end
    if type(reply) ~= 'table' then return id end
    -- Only the first slice can fail (on the key's type): nothing to undo.
    failed_at = claims_key
    redis.call('ZREM', batch_deadlines_key, id)
  end
  redis.call('HDEL', batches_key, 'i' .. id, 'n' .. id)
  redis.call('HINCRBY', batches_key, 'out', -n)
  return nil, failed_at, reply.err
end

-- n items of batch id left it: its count goes down, and the batch goes
-- (its deadline and its record) when none is left.
local function batch_leave(batches_key, deadlines_key, id, n)
  local left = redis.call('HINCRBY', batches_key, 'n' .. id, -n)
  if left <= 0 then
    redis.call('HDEL', batches_key, 'n' .. id, 'i' .. id)
    redis.call('ZREM', deadlines_key, id)
  end
  redis.call('HINCRBY', batches_key, 'out', -n)
end

-- Ends one item's claim: its record goes, and its deadline (batch, the
-- seventh value of parse_claim, nil) or its place in its batch.
local function claim_remove(claims_key, deadlines_key, batches_key, batch_deadlines_key, item, batch)
  redis.call('HDEL', claims_key, item)
  if batch then
    batch_leave(batches_key, batch_deadlines_key, batch, 1)
  else
    redis.call('ZREM', deadlines_key, item)
  end
end

-- Moves the items still out in batch id to the per-item layout: each gets
-- the batch's deadline in deadlines and the batch's record (without the
-- id) as its own; then the batch goes. Returns how many moved. The
-- deadlines are written before the records, so an item is never out
-- without a deadline; HMGET has proved the claims hash's type before.
local function batch_explode(claims_key, deadlines_key, batches_key, batch_deadlines_key, id, deadline)
  local value = redis.call('HGET', batches_key, 'i' .. id)
  local moved = 0
  if value then
    local record, items = nil, {}
    for line in string.gmatch(value, '[^\n]+') do
      if record then items[#items + 1] = line else record = line end
    end
    local mine = string.sub(record, 1, -4) .. '#' .. id .. ' -'
    local records = #items > 0 and call_chunked_list('HMGET', claims_key, items) or {}
    local deadline_args, claim_args = {}, {}
    for i, item in ipairs(items) do
      if records[i] == mine then
        deadline_args[#deadline_args + 1] = deadline
        deadline_args[#deadline_args + 1] = item
        claim_args[#claim_args + 1] = item
        claim_args[#claim_args + 1] = record
      end
    end
    moved = #claim_args / 2
    if moved > 0 then
      call_chunked('ZADD', deadlines_key, deadline_args)
      call_chunked('HSET', claims_key, claim_args)
    end
  end
  -- "out" loses what the batch counted (the moved items are counted in
  -- deadlines now); a count left too high (an item completed by a build
  -- from before batches, which does not count it down) is mended here.
  local counted = tonumber(redis.call('HGET', batches_key, 'n' .. id) or '') or moved
  redis.call('HDEL', batches_key, 'n' .. id, 'i' .. id)
  redis.call('ZREM', batch_deadlines_key, id)
  if counted ~= 0 then redis.call('HINCRBY', batches_key, 'out', -counted) end
  return moved
end

-- Moves up to limit batches due at now (ms) to the per-item layout (see
-- batch_explode). Returns the deadline of the last one moved when limit
-- were (more may be due), else nil.
local function batches_explode_due(claims_key, deadlines_key, batches_key, batch_deadlines_key, now, limit)
  local due = redis.call('ZRANGEBYSCORE', batch_deadlines_key, '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    batch_explode(claims_key, deadlines_key, batches_key, batch_deadlines_key, due[i], due[i + 1])
  end
  if #due / 2 == limit then return tonumber(due[#due]) end
  return nil
end

-- Appends one entry to a project's event log (a STREAM capped at about max
-- entries; approximate trimming keeps XADD O(1)): kind "done" or
-- "reclaim", the items as a JSON array, who did it or held the claim, and
-- when (ms), and the worker's JSON result when there is one. Callers check
-- the key is a stream (or absent) before their first write, so this cannot
-- fail halfway through a script.
local function log_event(key, max, kind, items, by, at, result)
  if result and result ~= '' then
    redis.call('XADD', key, 'MAXLEN', '~', max, '*',
      'type', kind, 'items', cjson.encode(items), 'by', by, 'at', int(at), 'result', result)
  else
    redis.call('XADD', key, 'MAXLEN', '~', max, '*',
      'type', kind, 'items', cjson.encode(items), 'by', by, 'at', int(at))
  end
end

-- The event log is on when the config's event_log is a positive integer.
local function event_log_max(value)
  local n = tonumber(value or '0') or 0
  if n > 0 then return math.floor(n) end
  return nil
end

-- Keeps completed items as the project's done_mode says: keep adds them to
-- the done set; count and archive keep only the latest recent_max of them
-- in recent_done (trimmed oldest first), count them in stats'
-- done_discarded, and archive also queues them for the archive file
-- (archive_key; nil when the caller keeps no archive queue).
local function keep_completions(done_mode, items, now, done_key, recent_key, recent_max, stats_key, archive_key)
  if done_mode == 'keep' then
    call_chunked('SADD', done_key, items)
    return
  end
  local scored = {}
  for _, item in ipairs(items) do
    scored[#scored + 1] = now
    scored[#scored + 1] = item
  end
  call_chunked('ZADD', recent_key, scored)
  local excess = redis.call('ZCARD', recent_key) - recent_max
  if excess > 0 then redis.call('ZREMRANGEBYRANK', recent_key, 0, excess - 1) end
  hincr_capped(stats_key, 'done_discarded', #items)
  if done_mode == 'archive' and archive_key then call_chunked('RPUSH', archive_key, items) end
end

-- Claim history (queues.HistoryKey): the ended claims of an item claimed
-- more than once, "<downloader> <claimed at ms> <how it ended>[ <note>]"
-- entries joined by ",", oldest first, at most history_max of them; the
-- note (a failure report's reason) has "%" and "," escaped as %25 and %2C.
-- Written only when a claim ends without a done, so a first claim costs
-- nothing.
local history_max = 32
local function history_push(key, item, downloader, at, how, note)
  local entry = downloader .. ' ' .. int(at) .. ' ' .. how
  if note and note ~= '' then
    entry = entry .. ' ' .. string.gsub(string.gsub(note, '%%', '%%25'), ',', '%%2C')
  end
  local have = redis.call('HGET', key, item)
  if have then
    local entries = {}
    for e in string.gmatch(have, '[^,]+') do entries[#entries + 1] = e end
    entries[#entries + 1] = entry
    local first = math.max(1, #entries - history_max + 1)
    entry = table.concat(entries, ',', first)
  end
  redis.call('HSET', key, item, entry)
end

-- Moves an item whose claim has just ended (its claim record, out and
-- deadline entries already removed by the caller) into the failed items:
-- the record keeps how many times it was claimed, when and why it failed,
-- the reporter's message and its claim history, which leaves the history
-- hash. reason is "max_claims" or "reported". Written as JSON by hand so
-- an empty history is [] (cjson would write {}).
local function fail_item(failed_key, history_key, item, count, now, reason, message)
  local history = {}
  local have = redis.call('HGET', history_key, item)
  if have then
    for e in string.gmatch(have, '[^,]+') do
      local by, at, how, note = string.match(e, '^(%S+) (%d+) (%S+) ?(.*)$')
      if by then
        note = string.gsub(string.gsub(note, '%%2C', ','), '%%25', '%%')
        history[#history + 1] = '{"by":' .. cjson.encode(by) .. ',"at":' .. at .. ',"ended":' .. cjson.encode(how) ..
          ',"reason":' .. cjson.encode(note) .. '}'
      end
    end
    redis.call('HDEL', history_key, item)
  end
  redis.call('HSET', failed_key, item, '{"claims":' .. int(count) .. ',"at":' .. int(now) ..
    ',"reason":' .. cjson.encode(reason) .. ',"message":' .. cjson.encode(message or '') ..
    ',"history":[' .. table.concat(history, ',') .. ']}')
end

-- The items (a list) that have a place already: waiting in a list queue
-- (the queued index), out (claims), done (the done set or recent_done) or
-- failed. For a copy coming back into a list from outside the index (an
-- offloaded or staged segment): those copies are dropped, so no list holds
-- a copy the index let past. Returns a set, item -> true; the look-ups run
-- per slice of 1000 items, one command per place.
local function placed_already(items, index_key, claims_key, done_key, recent_key, failed_key)
  local placed = {}
  local any_recent = redis.call('EXISTS', recent_key) == 1
  local any_failed = redis.call('EXISTS', failed_key) == 1
  for i = 1, #items, 1000 do
    local slice = {unpack(items, i, math.min(i + 999, #items))}
    local waiting = redis.call('SMISMEMBER', index_key, unpack(slice))
    local out = redis.call('HMGET', claims_key, unpack(slice))
    local done = redis.call('SMISMEMBER', done_key, unpack(slice))
    local recent = any_recent and redis.call('ZMSCORE', recent_key, unpack(slice)) or {}
    local failed = any_failed and redis.call('HMGET', failed_key, unpack(slice)) or {}
    for j, item in ipairs(slice) do
      if waiting[j] == 1 or out[j] or done[j] == 1 or recent[j] or failed[j] then
        placed[item] = true
      end
    end
  end
  return placed
end
