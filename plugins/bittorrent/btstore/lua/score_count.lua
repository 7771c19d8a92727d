-- score_count.lua: counts one torrent's peers for the scoring policy
-- (seed 002), reading only: how many peers the swarm holds, and how many
-- distinct IPs among them were not seen on this torrent within the window.
-- It writes nothing, so a worker that dies after it leaves no trace: the
-- IPs are marked seen by score_apply.lua when the round is applied.
-- flags: no-writes
--
-- KEYS[1] seeders  HASH  peer id -> peer entry (one byte N, the 20-byte
--                        peer id, then N bytes: address and port)
-- KEYS[2] leechers HASH  same
-- KEYS[3] seen     ZSET  IP (4 or 16 raw bytes) -> last seen (ms)
-- KEYS[4] trackers HASH  external tracker URL -> max peers (read here so
--                        a worker needs one round trip before announcing)
--
-- ARGV[1] now (ms)
-- ARGV[2] the "new" window (ms): an IP last seen at or before now - window
--         is new again
--
-- Returns {peers, new, url1, max1, url2, max2, …}: the counts, then the
-- torrent's external trackers.
--
-- Note: O(swarm); it runs once per torrent per scoring cycle, off the
-- announce path.

local cutoff = tonumber(ARGV[1]) - tonumber(ARGV[2])
local peers, new = 0, 0
local counted = {}
for k = 1, 2 do
  for _, entry in ipairs(redis.call('HVALS', KEYS[k])) do
    peers = peers + 1
    local n = string.byte(entry, 1)
    local ip = string.sub(entry, 22, 19 + n)
    if not counted[ip] then
      counted[ip] = true
      local last = tonumber(redis.call('ZSCORE', KEYS[3], ip))
      if not last or last <= cutoff then new = new + 1 end
    end
  end
end
local out = {peers, new}
for _, v in ipairs(redis.call('HGETALL', KEYS[4])) do out[#out + 1] = v end
return out
