-- score_apply.lua: applies one scoring round's result to one torrent, in
-- one atomic step (seed 002, fixed as policies.md §B says): reads the
-- score, multiplies it or removes the torrent from scoring, writes it, and
-- marks the swarm's IPs seen. A round at or below the last one applied
-- changes nothing, so a result delivered twice counts once; a torrent not
-- being scored (removed, or never tracked) is left as it is.
--
-- Every key is the torrent's (one hash tag). The torrent's entry in the
-- sharded score index lives in another slot: the caller moves it with
-- score_index.lua using the score and revision returned here.
--
-- KEYS[1] score    HASH  state ("active"/"removed"), score, round (last
--                        applied), rev (bumped on every change), first_seen,
--                        applied_at, removed_at, last_peers, last_new,
--                        last_max, last_mult, snap_created, snap_announces,
--                        snap_registered (the torrent record at removal)
-- KEYS[2] torrent  HASH  the swarm store's torrent record (read only)
-- KEYS[3] seeders  HASH  peer id -> peer entry (read only)
-- KEYS[4] leechers HASH  peer id -> peer entry (read only)
-- KEYS[5] seen     ZSET  IP -> last seen (ms)
--
-- ARGV[1]  round of this result (integer >= 1)
-- ARGV[2]  peers counted
-- ARGV[3]  new peers counted
-- ARGV[4]  the source's max peers (> 0)
-- ARGV[5]  multiplier with no peers (0.5)
-- ARGV[6]  multiplier with some peers, fewer than max (0.8)
-- ARGV[7]  multiplier with max peers and enough new ones (1.2)
-- ARGV[8]  multiplier otherwise (0.8)
-- ARGV[9]  fraction of max that must be new (0.05)
-- ARGV[10] minimum score: below it the torrent is removed (0.005; equal stays)
-- ARGV[11] now (ms)
-- ARGV[12] the "new" window (ms): older seen entries are trimmed
-- ARGV[13] "1": removal stops tracking (open mode): the seen set goes and
--          the tombstone expires after ARGV[14] ms; "0": it only leaves
--          the ranking (private mode)
-- ARGV[14] tombstone TTL (ms) when ARGV[13] is "1"
--
-- Returns {code, score, rev}
--   code 1: applied, the torrent stays with score (text)
--   code 2: applied, the torrent left scoring (score "")
--   code 0: nothing applied (an old round, or not being scored); score is
--           the current one ("" when not scored), so the caller can still
--           settle the index entry

local function num(x) return string.format('%.17g', x) end

local s = redis.call('HMGET', KEYS[1], 'state', 'score', 'round', 'rev')
local state, score = s[1], tonumber(s[2])
local last, rev = tonumber(s[3]) or 0, tonumber(s[4]) or 0
local round = tonumber(ARGV[1])
if state ~= 'active' or not score then
  return {0, '', rev}
end
if round <= last then
  return {0, num(score), rev}
end

local peers, new, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local mult
if peers <= 0 then
  mult = tonumber(ARGV[5])
elseif peers < max then
  mult = tonumber(ARGV[6])
elseif new >= tonumber(ARGV[9]) * max then
  mult = tonumber(ARGV[7])
else
  mult = tonumber(ARGV[8])
end
local next = score * mult
local now = ARGV[11]
rev = rev + 1

-- The swarm's IPs are seen now: the next round counts them as old.
local seen = {}
for k = 3, 4 do
  for _, entry in ipairs(redis.call('HVALS', KEYS[k])) do
    local n = string.byte(entry, 1)
    seen[#seen + 1] = now
    seen[#seen + 1] = string.sub(entry, 22, 19 + n)
    if #seen >= 1000 then
      redis.call('ZADD', KEYS[5], unpack(seen))
      seen = {}
    end
  end
end
if #seen > 0 then redis.call('ZADD', KEYS[5], unpack(seen)) end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', tonumber(now) - tonumber(ARGV[12]))

local fields = {'round', round, 'rev', rev, 'applied_at', now, 'last_peers', peers,
  'last_new', new, 'last_max', max, 'last_mult', num(mult)}
if next < tonumber(ARGV[10]) then
  local t = redis.call('HMGET', KEYS[2], 'created', 'announces', 'registered')
  fields[#fields + 1], fields[#fields + 2] = 'state', 'removed'
  fields[#fields + 1], fields[#fields + 2] = 'score', num(next)
  fields[#fields + 1], fields[#fields + 2] = 'removed_at', now
  fields[#fields + 1], fields[#fields + 2] = 'snap_created', t[1] or ''
  fields[#fields + 1], fields[#fields + 2] = 'snap_announces', t[2] or '0'
  fields[#fields + 1], fields[#fields + 2] = 'snap_registered', t[3] or ''
  redis.call('HSET', KEYS[1], unpack(fields))
  if ARGV[13] == '1' then
    redis.call('DEL', KEYS[5])
    redis.call('PEXPIRE', KEYS[1], ARGV[14])
  end
  return {2, '', rev}
end
fields[#fields + 1], fields[#fields + 2] = 'score', num(next)
redis.call('HSET', KEYS[1], unpack(fields))
return {1, num(next), rev}
