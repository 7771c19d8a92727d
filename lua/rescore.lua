-- rescore.lua: recompute reclaim deadlines after the project's TTL changed,
-- for a batch of claimed items, so claims already out follow the new TTL.
--
-- KEYS[1] config     HASH (reclaim_ttl_ms is read here, so concurrent TTL
--                          changes converge on the latest one)
-- KEYS[2] deadlines  ZSET item -> reclaim deadline (ms)
-- KEYS[3] claims     HASH item -> claim record
-- KEYS[4] batch_deadlines ZSET batch id -> reclaim deadline (ms): an item
--                          whose record names a claim batch rescores its
--                          batch (lua/prelude.lua)
--
-- ARGV[1..] items
--
-- Returns how many deadlines were rewritten (items no longer out are skipped).

local ttl = tonumber(redis.call('HGET', KEYS[1], 'reclaim_ttl_ms') or '0') or 0
if ttl <= 0 then return 0 end
local rewritten = 0
for i = 1, #ARGV do
  local record = redis.call('HGET', KEYS[3], ARGV[i])
  if record then
    local count, claimed_at, _, _, _, _, batch = parse_claim(record)
    if batch then
      redis.call('ZADD', KEYS[4], 'XX', int(claimed_at + ttl * count), batch)
    else
      redis.call('ZADD', KEYS[2], 'XX', int(claimed_at + ttl * count), ARGV[i])
    end
    rewritten = rewritten + 1
  end
end
return rewritten
