-- feed_settle.lua: after the feed delivered a torrent's rows to the
-- outbox, deletes each delivered row unless it changed since it was
-- read. Only for torrents with rows an earlier build wrote under the user
-- id alone (a row named by its seq, "<user>:<seq>", is deleted with a
-- plain HDEL: swarm.FeedRound); it takes seq-named fields too. A row
-- whose seq is still the one delivered goes; one that moved on (a newer
-- announce replaced it) stays for the next round. A crash
-- before this script leaves every row, so the next round delivers the
-- same rows again (the same keys: the outbox and the site drop the
-- copies).
--
-- KEYS[1] rows  HASH  the torrent's feed rows: field -> row, the row
--                     beginning with its seq and a comma (prelude's
--                     user_feed)
--
-- ARGV pairs: a delivered row's field, the seq delivered in it
--
-- Returns how many rows are left.

for i = 1, #ARGV, 2 do
  local row = redis.call('HGET', KEYS[1], ARGV[i])
  if row and string.match(row, '^%d+') == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return redis.call('HLEN', KEYS[1])
