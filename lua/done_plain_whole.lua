-- done_plain_whole.lua: done_plain.lua with a first step for a done that
-- names exactly one whole claim batch, in its order (what seesaw reports
-- for a multi=N claim of batch_min or more items, nearly every such done):
-- it completes the batch from the batch's own record, without reading the
-- items' claim records. Anything else runs done_plain.lua, which follows
-- this file unchanged in the same script (queues.donePlainWholeScript,
-- luascript.LoadJoined), so its checks and replies are done_plain.lua's.
--
-- Sound only while every frontend counts batches down (the frontend runs
-- this script only then: queues.Options.PreBatchFrontends, `hoard serve
-- --all-frontends-count-batches`). An item leaves its batch only by
-- claim_remove or batch_leave (lua/prelude.lua), which count "n<id>" down
-- with its record's removal, or with the whole batch (batch_explode), so a
-- batch whose count is still its items' number has every item out under
-- its record. A frontend of a build from before claim batches (main before
-- eb66426) removes a batched item's record without counting down: if that
-- item is claimed again, this step would take its new claimant's record.
--
-- KEYS[1..6] done_plain.lua's, all six (config, claims, done, deadlines,
--            batches, batch_deadlines); with fewer this step is skipped
-- ARGV[1]    downloader who reports the items
-- ARGV[2..]  the items, each once, as done_plain.lua's
--
-- Returns
--   "<at> <log_length>"  the items are one whole batch of the reporter's
--                      first claims, all completed now: the batch's claim
--                      time (ms, text), a space, and the config's
--                      log_length text ("" when unset), as one bulk string
--                      (done_plain.lua answers a string only for one item,
--                      so a done of more items answered one took this step)
--   {R.CORRUPT, why}   the done set has the wrong type: nothing changed
--   anything else      done_plain.lua's reply (below)
--
-- Note: the step only reads (the config, the first item's record, the
-- batch's record and count) until it knows the done is one whole batch,
-- then writes done_plain.lua's writes for it, in its order: the done set,
-- the claims, then the batch (which the count going to 0 would remove).
-- The checks are the reads the per-item path would make, narrowed: the
-- config as done_plain.lua checks it; the first record names batch <id>
-- and the reporter; "n<id>" is the number of items named, and "i<id>" is
-- that record (without the id) followed by the names, in order.

do
  local n = #ARGV - 1
  if n >= 2 and #KEYS == 6 then
    local cfg = redis.call('HMGET', KEYS[1], 'event_log', 'done_mode', 'has_extras', 'downloader_budget', 'log_length')
    if cfg[1] == '0' and cfg[2] == 'keep' and cfg[3] == '0' and cfg[4] == '0' then
      local first = redis.call('HGET', KEYS[2], ARGV[2])
      local at, claimant, id
      if first then
        at, claimant, id = string.match(first, '^1 (%d+) (%S+) %S+ #(%d+) %-$')
      end
      if id and claimant == ARGV[1] then
        local batch = redis.call('HMGET', KEYS[5], 'n' .. id, 'i' .. id)
        -- "1 <at> <downloader> <ip> #<id> -" is "1 <at> <downloader> <ip> - -"
        -- in the batch's record: the last #id + 3 characters differ.
        if batch[1] == tostring(n)
          and batch[2] == string.sub(first, 1, -(#id + 4)) .. '- -\n' .. table.concat(ARGV, '\n', 2) then
          local added = redis.pcall('SADD', KEYS[3], unpack(ARGV, 2))
          if type(added) == 'table' then
            return {R.CORRUPT, 'completions could not be kept: ' .. tostring(added.err)}
          end
          redis.call('HDEL', KEYS[2], unpack(ARGV, 2))
          redis.call('HDEL', KEYS[5], 'n' .. id, 'i' .. id)
          redis.call('ZREM', KEYS[6], id)
          redis.call('HINCRBY', KEYS[5], 'out', -n)
          return at .. ' ' .. (cfg[5] or '')
        end
      end
    end
  end
end
