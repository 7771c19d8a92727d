-- failed_move.lua: an operator takes items out of the failed items:
-- requeues them (their claim count starts again at zero) or deletes them.
-- Each item moves in this one script, so it is never in two places.
--
-- KEYS[1] config   HASH
-- KEYS[2] failed   HASH item -> failed record
-- KEYS[3] history  HASH item -> its ended claims
-- KEYS[4] extras   HASH item -> JSON object of extra keys (a deleted item's
--                  go too; a requeued item keeps them)
-- KEYS[5] stats    HASH counters
-- KEYS[6] target   LIST the queue requeued items go to (unused for delete)
-- KEYS[7..#KEYS-1] the target queue's limit group sub-queues (LIST)
-- KEYS[#KEYS] queued SET the items waiting in the list queues
--
-- ARGV[1] "requeue" or "delete"
-- ARGV[2] the limit_groups_version the caller routed by ("" = not checked)
-- ARGV[3..] (item, d) pairs: d = 0 sends the item to KEYS[6], d >= 1 to
--         KEYS[6 + d], the sub-queue of its limit group
--
-- Returns {moved, not_failed}: items requeued or deleted, and items named
-- that were not failed (left alone); {R.NO_PROJECT}; {R.STALE_GROUPS}.

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'limit_groups_version')
if not cfg[1] then
  return {R.NO_PROJECT}
end
if ARGV[2] ~= '' and (cfg[2] or '0') ~= ARGV[2] then
  return {R.STALE_GROUPS}
end
local requeue = ARGV[1] == 'requeue'
local moved, not_failed = 0, 0
local to = {}
for i = 3, #ARGV, 2 do
  local item = ARGV[i]
  if redis.call('HDEL', KEYS[2], item) == 0 then
    not_failed = not_failed + 1
  else
    moved = moved + 1
    redis.call('HDEL', KEYS[3], item)
    if requeue then
      local d = tonumber(ARGV[i + 1])
      local key = d > 0 and KEYS[6 + d] or KEYS[6]
      to[key] = to[key] or {}
      table.insert(to[key], item)
    else
      redis.call('HDEL', KEYS[4], item)
    end
  end
end
for key, items in pairs(to) do
  call_chunked('RPUSH', key, items)
  call_chunked('SADD', KEYS[#KEYS], items)
end
if moved > 0 then
  redis.call('HINCRBY', KEYS[5], requeue and 'failed_requeued' or 'failed_deleted', moved)
end
return {moved, not_failed}
