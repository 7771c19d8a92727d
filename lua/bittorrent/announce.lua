-- announce.lua: one announce, atomically: checks the torrent is registered
-- (private mode), writes the peer into its role hash, deadline index and
-- timeout key, updates the peer record, the user-torrent record and the
-- torrent's counters, and picks random peers for the reply. Everything a
-- listener needs comes back in this one round trip.
--
-- KEYS[1] torrent    HASH  id, created, last_action, announces, seeders,
--                          leechers, snatches
-- KEYS[2] seeders    HASH  peer id (20 bytes) -> compact address
-- KEYS[3] leechers   HASH  peer id (20 bytes) -> compact address
-- KEYS[4] deadlines  ZSET  peer id .. user id -> deadline (ms)
-- KEYS[5] peer       HASH  this peer's record
-- KEYS[6] timeout    STRING this peer's timeout key, expires at its deadline
-- KEYS[7] user       HASH  this user's record on the torrent (untouched
--                          when ARGV[10] is "")
--
-- ARGV[1]  now (ms)
-- ARGV[2]  peer id (20 bytes)
-- ARGV[3]  compact address (4 or 16 address bytes + 2 port bytes)
-- ARGV[4]  uploaded (bytes, as reported)
-- ARGV[5]  downloaded (bytes, as reported)
-- ARGV[6]  left (bytes)
-- ARGV[7]  event: 0 none, 1 completed, 2 started, 3 stopped
-- ARGV[8]  numwant (>= 0, already capped)
-- ARGV[9]  "1": the torrent must be registered (private mode)
-- ARGV[10] user id, "" in open mode
-- ARGV[11] peer timeout (ms): the deadline is now + this
-- ARGV[12] peer record retention (ms) after its deadline
-- ARGV[13] open-mode torrent retention (ms) once its swarm is empty; 0 keeps it
-- ARGV[14] hit-and-run minimum seed time (ms), 0: none
-- ARGV[15] hit-and-run minimum ratio, 0: none
--
-- Returns
--   {1, seeders, leechers, snatches, born, d_seeders, d_leechers, snatched,
--    torrent id, user bits, user version, d_uploaded, d_downloaded,
--    peer id 1, address 1, peer id 2, address 2, ...}
--      born: 1 when the swarm had no peer before this announce (the caller
--      then indexes it for the expiry sweep); snatched: 1 when this
--      announce counted a snatch; user bits -1 when the user's state did
--      not change (see user_settle); d_uploaded/d_downloaded: what this
--      peer transferred since its previous announce
--  -1  the torrent is not registered (private mode)
--  -2  the peer id is active in this swarm under another user
--
-- Note: a seeder gets only leechers; a leecher gets seeders first, then
-- other leechers. Peers are picked with HRANDFIELD, so an announce costs
-- O(numwant), never O(swarm). The requester is never among them.

local now = tonumber(ARGV[1])
local peer_id = ARGV[2]
local addr = ARGV[3]
local uploaded = tonumber(ARGV[4])
local downloaded = tonumber(ARGV[5])
local left = tonumber(ARGV[6])
local event = ARGV[7]
local numwant = tonumber(ARGV[8])
local user = ARGV[10]
local timeout_ms = tonumber(ARGV[11])
local retention_ms = tonumber(ARGV[12])
local open_retention_ms = tonumber(ARGV[13])
local hnr_seed_ms = tonumber(ARGV[14])
local hnr_ratio = tonumber(ARGV[15])

local k_torrent, k_seeders, k_leechers, k_deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local k_peer, k_timeout, k_user = KEYS[5], KEYS[6], KEYS[7]

local torrent_id = ''
if ARGV[9] == '1' then
  torrent_id = redis.call('HGET', k_torrent, 'id')
  if not torrent_id then
    return {-1}
  end
end

local was_seeder = redis.call('HEXISTS', k_seeders, peer_id) == 1
local was_leecher = redis.call('HEXISTS', k_leechers, peer_id) == 1
local was_active = was_seeder or was_leecher
local p = redis.call('HMGET', k_peer, 'user', 'uploaded', 'downloaded', 'last_announce',
  'completed', 'total_time', 'first_announce')
local known = p[1] ~= false
if known and p[1] ~= user then
  if was_active then
    return {-2}
  end
  -- An old, inactive record of another user's session: start afresh.
  redis.call('DEL', k_peer)
  p = {}
  known = false
end

local seeders_before = redis.call('HLEN', k_seeders)
local leechers_before = redis.call('HLEN', k_leechers)
local member = peer_id .. user
local leaving = event == '3'
local seeding = left == 0

-- What happened since the previous announce. Time counts only while the
-- peer was in the swarm, and never more than one timeout. A started event
-- opens a new session whose counters begin at the values it reports;
-- counters that went backwards (a client restart) count as nothing.
local elapsed = 0
if was_active then
  elapsed = math.min(math.max(0, now - (tonumber(p[4]) or now)), timeout_ms)
end
local d_up, d_down = 0, 0
if known and event ~= '2' then
  d_up = math.max(0, uploaded - (tonumber(p[2]) or 0))
  d_down = math.max(0, downloaded - (tonumber(p[3]) or 0))
end
local snatched = 0
if event == '1' and not (known and p[5] == '1') then
  snatched = 1
end

if leaving then
  peer_leave(k_seeders, k_leechers, k_deadlines, k_peer, k_timeout, peer_id, member)
else
  local role, other = k_leechers, k_seeders
  if seeding then role, other = k_seeders, k_leechers end
  redis.call('HDEL', other, peer_id)
  redis.call('HSET', role, peer_id, addr)
  redis.call('ZADD', k_deadlines, int(now + timeout_ms), member)
  redis.call('SET', k_timeout, '1', 'PX', timeout_ms)
end

-- The peer record. A stopped event from a peer never seen leaves none.
if known or not leaving then
  local active = '1'
  if leaving then active = '0' end
  local fields = {'user', user, 'addr', addr, 'uploaded', int(uploaded),
    'downloaded', int(downloaded), 'left', int(left), 'last_announce', int(now),
    'total_time', int((tonumber(p[6]) or 0) + elapsed), 'active', active,
    'first_announce', p[7] or int(now)}
  if elapsed > 0 then
    fields[#fields + 1] = 'speed_up'
    fields[#fields + 1] = string.format('%.2f', d_up * 1000 / elapsed)
    fields[#fields + 1] = 'speed_down'
    fields[#fields + 1] = string.format('%.2f', d_down * 1000 / elapsed)
  end
  if snatched == 1 then
    fields[#fields + 1] = 'completed'
    fields[#fields + 1] = '1'
  end
  redis.call('HSET', k_peer, unpack(fields))
  if leaving then
    redis.call('PEXPIRE', k_peer, retention_ms)
  else
    redis.call('PEXPIRE', k_peer, timeout_ms + retention_ms)
  end
end

-- The user's record on this torrent: transfer, seed and leech time,
-- active peers, complete and snatched, and from them the user's state.
local user_bits, user_ver = -1, 0
if user ~= '' and (known or not leaving) then
  if d_up > 0 then redis.call('HINCRBY', k_user, 'uploaded', int(d_up)) end
  if d_down > 0 then redis.call('HINCRBY', k_user, 'downloaded', int(d_down)) end
  if elapsed > 0 then
    if was_seeder then
      redis.call('HINCRBY', k_user, 'seed_ms', int(elapsed))
    else
      redis.call('HINCRBY', k_user, 'leech_ms', int(elapsed))
    end
  end
  if leaving and was_active then
    user_peer_left(k_user)
  elseif not leaving and not was_active then
    redis.call('HINCRBY', k_user, 'peers', 1)
  end
  if seeding and not leaving then
    redis.call('HSET', k_user, 'complete', '1')
  end
  if snatched == 1 then
    redis.call('HSET', k_user, 'complete', '1')
    redis.call('HSETNX', k_user, 'snatched', int(now))
  end
  redis.call('HSETNX', k_user, 'first_announce', int(now))
  redis.call('HSET', k_user, 'last_announce', int(now))
  user_bits, user_ver = user_settle(k_user, now, hnr_seed_ms, hnr_ratio)
end

-- The torrent's counters.
redis.call('HINCRBY', k_torrent, 'announces', 1)
redis.call('HSETNX', k_torrent, 'created', int(now))
local snatches
if snatched == 1 then
  snatches = redis.call('HINCRBY', k_torrent, 'snatches', 1)
else
  snatches = tonumber(redis.call('HGET', k_torrent, 'snatches') or '0')
end
local was_empty = seeders_before + leechers_before == 0
local seeders, leechers = swarm_settle(k_torrent, k_seeders, k_leechers, now,
  leaving and was_seeder, open_retention_ms, was_empty)
local born = 0
if was_empty and seeders + leechers > 0 then born = 1 end

local out = {1, seeders, leechers, snatches, born, seeders - seeders_before,
  leechers - leechers_before, snatched, torrent_id, user_bits, int(user_ver),
  int(d_up), int(d_down)}

-- Up to n random peers of one role hash, skipping the requester.
local function append_random(key, n, skip)
  local want = n
  if skip then want = n + 1 end
  local picked = redis.call('HRANDFIELD', key, want, 'WITHVALUES')
  local got = 0
  for i = 1, #picked, 2 do
    if got >= n then break end
    if picked[i] ~= skip then
      out[#out + 1] = picked[i]
      out[#out + 1] = picked[i + 1]
      got = got + 1
    end
  end
  return got
end

if not leaving and numwant > 0 then
  if seeding then
    append_random(k_leechers, numwant, nil)
  else
    local got = append_random(k_seeders, numwant, nil)
    if got < numwant then
      append_random(k_leechers, numwant - got, peer_id)
    end
  end
end
return out
