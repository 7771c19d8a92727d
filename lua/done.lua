-- done.lua: complete items, atomically. Either every item is accepted
-- (completed now, or already done and counted once) or nothing changes:
-- every check runs before the first write, and counters saturate rather
-- than fail, so the script cannot stop halfway.
--
-- KEYS[1]  config             HASH
-- KEYS[2]  deadlines          ZSET item -> reclaim deadline (ms): every claim
--                                   out (claim.lua merges a previous build's
--                                   out into it)
-- KEYS[3]  claims             HASH item -> claim record
-- KEYS[4]  done               SET
-- KEYS[5]  budget             HASH downloader -> items out (kept only while
--                                   the project has a budget limit)
-- KEYS[6]  extras             HASH item -> JSON
-- KEYS[7]  stats              HASH counters (only the rare ones here)
-- KEYS[8]  released           HASH item -> released record
-- KEYS[9]  recent_done        ZSET item -> done at (ms): the latest completions,
--                                   kept when done_mode is count or archive
-- KEYS[10] done_archive       LIST completions waiting for the archive file
-- KEYS[11] events             STREAM the project's event log (written when the
--                                   config's event_log is above 0): one "done"
--                                   entry per accepted call with new items
-- KEYS[12] redo_cancelled     HASH items done while a released copy waits in
--                                   todo:redo or a group's redo sub-queue;
--                                   claim.lua drops that copy when it pops it
-- KEYS[13] history            HASH item -> its ended claims: a completed item
--                                   claimed more than once (or released)
--                                   leaves it
-- KEYS[14] batches            HASH claim batches (lua/prelude.lua): an item
--                                   whose record names a batch leaves it
-- KEYS[15] batch_deadlines    ZSET batch id -> reclaim deadline (ms)
-- (The counters, the recent-completions log and the live hints are not
-- written here: the frontend counts and pushes them from the reply,
-- batched: queues/counters.go and queues/publish.go.)
--
-- ARGV[1] now (ms)
-- ARGV[2] downloader who reports the items
-- ARGV[3] client script version ("" when none)
-- ARGV[4] total bytes reported (at most 2^45; the caller caps each group)
-- ARGV[5] extra members for the log entry: a JSON object body without
--         braces (e.g. "\"ua\":\"...\",\"id\":{...}"), or ""
-- ARGV[6] the worker's JSON result, or "": it goes into the event log
--         entry, nowhere else
-- ARGV[7..] the items
--
-- Returns
--   {1, new, duplicates, rtt_ms_sum, claimed, entry, log_length}
--                          accepted: new items
--                          completed, repeats counted once; the summed
--                          claim-to-done time of the claimed ones and how
--                          many they are (the frontend counts these, with
--                          items and bytes: queues/counters.go); the log
--                          entry when some items were repeats or released
--                          (the frontend's own, doneLogEntry, is right
--                          otherwise), else "", and the
--                          project's log_length (the frontend pushes the
--                          entry to the log and publishes it to live
--                          viewers, batched: queues/publish.go)
--   {R.NO_PROJECT}         no such project
--   {R.NOT_HANDED_OUT, item, ...} refused, nothing changed: these items were
--                          never handed out (not out, not released, not done)
--   {R.NOT_CLAIMANT, item, ...} refused, nothing changed: these items are out
--                          (or released) but the reporter never claimed them
--   {R.CORRUPT, why}       corrupt state, nothing changed: the event log,
--                          the done set or recent_done has the wrong type
--
-- Note: an item is accepted from its current claimant or any of its recent
-- claimants, so a slow warrior whose item was reclaimed still completes it
-- (once), and gets the credit. A released item (an operator's release, or
-- the warrior's own) may still be completed by a claimant: it is taken out
-- of todo:redo. (The domain_bytes hash keeps at most 64 groups; bytes of
-- further groups count under "other": lua/counters_flush.lua.)
--
-- Note: the checks come first, then the writes in an order that loses
-- nothing if one fails (Redis keeps a script's writes before an error):
-- the event entry (its key's type is checked when the log is on), then
-- where the items go (done set, recent_done: a failure there is answered
-- R.CORRUPT with nothing changed), then their removal from claims and
-- deadlines; the budget last, where a field that is not an integer is
-- dropped. Types are checked where keys are set, and by `hoard doctor`.
--
-- done_mode keep adds completions to the done set. count and archive keep
-- only the latest recent_done of them (trimmed oldest first) and count the
-- rest in stats.done_discarded; archive also queues them for the archive
-- file. In those modes an item that is neither out, released nor among the
-- recent completions was most likely completed long ago, so it is accepted
-- as a repeat that changes nothing (counted in stats.dones_stale) rather
-- than refused: seesaw retries a refused done forever. An item that is in
-- fact still queued is not completed by this; it stays queued. (Keep mode,
-- whose done set is complete, still refuses.)

local now = tonumber(ARGV[1])
local downloader = ARGV[2]
local version = ARGV[3]
local total_bytes = tonumber(ARGV[4])
local log_tail = ARGV[5]
local result = ARGV[6]
local first_item = 7

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'log_length', 'done_mode', 'recent_done', 'event_log', 'has_extras', 'downloader_budget')
if not cfg[1] then
  return {R.NO_PROJECT}
end
local events_max = event_log_max(cfg[5])
if events_max then
  local have = redis.call('TYPE', KEYS[11])['ok']
  if have ~= 'none' and have ~= 'stream' then
    return {R.CORRUPT, KEYS[11] .. ' is a ' .. have .. ', not a stream'}
  end
end
local log_length = tonumber(cfg[2] or '1000') or 1000
local done_mode = cfg[3] or 'keep'
local recent_max = tonumber(cfg[4] or '1000000') or 1000000

-- The plain done: a project that keeps a done set, with no event log,
-- extras or budget, and items whose first claim is the reporter's (nearly
-- every done) are completed here, with the same checks and writes in the
-- same order as below but without the general path's tables, closures and
-- per-item lists. Anything else (a repeat, a reclaimed or released item, a
-- stranger's, an item reported twice) goes on to the general path, which
-- reuses the claim records read here.
local plain_records
local items_given = #ARGV - first_item + 1
if not events_max and done_mode == 'keep' and cfg[6] == '0' and not budget_kept(cfg[7])
    and items_given >= 1 and items_given <= 1000 then
  local records = redis.call('HMGET', KEYS[3], unpack(ARGV, first_item))
  local plain, seen, rtt_sum = true, {}, 0
  local left, unbatched = {}, false
  for i = 1, items_given do
    local item, record = ARGV[first_item + i - 1], records[i]
    local at, claimant, batch
    if record then
      local earlier
      at, claimant, earlier = string.match(record, '^1 (%d+) (%S+) %S+ (%S+) ')
      -- A claim batch's item: its earlier claimants are "#<batch id>".
      if earlier ~= '-' then batch = earlier and string.match(earlier, '^#(%d+)$') end
    end
    if claimant ~= downloader or seen[item] then
      plain = false
      break
    end
    seen[item] = true
    rtt_sum = rtt_sum + math.max(0, now - tonumber(at))
    if batch then
      left[batch] = (left[batch] or 0) + 1
    else
      unbatched = true
    end
  end
  if plain then
    local added = redis.pcall('SADD', KEYS[4], unpack(ARGV, first_item))
    if type(added) == 'table' and added.err then
      return {R.CORRUPT, 'completions could not be kept: ' .. added.err}
    end
    redis.call('HDEL', KEYS[3], unpack(ARGV, first_item))
    if unbatched then
      redis.call('ZREM', KEYS[2], unpack(ARGV, first_item))
    end
    for batch, n in pairs(left) do
      batch_leave(KEYS[14], KEYS[15], batch, n)
    end
    return {1, items_given, 0, int(rtt_sum), items_given, '', log_length}
  end
  -- Kept for the general path: its list of unique items is ARGV's when
  -- it is as long (no item was reported twice).
  plain_records = records
end

-- Checks: classify every item before changing anything. One HMGET reads
-- every claim record; the done set and recent_done are asked only about
-- items that are not out.
local unique, seen = {}, {}
for i = first_item, #ARGV do
  local item = ARGV[i]
  if not seen[item] then
    seen[item] = true
    unique[#unique + 1] = item
  end
end
local records = (#unique == items_given and plain_records) or call_chunked_list('HMGET', KEYS[3], unique)
local claimed, claimed_at, claimed_by, released_items, unknown, strangers = {}, {}, {}, {}, {}, {}
-- Of the claimed items, those with a deadline of their own, and per claim
-- batch how many of its items are claimed here (lua/prelude.lua).
local unbatched, batch_left = {}, {}
-- Items claimed more than once: only they can have a claim history.
local retried = {}
local duplicates = 0
local rest = {}
for i, item in ipairs(unique) do
  local record = records[i]
  if record then
    local count, at, claimant, _, earlier, _, batch = parse_claim(record)
    if claimant == downloader or in_list(downloader, earlier) then
      claimed[#claimed + 1] = item
      claimed_at[#claimed] = at
      claimed_by[#claimed] = claimant
      if batch then
        batch_left[batch] = (batch_left[batch] or 0) + 1
      else
        unbatched[#unbatched + 1] = item
      end
      if count and count > 1 then retried[#retried + 1] = item end
    else
      strangers[#strangers + 1] = item
    end
  else
    rest[#rest + 1] = item
  end
end
if #rest > 0 then
  local any_released = redis.call('EXISTS', KEYS[8]) == 1
  local any_recent = redis.call('EXISTS', KEYS[9]) == 1
  for _, item in ipairs(rest) do
    if redis.call('SISMEMBER', KEYS[4], item) == 1
        or (any_recent and redis.call('ZSCORE', KEYS[9], item)) then
      duplicates = duplicates + 1
    else
      local released = any_released and redis.call('HGET', KEYS[8], item)
      if released then
        local _, _, claimants = parse_released(released)
        if in_list(downloader, claimants) then
          released_items[#released_items + 1] = item
        else
          strangers[#strangers + 1] = item
        end
      else
        unknown[#unknown + 1] = item
      end
    end
  end
end

local function refuse(code, items)
  redis.call('HINCRBY', KEYS[7], 'dones_refused', 1)
  local reply = {code}
  for _, item in ipairs(items) do reply[#reply + 1] = item end
  return reply
end
local stale = 0
if #unknown > 0 then
  if done_mode == 'keep' then return refuse(R.NOT_HANDED_OUT, unknown) end
  stale = #unknown
end
if #strangers > 0 then return refuse(R.NOT_CLAIMANT, strangers) end

local fresh = {}
for _, item in ipairs(claimed) do fresh[#fresh + 1] = item end
for _, item in ipairs(released_items) do fresh[#fresh + 1] = item end

-- Writes.
if #fresh > 0 then
  -- Where the items go comes first: if it fails, nothing has changed.
  local ok, err = pcall(keep_completions, done_mode, fresh, now, KEYS[4], KEYS[9], recent_max, KEYS[7], KEYS[10])
  if not ok then
    return {R.CORRUPT, 'completions could not be kept: ' .. tostring(type(err) == 'table' and err.err or err)}
  end
end
if duplicates > 0 then
  redis.call('HINCRBY', KEYS[7], 'dones_duplicate', duplicates)
end
if stale > 0 then
  redis.call('HINCRBY', KEYS[7], 'dones_stale', stale)
  duplicates = duplicates + stale
end
if #fresh == 0 then
  return {1, 0, duplicates, 0, 0, ''}
end
if events_max then
  log_event(KEYS[11], events_max, 'done', fresh, downloader, now, result)
end
local rtt_sum = 0
local by_claimant = {}
for i = 1, #claimed do
  rtt_sum = rtt_sum + math.max(0, now - claimed_at[i])
  by_claimant[claimed_by[i]] = (by_claimant[claimed_by[i]] or 0) + 1
end
if #claimed > 0 then
  call_chunked('HDEL', KEYS[3], claimed)
  if #unbatched > 0 then call_chunked('ZREM', KEYS[2], unbatched) end
  for batch, n in pairs(batch_left) do
    batch_leave(KEYS[14], KEYS[15], batch, n)
  end
end
for _, item in ipairs(released_items) do retried[#retried + 1] = item end
if #retried > 0 then
  call_chunked('HDEL', KEYS[13], retried)
end
for _, item in ipairs(released_items) do
  -- Its copy in redo (or a group's redo sub-queue, after a re-route) is
  -- marked, not searched for: an LREM would scan the whole list per item.
  redis.call('HSET', KEYS[12], item, 1)
  redis.call('HDEL', KEYS[8], item)
end
if #released_items > 0 then
  redis.call('HINCRBY', KEYS[7], 'dones_after_release', #released_items)
end
-- has_extras is set where extras are written (enqueue.lua): "0" on a
-- project that never had any, so the common done asks nothing; a project
-- from before the flag (no field: false) is probed.
if cfg[6] == '1' or (not cfg[6] and redis.call('EXISTS', KEYS[6]) == 1) then
  call_chunked('HDEL', KEYS[6], fresh)
end
-- One fewer item out per item for each claimant; a field reaching zero
-- goes, so the hash stays as small as the set of active downloaders. A
-- field that is not an integer is dropped rather than failing here.
for claimant, n in pairs(budget_kept(cfg[7]) and by_claimant or {}) do
  local left = redis.pcall('HINCRBY', KEYS[5], claimant, -n)
  if type(left) ~= 'number' or left <= 0 then
    redis.call('HDEL', KEYS[5], claimant)
  end
end

-- The frontend builds the log entry for the common case; when some items
-- were repeats or released it is rebuilt here, for the frontend to push.
local rebuilt = ''
if #fresh ~= #unique or #released_items > 0 then
  local entry = '{"items":' .. cjson.encode(fresh) ..
      ',"by":' .. cjson.encode(downloader) ..
      ',"at":' .. int(now) ..
      ',"bytes":' .. int(total_bytes) ..
      ',"version":' .. cjson.encode(version)
  if log_tail ~= '' then entry = entry .. ',' .. log_tail end
  rebuilt = entry .. '}'
end
return {1, #fresh, duplicates, int(rtt_sum), #claimed, rebuilt, log_length}
