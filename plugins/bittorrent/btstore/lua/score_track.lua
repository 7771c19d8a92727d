-- score_track.lua: puts a torrent the tracker knows into scoring at 1.0:
-- one never scored, or one removed from scoring that was registered or
-- announced since (its torrent record differs from the snapshot taken at
-- removal). A removed torrent with no such sign stays out: it never comes
-- back by itself (btstat's HEAD did). Coming back, every source's score
-- line starts again at 1.0.
--
-- KEYS[1] score   HASH  see score_apply.lua; a new record's round and
--                       round_base are now (ms)
-- KEYS[2] torrent HASH  the swarm store's torrent record (read only): id,
--                       created, announces, registered
-- KEYS[3] history LIST  the torrent's score history: kept (PERSIST) when
--                       the torrent comes back
--
-- ARGV[1] now (ms)
-- ARGV[2] "1": only registered torrents (private mode)
--
-- Returns {code, score, rev}
--   code 1: now scored at 1.0 (new, or back after a removal)
--   code 2: already scored; score is its current one
--   code 0: not scored (no torrent record, unregistered in private mode,
--           or removed and not seen again); score ""
-- The caller settles the index entry (score_index.lua) for codes 1 and 2.

local t = redis.call('HMGET', KEYS[2], 'id', 'created', 'announces', 'registered')
local s = redis.call('HMGET', KEYS[1], 'state', 'score', 'rev', 'snap_created', 'snap_announces', 'snap_registered')
local rev = tonumber(s[3]) or 0
if (not t[1] and not t[2]) or (ARGV[2] == '1' and not t[1]) then
  return {0, '', rev}
end
if s[1] == 'active' then
  return {2, s[2], rev}
end
if s[1] == 'removed' then
  local again = (t[2] or '') ~= (s[4] or '')
    or (tonumber(t[3]) or 0) > (tonumber(s[5]) or 0)
    or (t[4] or '') ~= (s[6] or '')
  if not again then
    return {0, '', rev}
  end
end
-- At least now (ms): see score_apply.lua.
rev = math.max(rev + 1, tonumber(ARGV[1]))
local lines = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.match(f, '^line:') or string.match(f, '^src:') then lines[#lines + 1] = f end
end
if #lines > 0 then redis.call('HDEL', KEYS[1], unpack(lines)) end
redis.call('HSET', KEYS[1], 'state', 'active', 'score', '1', 'rev', string.format('%.0f', rev), 'tracked_at', ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'round') == 0 then
  -- A new record's rounds count from now (ms), not from 0, so its item
  -- names (score:<hex>:<round>) never repeat those of an earlier record
  -- of the same torrent that orphan cleanup deleted: the queue skips a
  -- name among its recent completions, and a torrent coming back would
  -- wait unscored until they aged out. A round takes at least a
  -- millisecond, so the earlier record's rounds are all below now.
  -- round_base lets the views count rounds from 1.
  redis.call('HSET', KEYS[1], 'round', ARGV[1], 'round_base', ARGV[1])
end
redis.call('HSETNX', KEYS[1], 'first_seen', ARGV[1])
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[3])
return {1, '1', rev}
