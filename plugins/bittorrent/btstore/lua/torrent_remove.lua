-- torrent_remove.lua: delete a torrent with every record it owns, in one
-- step in its slot (btstore.RemoveTorrent). The caller lists the records
-- from btstore's table of record kinds; the check and the delete are this
-- one script, so an announce or a registration runs wholly before it
-- (and the torrent is refused here) or wholly after it (and finds a
-- fresh torrent). A record written after the listing is not in KEYS and
-- stays: the torrent it belongs to is a new one.
--
-- KEYS[1] torrent  HASH  id, and the rest of the record
-- KEYS[2] seeders  HASH
-- KEYS[3] leechers HASH
-- KEYS[4..] every other record of the torrent
--
-- ARGV (none)
--
-- Returns the number of keys deleted (0 or more), or
--   R.REGISTERED: the torrent has an id (unregister it first)
--   R.PEERS: its swarm has peers

if redis.call('HGET', KEYS[1], 'id') then
  return R.REGISTERED
end
if redis.call('HLEN', KEYS[2]) + redis.call('HLEN', KEYS[3]) > 0 then
  return R.PEERS
end
local n = 0
for i = 1, #KEYS, 500 do
  n = n + redis.call('DEL', unpack(KEYS, i, math.min(i + 499, #KEYS)))
end
return n
