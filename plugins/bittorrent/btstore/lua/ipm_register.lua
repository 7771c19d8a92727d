-- ipm_register.lua: registers one IP against a set of unique-IP metrics
-- (seed 002), each at most once per window (30 days): for every metric
-- whose marker is absent or expired, set the marker with the window's
-- expiry, then count the IP in the metric's all-time and monthly totals.
-- One script, so concurrent registrations of one IP count it once
-- (btstat's GET then SETEX counted it twice).
--
-- Run twice per (IP, torrent): once on a global shard (KEYS under
-- {ipm:<shard>}, the shard chosen by a hash of the IP) for users and the
-- IP's country, city and postcode, and once under the torrent's own tag
-- ({<info-hash hex>}) for the same four per torrent.
--
-- KEYS[1] markers HASH  one IP's markers: field (metric code, see
--                       ipmetrics/keys.go) -> expiry (unix s). Redis 7.0
--                       has no per-field TTL, so the expiry is stored and
--                       compared here; the key's own TTL (the window,
--                       renewed on every new marker) only collects it.
-- KEYS[2] total   HASH  metric name -> IPs counted ever ("<metric>")
-- KEYS[3] month   HASH  metric name -> IPs counted this month
--                       ("<metric>.<YYYY-MM>"; the key names the month)
--
-- ARGV[1] now (unix s)
-- ARGV[2] window (s): a marker set at t is live while now < t + window
-- ARGV[3], ARGV[4], ...: pairs of marker field, metric name
--
-- Returns the number of metrics the IP was newly counted in (0: every
-- marker was live, nothing was written).

local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local fields = {}
for i = 3, #ARGV, 2 do fields[#fields + 1] = ARGV[i] end
local expiries = redis.call('HMGET', KEYS[1], unpack(fields))
local added = 0
for j, field in ipairs(fields) do
  local expiry = tonumber(expiries[j])
  if not expiry or expiry <= now then
    local metric = ARGV[2 + 2 * j]
    redis.call('HSET', KEYS[1], field, now + window)
    redis.call('HINCRBY', KEYS[2], metric, 1)
    redis.call('HINCRBY', KEYS[3], metric, 1)
    added = added + 1
  end
end
if added > 0 then
  -- A marker of a location the IP no longer resolves to (the database
  -- was updated) would otherwise live as long as the IP keeps coming.
  if redis.call('HLEN', KEYS[1]) > #fields then
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
      if tonumber(all[i + 1]) <= now then redis.call('HDEL', KEYS[1], all[i]) end
    end
  end
  -- The new marker expires last, so the key lives exactly as long.
  redis.call('EXPIRE', KEYS[1], window)
end
return added
