-- lease.lua: take a lease, or renew it for the owner that holds it, in one
-- step. A lease keeps a periodic job (a plugin's tick, a sweep, a repair)
-- to one frontend per period; a holder that renews keeps it, and one that
-- dies lets it expire for the others.
--
-- KEYS[1] the lease  STRING the owner's id, with a TTL
--
-- ARGV[1] owner (the caller's id: host, pid and a random part)
-- ARGV[2] ttl (ms, >= 1)
--
-- Returns 1 when the caller holds the lease now (taken, or renewed), 0
-- when another owner holds it.

local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
