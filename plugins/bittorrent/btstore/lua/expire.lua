-- expire.lua: removes peers whose deadline has passed from one swarm, the
-- way a stopped event would, except that no time is credited after a
-- peer's last announce (its last sign of life). The sweep runs it for a
-- batch; the keyspace-event listener for one peer whose timeout key (an
-- older build's, written no more) expired. A peer
-- that announced again since it was found due is left alone.
--
-- KEYS[1] torrent    HASH
-- KEYS[2] seeders    HASH  peer id -> compact address
-- KEYS[3] leechers   HASH  peer id -> compact address
-- KEYS[4] deadlines  ZSET  peer id .. user id -> deadline (ms)
-- KEYS[5] owners     HASH  open mode: owner -> peers in the swarm (see
--                          announce.lua)
-- then for each peer i = 0, 1, ...:
-- KEYS[6+2i] peer     HASH   the peer's record
-- KEYS[7+2i] user     HASH   the user's record on the torrent (unused in
--                            open mode, where the user id is "")
--
-- ARGV[1] now (ms)
-- ARGV[2] open-mode torrent retention (ms) once its swarm is empty
-- ARGV[3] hit-and-run minimum seed time (ms), 0: none
-- ARGV[4] hit-and-run minimum ratio, 0: none
-- ARGV[5] peer record retention (ms) once the peer left
-- ARGV[6+i] peer i's deadlines member: peer id (20 bytes) .. user id
--
-- Returns {removed, d_seeders, d_leechers, next deadline, torrent id,
--          user 1, bits 1, version 1, user 2, ...}
--   next deadline: the swarm's earliest remaining deadline (ms), 0 when no
--   peer is left; torrent id "" when the torrent is not registered; then
--   one triple per user whose state changed (see user_write)

local now = tonumber(ARGV[1])
local open_retention_ms = tonumber(ARGV[2])
local hnr_seed_ms = tonumber(ARGV[3])
local hnr_ratio = tonumber(ARGV[4])
local peer_retention_ms = ARGV[5]
local k_torrent, k_seeders, k_leechers, k_deadlines, k_owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local removed, d_seeders, d_leechers = 0, 0, 0
local users = {}

for i = 0, #ARGV - 6 do
  local member = ARGV[6 + i]
  local k_peer, k_user = KEYS[6 + 2 * i], KEYS[7 + 2 * i]
  local deadline = tonumber(redis.call('ZSCORE', k_deadlines, member) or '-1')
  if deadline >= 0 and deadline <= now then
    local peer_id = string.sub(member, 1, 20)
    local user = string.sub(member, 21)
    local was = peer_leave(k_seeders, k_leechers, k_deadlines, peer_id, member)
    if was >= 0 then
      removed = removed + 1
      if was == 1 then d_seeders = d_seeders - 1 else d_leechers = d_leechers - 1 end
      if redis.call('EXISTS', k_peer) == 1 then
        if user == '' then
          local owner = peer_owner(redis.call('HGET', k_peer, 'addr'))
          if owner then owner_drop(k_owners, owner) end
        end
        redis.call('HSET', k_peer, 'active', '0')
        redis.call('PEXPIRE', k_peer, peer_retention_ms)
      end
      if user ~= '' then
        local u = user_read(k_user)
        u.peers = math.max(0, u.peers - 1)
        local bits, ver = user_write(k_user, u, now, hnr_seed_ms, hnr_ratio)
        if bits >= 0 then
          users[#users + 1] = user
          users[#users + 1] = bits
          users[#users + 1] = int(ver)
        end
      end
    end
  end
end

local t = redis.call('HMGET', k_torrent, 'id')
if removed > 0 then
  local seeders = redis.call('HLEN', k_seeders)
  local leechers = redis.call('HLEN', k_leechers)
  if seeders + leechers == 0 then
    redis.call('DEL', k_owners) -- an empty swarm has no owners
  end
  local fields = {}
  torrent_counts(fields, seeders, leechers, ARGV[1], false, d_leechers < 0)
  redis.call('HSET', k_torrent, unpack(fields))
  torrent_retention(k_torrent, t[1] ~= false, seeders + leechers == 0, false, open_retention_ms)
end
local next_deadline = 0
local first = redis.call('ZRANGE', k_deadlines, 0, 0, 'WITHSCORES')
if #first == 2 then next_deadline = tonumber(first[2]) end

local out = {removed, d_seeders, d_leechers, int(next_deadline), t[1] or ''}
for _, v in ipairs(users) do out[#out + 1] = v end
return out
