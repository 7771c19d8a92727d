-- enqueue_scored.lua: put items in a project's score-ordered queue
-- (todo:scored, served highest score first, before the FIFO queues). An
-- item already waiting there gets its new score (a rescore); an item out,
-- done or failed is skipped, as enqueue.lua does.
--
-- KEYS[1] config      HASH (bloom_only is cleared when items are queued)
-- KEYS[2] stats       HASH counters
-- KEYS[3] claims      HASH item -> claim record
-- KEYS[4] done        SET
-- KEYS[5] recent_done ZSET the latest completions (done_mode count or archive)
-- KEYS[6] scored      ZSET item -> score
-- KEYS[7] failed      HASH the failed items: an item there is skipped (an
--                     operator requeues it from there)
--
-- ARGV[1] the filters_version the caller dropped filtered items by
-- ARGV[2] how many items the caller dropped by the filters (counted in
--         stats.items_filtered once the version matches)
-- ARGV[3..] pairs: score (a finite number, as text), item
--
-- Note: the scored queue has no queued index, so an item may wait here and
-- in a list at once: queueing here sets the config's pop_check to "1" for
-- good, and claim.lua then drops the second copy when it pops it.
--
-- Returns {queued, rescored, skipped, length of the scored queue}, or
-- {R.NO_PROJECT} when the project does not exist, or {R.CORRUPT, why} when a key has the wrong
-- type (nothing changed), or {R.STALE_GROUPS} when the filters changed.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {R.NO_PROJECT}
end
local expected = {[2] = 'hash', [3] = 'hash', [4] = 'set', [5] = 'zset', [6] = 'zset', [7] = 'hash'}
for i, want in pairs(expected) do
  local have = redis.call('TYPE', KEYS[i])['ok']
  if have ~= 'none' and have ~= want then
    return {R.CORRUPT, KEYS[i] .. ' is a ' .. have .. ', not a ' .. want}
  end
end
if (redis.call('HGET', KEYS[1], 'filters_version') or '0') ~= ARGV[1] then
  return {R.STALE_GROUPS}
end
if tonumber(ARGV[2]) > 0 then
  redis.call('HINCRBY', KEYS[2], 'items_filtered', ARGV[2])
end
local any_recent = redis.call('EXISTS', KEYS[5]) == 1
local any_failed = redis.call('EXISTS', KEYS[7]) == 1
local fresh, rescore = {}, {}
local skipped = 0
for i = 3, #ARGV, 2 do
  local score, item = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', KEYS[3], item) == 1 or redis.call('SISMEMBER', KEYS[4], item) == 1
      or (any_recent and redis.call('ZSCORE', KEYS[5], item))
      or (any_failed and redis.call('HEXISTS', KEYS[7], item) == 1) then
    skipped = skipped + 1
  elseif redis.call('ZSCORE', KEYS[6], item) then
    rescore[#rescore + 1] = score
    rescore[#rescore + 1] = item
  else
    fresh[#fresh + 1] = score
    fresh[#fresh + 1] = item
  end
end
if #fresh > 0 then call_chunked('ZADD', KEYS[6], fresh) end
if #rescore > 0 then call_chunked('ZADD', KEYS[6], rescore) end
if #fresh > 0 then
  redis.call('HINCRBY', KEYS[2], 'items_queued', #fresh / 2)
  redis.call('HSET', KEYS[1], 'pop_check', '1')
  -- Items that bypassed the Bloom filter: see enqueue.lua.
  redis.call('HDEL', KEYS[1], 'bloom_only')
end
return {#fresh / 2, #rescore / 2, skipped, redis.call('ZCARD', KEYS[6])}
