-- done.lua: complete items, atomically. Either every item is accepted
-- (completed now, or already done and counted once) or nothing changes.
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
--
-- ARGV[1] now (ms)
-- ARGV[2] downloader who reports the items
-- ARGV[3] client script version ("" when none)
-- ARGV[4] total bytes reported
-- ARGV[5] extra members for the log entry: a JSON object body without
--         braces (e.g. "\"ua\":\"...\",\"id\":{...}"), or ""
-- ARGV[6] G, the number of file groups in the bytes map; then G pairs
--         (group, bytes); then the items.
--
-- Returns
--   {1, new, duplicates}   accepted: new items completed, repeats counted once
--   {-1}                   no such project
--   {-2, item, ...}        refused, nothing changed: these items were never
--                          handed out (not out and not done)
--
-- Note: the reporting downloader gets the credit even when the claim has
-- since moved to someone else (a late done after a reclaim); the budget of
-- the current claimant is the one released, because it holds the claim.

local now = tonumber(ARGV[1])
local downloader = ARGV[2]
local version = ARGV[3]
local total_bytes = tonumber(ARGV[4])
local log_tail = ARGV[5]
local groups = tonumber(ARGV[6])
local first_item = 7 + groups * 2

local log_length = redis.call('HGET', KEYS[1], 'log_length')
if not redis.call('HGET', KEYS[1], 'created_at') then
  return {-1}
end
log_length = tonumber(log_length or '1000') or 1000

local fresh, records, unknown = {}, {}, {}
local duplicates = 0
local seen = {}
for i = first_item, #ARGV do
  local item = ARGV[i]
  if not seen[item] then
    seen[item] = true
    local record = redis.call('HGET', KEYS[4], item)
    if record then
      fresh[#fresh + 1] = item
      records[#records + 1] = record
    elseif redis.call('SISMEMBER', KEYS[5], item) == 1 then
      duplicates = duplicates + 1
    else
      unknown[#unknown + 1] = item
    end
  end
end

if #unknown > 0 then
  redis.call('HINCRBY', KEYS[8], 'dones_refused', 1)
  local reply = {-2}
  for _, item in ipairs(unknown) do reply[#reply + 1] = item end
  return reply
end

if duplicates > 0 then
  redis.call('HINCRBY', KEYS[8], 'dones_duplicate', duplicates)
end
if #fresh == 0 then
  return {1, 0, duplicates}
end

local rtt_sum = 0
for i, item in ipairs(fresh) do
  local _, claimed_at, claimant = parse_claim(records[i])
  budget_decrement(KEYS[6], claimant)
  rtt_sum = rtt_sum + math.max(0, now - claimed_at)
end
call_chunked('HDEL', KEYS[4], fresh)
call_chunked('ZREM', KEYS[2], fresh)
call_chunked('ZREM', KEYS[3], fresh)
call_chunked('HDEL', KEYS[7], fresh)
call_chunked('SADD', KEYS[5], fresh)

redis.call('HINCRBY', KEYS[8], 'items_done', #fresh)
redis.call('HINCRBY', KEYS[8], 'bytes_done', int(total_bytes))
redis.call('HINCRBY', KEYS[8], 'rtt_ms_sum', int(rtt_sum))
redis.call('HINCRBY', KEYS[8], 'rtt_count', #fresh)
redis.call('HINCRBY', KEYS[9], downloader, int(total_bytes))
redis.call('HINCRBY', KEYS[10], downloader, #fresh)
if version ~= '' then
  redis.call('HSET', KEYS[11], downloader, version)
end
for i = 7, first_item - 1, 2 do
  redis.call('HINCRBY', KEYS[12], ARGV[i], ARGV[i + 1])
end

if log_length > 0 then
  local entry = '{"items":' .. cjson.encode(fresh) ..
    ',"by":' .. cjson.encode(downloader) ..
    ',"at":' .. int(now) ..
    ',"bytes":' .. int(total_bytes) ..
    ',"version":' .. cjson.encode(version)
  if log_tail ~= '' then entry = entry .. ',' .. log_tail end
  redis.call('LPUSH', KEYS[13], entry .. '}')
  redis.call('LTRIM', KEYS[13], 0, log_length - 1)
end

return {1, #fresh, duplicates}
