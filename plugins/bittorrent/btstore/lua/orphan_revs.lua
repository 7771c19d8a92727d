-- orphan_revs.lua: orphan cleanup of one score index shard (package
-- orphans): the revision entries, and any index entry, of torrents whose
-- score record is gone (expired tombstones, records deleted by hand). The
-- record is in the torrent's slot, the shard in its own, so the caller
-- read that the record is missing; this deletes only if the revision is
-- still the one read. Revisions are at least the time (ms) of the change
-- (score_apply.lua, score_track.lua), so a record tracked again after the
-- caller's read settles its entry with a newer revision: first (the
-- revision differs, nothing is deleted) or after (it adds the entry back).
--
-- KEYS[1] index ZSET hex info-hash -> score
-- KEYS[2] revs  HASH hex info-hash -> revision
--
-- ARGV[1], ARGV[2], ...: pairs of hex info-hash and the revision read
--
-- Returns how many revision entries were deleted.

local deleted = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    deleted = deleted + 1
  end
end
return deleted
