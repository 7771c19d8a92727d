-- zrem_unchanged.lua: removes members of a sorted set, each only if its
-- score is still the one the caller read. Its callers read elsewhere (in
-- another slot) that the member is no longer needed, so the read and the
-- remove cannot be one step; whatever revives a member in between changes
-- its score, and the member stays:
--   - swarm.Repair's prune of a torrent index (seeders, leechers,
--     snatches): a torrent registered and announced after the read had
--     its count flushed into the entry (ZINCRBY); removed, the next deltas
--     would build a wrong count until the next rewrite;
--   - orphan cleanup's index of removed users (swarm.RemovedUsersKey): a
--     user removed again after the read has a newer removal time; one
--     whose removal stalled between its entry and its mark can keep the
--     score read, so the caller looks again after the remove and puts
--     back the users it finds marked (swarm.ForgetRemovedUsers).
--
-- KEYS[1] ZSET
--
-- ARGV[1], ARGV[2], ...: pairs of member and the score read
--
-- Returns how many members were removed.

local removed = 0
for i = 1, #ARGV, 2 do
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
