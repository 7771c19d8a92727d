-- feed_settle.lua: after the feed delivered a torrent's dirty records to
-- the outbox, marks each delivered one fed, unless it changed since it
-- was read: a record whose seq is still the one delivered gets fed_seq =
-- seq and leaves the dirty set; one that moved on stays for the next
-- round. A crash before this script leaves every record dirty, so the
-- next round delivers the same rows again (the same keys: the outbox and
-- the site drop the copies).
--
-- KEYS[1] dirty  SET   the torrent's dirty user ids
-- KEYS[2..n+1]   HASH  the delivered users' records on the torrent
--
-- ARGV[1..n] the seq delivered for each record, in KEYS' order
-- ARGV[n+1..2n] the user ids, in KEYS' order
--
-- Returns how many users are still dirty.

local n = #KEYS - 1
for i = 1, n do
  local seq = redis.call('HGET', KEYS[i + 1], 'seq')
  if seq == ARGV[i] or not seq then
    if seq then redis.call('HSET', KEYS[i + 1], 'fed_seq', seq) end
    redis.call('SREM', KEYS[1], ARGV[n + i])
  end
end
return redis.call('SCARD', KEYS[1])
