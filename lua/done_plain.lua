-- done_plain.lua: complete items of a plain project, atomically, with only
-- the keys and commands such a done needs: a project that keeps a done set,
-- with no event log, extras or budget, whose items are each the reporter's
-- first claim (nearly every done). Anything else (a repeat, a reclaimed or
-- released item, a stranger's, another setting) is answered R.NOT_PLAIN
-- with nothing changed, and the frontend runs done.lua; a list naming an
-- item twice the frontend sends to done.lua without asking this script.
-- The settings are read here, not cached: a frontend of the build before
-- changing them cannot leave this script acting on a stale copy.
--
-- KEYS[1] config     HASH  event_log, done_mode, has_extras,
--                          downloader_budget and log_length are read
-- KEYS[2] claims     HASH  item -> claim record
-- KEYS[3] done       SET
-- KEYS[4] deadlines  ZSET  item -> reclaim deadline (ms)
--
-- ARGV[1] now (ms)
-- ARGV[2] downloader who reports the items
-- ARGV[3..] the items (at most 1000), each once: the caller sends a list
--            that names an item twice to done.lua (done.lua counts it once;
--            this script would count it twice)
--
-- Returns
--   {1, new, 0, rtt_ms_sum, claimed, "", log_length}  as done.lua's
--                      accepted reply: every item completed now
--                      (rtt_ms_sum an integer; log_length the config's
--                      text, "" when unset: the caller reads both)
--   {R.NOT_PLAIN}      nothing changed; run done.lua
--   {R.CORRUPT, why}   the done set has the wrong type: nothing changed
--
-- Note: where the items go is written first (if that fails nothing has
-- changed), then their claims and deadlines are removed: the order of
-- done.lua's plain path.

local cfg = redis.call('HMGET', KEYS[1], 'event_log', 'done_mode', 'has_extras', 'downloader_budget', 'log_length')
if cfg[1] ~= '0' or cfg[2] ~= 'keep' or cfg[3] ~= '0' or cfg[4] ~= '0' then
  return {R.NOT_PLAIN}
end
local now, downloader = tonumber(ARGV[1]), ARGV[2]
local records = redis.call('HMGET', KEYS[2], unpack(ARGV, 3))
local n = #ARGV - 2
local rtt_sum = 0
-- A multi=N claim gave its N items one record, and Lua keeps one copy of
-- equal strings, so a record equal to the one before is the same string:
-- each distinct record is matched and converted once, not once per item.
local last, last_rtt
for i = 1, n do
  local record = records[i]
  if record ~= last then
    if not record then return {R.NOT_PLAIN} end
    local at, claimant = string.match(record, '^1 (%d+) (%S+) ')
    if claimant ~= downloader then return {R.NOT_PLAIN} end
    last, last_rtt = record, now - tonumber(at)
    if last_rtt < 0 then last_rtt = 0 end
  end
  rtt_sum = rtt_sum + last_rtt
end
local added = redis.pcall('SADD', KEYS[3], unpack(ARGV, 3))
if type(added) == 'table' then
  return {R.CORRUPT, 'completions could not be kept: ' .. tostring(added.err)}
end
redis.call('HDEL', KEYS[2], unpack(ARGV, 3))
redis.call('ZREM', KEYS[4], unpack(ARGV, 3))
-- rtt_sum is a whole number of ms (a sum of differences of whole ms), so
-- it goes back as an integer reply, and log_length as the text stored:
-- string.format and tonumber cost a printf and a strtod on every call.
return {1, n, 0, rtt_sum, n, '', cfg[5] or ''}
