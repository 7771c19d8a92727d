-- cheat_addrs.lua: records the addresses one user's passkeys announced
-- from, across torrents, and tells when the user has more than a limit of
-- distinct addresses active within a window: the many-addresses cheat
-- signal, fired at most once per period. The frontends call it for an
-- address they have not sent for the user lately (swarm's watch.go), so
-- it runs per (user, address) and not per announce.
--
-- KEYS[1] addresses  ZSET  address (IPv4, or IPv6 /64) -> last seen (ms);
--                          expires a window after its last write
-- KEYS[2] reported   STRING set when the signal fired, expiring after the
--                          period
--
-- ARGV[1] now (ms)
-- ARGV[2] window (ms): an address last seen longer ago is not active
-- ARGV[3] limit: more active addresses than this fire the signal
-- ARGV[4] period (ms): the signal fires at most once per period
-- ARGV[5] the most addresses kept (the oldest go first)
-- ARGV[6], ARGV[7], ...: pairs of address, time it was seen (ms)
--
-- Returns {active addresses, fired (1 or 0), then when fired the newest
-- active addresses, at most 20}

local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local zadd = {}
for i = 6, #ARGV, 2 do
  zadd[#zadd + 1] = ARGV[i + 1]
  zadd[#zadd + 1] = ARGV[i]
end
-- GT: a frontend whose sighting is older (a late call, another clock)
-- never moves an address back.
redis.call('ZADD', KEYS[1], 'GT', unpack(zadd))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now - window))
local count = redis.call('ZCARD', KEYS[1])
local keep = tonumber(ARGV[5])
if count > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, count - keep - 1)
  count = keep
end
redis.call('PEXPIRE', KEYS[1], window)
if count <= tonumber(ARGV[3]) then
  return {count, 0}
end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[4]) then
  return {count, 0}
end
local out = {count, 1}
for _, a in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, 19)) do out[#out + 1] = a end
return out
