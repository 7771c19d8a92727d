-- orphan_registry.lua: orphan cleanup of registry entries (package
-- orphans), torrents whose record lost its id (an unregistration or a
-- reaper removal cut off before its registry step). The record is in the
-- torrent's slot, the registry in its own, so the caller read that the id
-- is gone; this deletes the entry only if it still names the id read. A
-- registration writes the record first and the registry second, so the
-- caller reads the record again afterwards and puts back an entry a
-- registration raced with (the registry is a projection of the records).
--
-- KEYS[1] registry HASH hex info-hash -> torrent id
--
-- ARGV[1], ARGV[2], ...: pairs of hex info-hash and the id read
--
-- Returns the hashes whose entries were deleted.

local deleted = {}
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    deleted[#deleted + 1] = ARGV[i]
  end
end
return deleted
