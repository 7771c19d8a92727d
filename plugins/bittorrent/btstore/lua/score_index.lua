-- score_index.lua: settles one torrent's entry in its shard of the score
-- index to the state score_apply.lua or score_track.lua returned. The
-- index shard is its own slot (a script's keys share one hash tag, and
-- torrents have their own), so this is the second step of a change; each
-- state carries the torrent's revision, and an older revision than the
-- one the shard last took is ignored, so redelivered or reordered steps
-- never move an entry back.
--
-- KEYS[1] index ZSET  hex info-hash -> score
-- KEYS[2] revs  HASH  hex info-hash -> revision the index shows
-- KEYS[3] done  HASH  minute (unix) -> results applied in it, for
--                     torrents.processed; fields older than ARGV[6] go
--
-- ARGV[1] hex info-hash
-- ARGV[2] revision
-- ARGV[3] score, or "" to take the torrent out of the index
-- ARGV[4] "1": this step follows a result applied now: count it
-- ARGV[5] the current minute (unix minutes)
-- ARGV[6] the oldest minute to keep
--
-- Returns 1 when the entry was settled, 0 when the revision was stale.

local have = tonumber(redis.call('HGET', KEYS[2], ARGV[1])) or -1
local rev = tonumber(ARGV[2])
if ARGV[4] == '1' then
  redis.call('HINCRBY', KEYS[3], ARGV[5], 1)
  if redis.call('HLEN', KEYS[3]) > 120 then
    for _, minute in ipairs(redis.call('HKEYS', KEYS[3])) do
      if tonumber(minute) < tonumber(ARGV[6]) then redis.call('HDEL', KEYS[3], minute) end
    end
  end
end
if rev < have then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], rev)
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
