-- done.lua: complete items, atomically. Either every item is accepted
-- (completed now, or already done and counted once) or nothing changes:
-- every check runs before the first write, and counters saturate rather
-- than fail, so the script cannot stop halfway.
--
-- KEYS[1]  config             HASH
-- KEYS[2]  out                ZSET item -> claimed at (ms)
-- KEYS[3]  deadlines          ZSET item -> reclaim deadline (ms)
-- KEYS[4]  claims             HASH item -> claim record
-- KEYS[5]  done               SET
-- KEYS[6]  budget             HASH downloader -> items out
-- KEYS[7]  extras             HASH item -> JSON
-- KEYS[8]  stats              HASH counters
-- KEYS[9]  downloader_bytes   HASH
-- KEYS[10] downloader_items   HASH
-- KEYS[11] downloader_version HASH
-- KEYS[12] domain_bytes       HASH file group -> bytes
-- KEYS[13] log                LIST recent completions (JSON), newest first
-- KEYS[14] released           HASH item -> released record
-- KEYS[15] redo               LIST todo:redo, where released items wait
-- KEYS[16] hourly             HASH this hour's counters (expires after 8 days)
-- KEYS[17] series:m           HASH this UTC day's per-minute items ("HHMM")
--                                   and bytes ("HHMMb"); expires after 2 days
-- KEYS[18] series:h           HASH this UTC year's per-hour items ("MMDDHH")
--                                   and bytes ("MMDDHHb"); expires after 400 days
-- KEYS[19] series:d           HASH this UTC day's bytes per hour and
--                                   downloader ("HH downloader"); expires after 8 days
-- KEYS[20] recent_done       ZSET item -> done at (ms): the latest completions,
--                                   kept when done_mode is count or archive
-- KEYS[21] done_archive      LIST completions waiting for the archive file
-- KEYS[22] events            STREAM the project's event log (written when the
--                                   config's event_log is above 0): one "done"
--                                   entry per accepted call with new items
-- KEYS[23] redo_cancelled    HASH items done while a released copy waits in
--                                   todo:redo or a group's redo sub-queue;
--                                   claim.lua drops that copy when it pops it
--
-- ARGV[1] now (ms)
-- ARGV[2] downloader who reports the items
-- ARGV[3] client script version ("" when none)
-- ARGV[4] total bytes reported (at most 2^45; the caller caps each group)
-- ARGV[5] extra members for the log entry: a JSON object body without
--         braces (e.g. "\"ua\":\"...\",\"id\":{...}"), or ""
-- ARGV[6] G, the number of file groups in the bytes map; then G pairs
--         (group, bytes); then the items.
-- ARGV[7+2G] the minute field "HHMM"; ARGV[8+2G] the hour field "MMDDHH";
--         ARGV[9+2G] the event channel, published to after a completion
--         (a hint for live viewers: they re-read counts from Redis);
--         ARGV[10+2G] the worker's JSON result, or "": it goes into the
--         event log entry, nowhere else.
-- (so the items start at ARGV[11+2G])
--
-- Returns
--   {1, new, duplicates}   accepted: new items completed, repeats counted once
--   {R.NO_PROJECT}         no such project
--   {R.NOT_HANDED_OUT, item, ...} refused, nothing changed: these items were
--                          never handed out (not out, not released, not done)
--   {R.NOT_CLAIMANT, item, ...} refused, nothing changed: these items are out
--                          (or released) but the reporter never claimed them
--   {R.CORRUPT, why}       corrupt state, nothing changed: a key has the
--                          wrong type
--
-- Note: an item is accepted from its current claimant or any of its recent
-- claimants, so a slow warrior whose item was reclaimed still completes it
-- (once), and gets the credit. A released item (an operator's release, or
-- the warrior's own) may still be completed by a claimant: it is taken out
-- of todo:redo. The domain_bytes hash keeps at most 64 groups; bytes of
-- further groups count under "other".
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
local groups = tonumber(ARGV[6])
local minute_field = ARGV[7 + groups * 2]
local hour_field = ARGV[8 + groups * 2]
local channel = ARGV[9 + groups * 2]
local result = ARGV[10 + groups * 2]
local first_item = 11 + groups * 2

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'log_length', 'done_mode', 'recent_done', 'event_log')
if not cfg[1] then
  return {R.NO_PROJECT}
end
local events_max = event_log_max(cfg[5])
local function check_type(k, want)
  local have = redis.call('TYPE', KEYS[k])['ok']
  if have ~= 'none' and have ~= want then
    return {R.CORRUPT, KEYS[k] .. ' is a ' .. have .. ', not a ' .. want}
  end
end
local bad = (events_max and check_type(22, 'stream')) or check_type(23, 'hash')
if bad then return bad end
local log_length = tonumber(cfg[2] or '1000') or 1000
local done_mode = cfg[3] or 'keep'
local recent_max = tonumber(cfg[4] or '1000000') or 1000000

-- Checks: classify every item before changing anything.
local claimed, claimed_records, released_items, unknown, strangers = {}, {}, {}, {}, {}
local duplicates = 0
local seen = {}
local any_released = redis.call('EXISTS', KEYS[14]) == 1
for i = first_item, #ARGV do
  local item = ARGV[i]
  if not seen[item] then
    seen[item] = true
    local record = redis.call('HGET', KEYS[4], item)
    if record then
      local _, _, claimant, _, earlier = parse_claim(record)
      if claimant == downloader or in_list(downloader, earlier) then
        claimed[#claimed + 1] = item
        claimed_records[#claimed_records + 1] = record
      else
        strangers[#strangers + 1] = item
      end
    elseif redis.call('SISMEMBER', KEYS[5], item) == 1
        or redis.call('ZSCORE', KEYS[20], item) then
      duplicates = duplicates + 1
    else
      local released = any_released and redis.call('HGET', KEYS[14], item)
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
  redis.call('HINCRBY', KEYS[8], 'dones_refused', 1)
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

-- Writes.
if duplicates > 0 then
  redis.call('HINCRBY', KEYS[8], 'dones_duplicate', duplicates)
end
if stale > 0 then
  redis.call('HINCRBY', KEYS[8], 'dones_stale', stale)
  duplicates = duplicates + stale
end
local fresh = {}
local rtt_sum = 0
for i, item in ipairs(claimed) do
  local _, claimed_at, claimant = parse_claim(claimed_records[i])
  budget_decrement(KEYS[6], claimant)
  rtt_sum = rtt_sum + math.max(0, now - claimed_at)
  fresh[#fresh + 1] = item
end
if #claimed > 0 then
  call_chunked('HDEL', KEYS[4], claimed)
  call_chunked('ZREM', KEYS[2], claimed)
  call_chunked('ZREM', KEYS[3], claimed)
  redis.call('HINCRBY', KEYS[8], 'rtt_ms_sum', int(rtt_sum))
  redis.call('HINCRBY', KEYS[8], 'rtt_count', #claimed)
end
for _, item in ipairs(released_items) do
  -- Its copy in redo (or a group's redo sub-queue, after a re-route) is
  -- marked, not searched for: an LREM would scan the whole list per item.
  redis.call('HSET', KEYS[23], item, 1)
  redis.call('HDEL', KEYS[14], item)
  fresh[#fresh + 1] = item
end
if #released_items > 0 then
  redis.call('HINCRBY', KEYS[8], 'dones_after_release', #released_items)
end
if #fresh == 0 then
  return {1, 0, duplicates}
end
call_chunked('HDEL', KEYS[7], fresh)
keep_completions(done_mode, fresh, now, KEYS[5], KEYS[20], recent_max, KEYS[8], KEYS[21])

redis.call('HINCRBY', KEYS[8], 'items_done', #fresh)
hincr_capped(KEYS[8], 'bytes_done', total_bytes)
redis.call('HINCRBY', KEYS[16], 'items_done', #fresh)
hincr_capped(KEYS[16], 'bytes_done', total_bytes)
redis.call('EXPIRE', KEYS[16], 691200)
hincr_capped(KEYS[9], downloader, total_bytes)
redis.call('HINCRBY', KEYS[10], downloader, #fresh)
if version ~= '' then
  redis.call('HSET', KEYS[11], downloader, version)
end
for i = 7, 6 + groups * 2, 2 do
  local group = ARGV[i]
  if redis.call('HEXISTS', KEYS[12], group) == 0 and redis.call('HLEN', KEYS[12]) >= 64 then
    group = 'other'
  end
  hincr_capped(KEYS[12], group, tonumber(ARGV[i + 1]))
end

local function series(key, field, n, ttl)
  redis.call('HINCRBY', key, field, n)
  redis.call('EXPIRE', key, ttl)
end
series(KEYS[17], minute_field, #fresh, 172800)
series(KEYS[17], minute_field .. 'b', total_bytes, 172800)
series(KEYS[18], hour_field, #fresh, 34560000)
series(KEYS[18], hour_field .. 'b', total_bytes, 34560000)
series(KEYS[19], string.sub(hour_field, 5, 6) .. ' ' .. downloader, total_bytes, 691200)

local entry = '{"items":' .. cjson.encode(fresh) ..
    ',"by":' .. cjson.encode(downloader) ..
    ',"at":' .. int(now) ..
    ',"bytes":' .. int(total_bytes) ..
    ',"version":' .. cjson.encode(version)
if log_tail ~= '' then entry = entry .. ',' .. log_tail end
entry = entry .. '}'
if log_length > 0 then
  redis.call('LPUSH', KEYS[13], entry)
  redis.call('LTRIM', KEYS[13], 0, log_length - 1)
end
-- The project name is inside the slot's keys; the channel is global, so
-- every frontend subscribes once (pub/sub is a hint, never the truth).
local slug = string.match(KEYS[1], '{(.*)}')
redis.call('PUBLISH', channel, '{"project":' .. cjson.encode(slug) .. ',"entry":' .. entry .. '}')
if events_max then
  log_event(KEYS[22], events_max, 'done', fresh, downloader, now, result)
end

return {1, #fresh, duplicates}
