-- feed_settle.lua: after the feed delivered a torrent's pending users to
-- the outbox, deletes each delivered mark or row unless it changed since
-- it was read. A mark ("<user>" -> seq, prelude's user_feed) or a row an
-- earlier build wrote under the user id alone ("<user>" -> "seq,...")
-- whose seq is still the one delivered goes; one that moved on (an
-- announce since wrote a newer seq) stays for the next round. (A row
-- named by its seq, "<user>:<seq>", is deleted with a plain HDEL:
-- swarm.FeedRound; this takes those too.) A crash before this script
-- leaves every mark, so the next round delivers the same rows again (the
-- same keys: the outbox and the site drop the copies).
--
-- KEYS[1] rows  HASH  the torrent's feed rows: field -> a seq, or a row
--                     beginning with its seq and a comma (btstore.FeedRowsKey)
--
-- ARGV pairs: a delivered field, the seq delivered for it
--
-- Returns how many fields are left.

for i = 1, #ARGV, 2 do
  local row = redis.call('HGET', KEYS[1], ARGV[i])
  if row and string.match(row, '^%d+') == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return redis.call('HLEN', KEYS[1])
