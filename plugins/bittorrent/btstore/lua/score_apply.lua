-- score_apply.lua: applies one scoring round's result to one torrent, in
-- one atomic step (seed 002, fixed as policies.md §B says): reads the
-- score lines, multiplies each or removes the torrent from scoring, writes
-- them, marks the IPs seen per source, and keeps the round in the
-- torrent's bounded history.
--
-- Every source has its own score line, as btstat's HEAD had one per
-- torrent-tracker pair: hoard's own swarm (line:swarm) and each external
-- tracker registered for the torrent (line:<source id>). A new line starts
-- at 1.0. The torrent's score, which ranks it, is the best line of the
-- sources still registered; below the minimum the torrent leaves scoring.
-- An external tracker that could not be reached keeps its line for the
-- grace rounds (ARGV[15]), then each further failed round counts as no
-- peers; a down tracker does not decay every torrent at once, and one gone
-- for good does not pin its torrents forever. A round at or below the last one applied
-- changes nothing, so a result delivered twice counts once; a torrent not
-- being scored (removed, or never tracked) is left as it is.
--
-- Every key is the torrent's (one hash tag). The torrent's entry in the
-- sharded score index lives in another slot: the caller moves it with
-- score_index.lua using the score and revision returned here.
--
-- KEYS[1] score    HASH  state ("active"/"removed"), score, round (last
--                        applied), rev (bumped on every change, at least
--                        now in ms), first_seen,
--                        round_base (where a new record's rounds began,
--                        see score_track.lua), applied_at, removed_at, last_peers, last_new,
--                        last_max, last_mult, snap_created, snap_announces,
--                        snap_registered (the torrent record at removal),
--                        line:<source> (a line's score, %.17g), src:<source>
--                        (JSON: the line's last result, for the views)
-- KEYS[2] torrent  HASH  the swarm store's torrent record (read only)
-- KEYS[3] seeders  HASH  peer id -> peer entry (read only)
-- KEYS[4] leechers HASH  peer id -> peer entry (read only)
-- KEYS[5] seen     ZSET  IP -> last seen (ms), the own swarm's
-- KEYS[6] trackers HASH  external tracker URL -> max peers (read only)
-- KEYS[7] history  LIST  JSON of the last rounds, newest first
-- KEYS[8+2(i-1)]   ZSET  tracker i's seen set: IP -> last seen (ms)
-- KEYS[9+2(i-1)]   ZSET  tracker i's pending IPs: IP -> round the worker
--                        saw it in (written by the worker, read only here)
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
-- ARGV[15] grace: failed rounds an unreachable tracker's line is kept
--          (-1: none, a failure counts as no peers at once)
-- ARGV[16] history length (rounds kept)
-- ARGV[17] n, the external trackers in this result; then 6 ARGV each:
--          source id, URL, peers, new, max, error ("" when it answered)
--
-- Returns {code, score, rev}
--   code 1: applied, the torrent stays with score (text)
--   code 2: applied, the torrent left scoring (score "")
--   code 0: nothing applied (an old round, or not being scored); score is
--           the current one ("" when not scored), so the caller can still
--           settle the index entry

local function num(x) return string.format('%.17g', x) end

local s = redis.call('HMGET', KEYS[1], 'state', 'score', 'round', 'rev', 'line:swarm', 'round_base')
local state, score = s[1], tonumber(s[2])
local last, rev = tonumber(s[3]) or 0, tonumber(s[4]) or 0
local round = tonumber(ARGV[1])
if state ~= 'active' or not score then
  return {0, '', rev}
end
if round <= last then
  return {0, num(score), rev}
end

local nopeers, few, growing, stale, fraction = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local function multiplier(peers, new, max)
  if peers <= 0 then
    return nopeers
  elseif peers < max then
    return few
  elseif new >= fraction * max then
    return growing
  end
  return stale
end

local now = tonumber(ARGV[11])
local window = tonumber(ARGV[12])
-- Revisions are at least the time (ms), so a record deleted (orphan
-- cleanup) and tracked again starts above any revision its index shard
-- still remembers; with a plain counter it restarted at 1 and the shard
-- ignored it for good.
rev = math.max(rev + 1, now)

local function mark(key, members)
  local args = {}
  for _, ip in ipairs(members) do
    args[#args + 1] = now
    args[#args + 1] = ip
    if #args >= 1000 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', key, unpack(args)) end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
end

-- hoard's own swarm: its line (an older record has only the score).
local peers, new, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local mult = multiplier(peers, new, max)
local swarm_line = (tonumber(s[5]) or score) * mult
local ips = {}
for k = 3, 4 do
  for _, entry in ipairs(redis.call('HVALS', KEYS[k])) do
    local n = string.byte(entry, 1)
    ips[#ips + 1] = string.sub(entry, 22, 19 + n)
  end
end
mark(KEYS[5], ips)

local fields = {'round', round, 'rev', string.format('%.0f', rev), 'applied_at', now, 'last_peers', peers,
  'last_new', new, 'last_max', max, 'last_mult', num(mult), 'line:swarm', num(swarm_line),
  'src:swarm', cjson.encode({line = swarm_line, peers = peers, new = new, max = max, mult = mult, at = now})}
local sources = {{source = 'swarm', peers = peers, new = new, max = max, mult = mult, line = swarm_line}}
local best = swarm_line

-- The external trackers in this result that are still registered.
local registered = {}
local t = redis.call('HKEYS', KEYS[6])
for _, url in ipairs(t) do registered[url] = true end
local grace = tonumber(ARGV[15])
local n = tonumber(ARGV[17])
local done = {}
for i = 1, n do
  local a = 17 + (i - 1) * 6
  local id, url = ARGV[a + 1], ARGV[a + 2]
  local tp, tn, tm, terr = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), ARGV[a + 6]
  local seenkey, pendkey = KEYS[8 + (i - 1) * 2], KEYS[9 + (i - 1) * 2]
  if registered[url] and not done[id] then
    local prev = redis.call('HMGET', KEYS[1], 'line:' .. id, 'src:' .. id)
    local line = tonumber(prev[1]) or 1
    local fails = 0
    if prev[2] then
      local ok, old = pcall(cjson.decode, prev[2])
      if ok and type(old) == 'table' then fails = tonumber(old.fails) or 0 end
    end
    local m
    if terr ~= '' then
      fails = fails + 1
      if grace >= 0 and fails <= grace then m = 1 else m = nopeers end
    else
      fails = 0
      m = multiplier(tp, tn, tm)
      mark(seenkey, redis.call('ZRANGEBYSCORE', pendkey, round, round))
      redis.call('PEXPIRE', seenkey, window)
    end
    redis.call('ZREMRANGEBYSCORE', pendkey, '-inf', round)
    line = line * m
    done[id] = line
    local src = {url = url, line = line, peers = tp, new = tn, max = tm, mult = m, fails = fails, at = now}
    if terr ~= '' then src.error = terr end
    fields[#fields + 1], fields[#fields + 2] = 'line:' .. id, num(line)
    fields[#fields + 1], fields[#fields + 2] = 'src:' .. id, cjson.encode(src)
    sources[#sources + 1] = {source = url, peers = tp, new = tn, max = tm, mult = m, line = line, error = src.error, fails = fails}
  end
end

-- The best line of the sources still registered; lines of trackers taken
-- off the torrent go.
for _, l in pairs(done) do
  if l > best then best = l end
end
local all = redis.call('HGETALL', KEYS[1])
local record = {}
for i = 1, #all, 2 do record[all[i]] = all[i + 1] end
local drop = {}
for f, v in pairs(record) do
  local id = string.match(f, '^src:(.+)$')
  if id and id ~= 'swarm' and not done[id] then
    local ok, old = pcall(cjson.decode, v)
    if ok and type(old) == 'table' and registered[old.url] then
      local l = tonumber(record['line:' .. id])
      if l and l > best then best = l end
    else
      drop[#drop + 1] = 'src:' .. id
      drop[#drop + 1] = 'line:' .. id
    end
  end
end
if #drop > 0 then redis.call('HDEL', KEYS[1], unpack(drop)) end

local removed = best < tonumber(ARGV[10])
-- the history counts rounds from 1 (score_track.lua starts a new
-- record's rounds at round_base)
local entry = {round = round - (tonumber(s[6]) or 0), at = now, score = best, previous = score, sources = sources}
if removed then entry.removed = true end
redis.call('LPUSH', KEYS[7], cjson.encode(entry))
redis.call('LTRIM', KEYS[7], 0, tonumber(ARGV[16]) - 1)

if removed then
  local t = redis.call('HMGET', KEYS[2], 'created', 'announces', 'registered')
  fields[#fields + 1], fields[#fields + 2] = 'state', 'removed'
  fields[#fields + 1], fields[#fields + 2] = 'score', num(best)
  fields[#fields + 1], fields[#fields + 2] = 'removed_at', now
  fields[#fields + 1], fields[#fields + 2] = 'snap_created', t[1] or ''
  fields[#fields + 1], fields[#fields + 2] = 'snap_announces', t[2] or '0'
  fields[#fields + 1], fields[#fields + 2] = 'snap_registered', t[3] or ''
  redis.call('HSET', KEYS[1], unpack(fields))
  if ARGV[13] == '1' then
    redis.call('DEL', KEYS[5])
    redis.call('PEXPIRE', KEYS[1], ARGV[14])
    redis.call('PEXPIRE', KEYS[7], ARGV[14])
  end
  return {2, '', rev}
end
fields[#fields + 1], fields[#fields + 2] = 'score', num(best)
redis.call('HSET', KEYS[1], unpack(fields))
return {1, num(best), rev}
