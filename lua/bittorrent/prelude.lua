-- prelude.lua: helpers prepended to every BitTorrent script by
-- swarm.loadScript, so the rules shared by announce.lua and expire.lua
-- (leaving a swarm, a user's state on a torrent) live in one place. It
-- defines functions only; it reads no KEYS or ARGV and returns nothing.

-- Integral numbers as text without Lua 5.1's exponent formatting.
local function int(n)
  return string.format('%.0f', n)
end

-- A user's state on one torrent, as the user sets show it: bit 1 active
-- (has a peer in the swarm), 2 complete (has had the whole torrent: a
-- completed event or an announce with left=0), 4 incomplete (announced,
-- never complete), 8 hit-and-run (snatched it, has no peer left, and
-- neither seeded hnr_seed_ms nor reached hnr_ratio; both 0 disables it).
--
-- user_settle recomputes the bits from the user-torrent record and, when
-- they changed, stores them with a new version: max(previous + 1, now),
-- so versions only grow even if the record is ever recreated. The caller
-- copies changed bits to the user's sets (they live in another slot) and
-- the versions let the copy ignore stale, reordered writes. Returns bits
-- and version, or -1 and 0 when nothing changed.
local function user_settle(key, now, hnr_seed_ms, hnr_ratio)
  local u = redis.call('HMGET', key, 'peers', 'complete', 'snatched', 'seed_ms',
    'uploaded', 'downloaded', 'bits', 'ver')
  local peers = tonumber(u[1]) or 0
  local seed_ms = tonumber(u[4]) or 0
  local up = tonumber(u[5]) or 0
  local down = tonumber(u[6]) or 0
  local bits = 0
  if peers > 0 then bits = bits + 1 end
  if u[2] == '1' then bits = bits + 2 else bits = bits + 4 end
  if (tonumber(u[3]) or 0) > 0 and peers == 0 and (hnr_seed_ms > 0 or hnr_ratio > 0) then
    local served = (hnr_seed_ms > 0 and seed_ms >= hnr_seed_ms)
      or (hnr_ratio > 0 and (down == 0 or up / down >= hnr_ratio))
    if not served then bits = bits + 8 end
  end
  if bits == (tonumber(u[7]) or -1) then
    return -1, 0
  end
  local ver = math.max((tonumber(u[8]) or 0) + 1, now)
  redis.call('HSET', key, 'bits', bits, 'ver', int(ver))
  return bits, ver
end

-- One fewer active peer for a user on a torrent, never below zero.
local function user_peer_left(key)
  if redis.call('HINCRBY', key, 'peers', -1) < 0 then
    redis.call('HSET', key, 'peers', 0)
  end
end

-- peer_leave takes one peer out of its swarm: the role hashes (whose
-- lengths are the seeder and leecher counts), the deadline index and the
-- timeout key, and marks its record inactive (the record itself stays
-- until its own TTL, for accounting). Returns 1 when the peer was a
-- seeder, 0 a leecher, -1 when it was not in the swarm.
local function peer_leave(k_seeders, k_leechers, k_deadlines, k_peer, k_timeout, peer_id, member)
  local was = -1
  if redis.call('HDEL', k_seeders, peer_id) == 1 then was = 1 end
  if redis.call('HDEL', k_leechers, peer_id) == 1 and was < 0 then was = 0 end
  redis.call('ZREM', k_deadlines, member)
  redis.call('DEL', k_timeout)
  if was >= 0 and redis.call('EXISTS', k_peer) == 1 then
    redis.call('HSET', k_peer, 'active', '0')
  end
  return was
end

-- swarm_settle copies the seeder and leecher counts (the role hashes'
-- lengths, which cannot drift) into the torrent record and moves
-- last_action, the "last seeded" stamp a reaper reads, to now when the
-- torrent has seeders or seeded_now says a seeder was here until now (it
-- just stopped). Open-mode torrents (no registered id) expire
-- open_retention_ms after their swarm empties, and stop expiring when a
-- peer comes back. Returns seeders, leechers.
local function swarm_settle(k_torrent, k_seeders, k_leechers, now, seeded_now, open_retention_ms, was_empty)
  local seeders = redis.call('HLEN', k_seeders)
  local leechers = redis.call('HLEN', k_leechers)
  redis.call('HSET', k_torrent, 'seeders', seeders, 'leechers', leechers)
  if seeders > 0 or seeded_now then
    redis.call('HSET', k_torrent, 'last_action', int(now))
  end
  if open_retention_ms > 0 and (seeders + leechers == 0 or was_empty)
    and redis.call('HEXISTS', k_torrent, 'id') == 0 then
    if seeders + leechers == 0 then
      redis.call('PEXPIRE', k_torrent, open_retention_ms)
    else
      redis.call('PERSIST', k_torrent)
    end
  end
  return seeders, leechers
end
