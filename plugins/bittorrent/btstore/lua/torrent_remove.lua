-- torrent_remove.lua: delete a torrent with every record it owns, in one
-- step in its slot (btstore.RemoveTorrent; fed_record.lua is prepended). The caller lists the records
-- from btstore's table of record kinds; the check and the delete are this
-- one script, so an announce or a registration runs wholly before it
-- (and the torrent is refused here) or wholly after it (and finds a
-- fresh torrent). A record written after the listing is not in KEYS and
-- stays: the torrent it belongs to is a new one.
--
-- KEYS[1] torrent  HASH  id, and the rest of the record
-- KEYS[2] seeders  HASH
-- KEYS[3] leechers HASH
-- KEYS[4..] every other record of the torrent, its users' records (HASH,
--          prelude's user_read) last, from KEYS[ARGV[1]]
--
-- ARGV[1] the index in KEYS of the first user record (#KEYS + 1: none)
--
-- Returns {the number of keys deleted (0 or more), then per user record
-- with a numbered change (seq > 0): its index in KEYS and {w,
-- last_announce, seq, uploaded, downloaded, up_extra, down_extra, seed_ms,
-- leech_ms, snatched} as stored ("" or "0" when absent)}, so the caller
-- delivers the rows a writer killed with them only in its memory would
-- lose (the lead's decision 5, s43); or
--   R.REGISTERED: the torrent has an id (unregister it first)
--   R.PEERS: its swarm has peers

if redis.call('HGET', KEYS[1], 'id') then
  return R.REGISTERED
end
if redis.call('HLEN', KEYS[2]) + redis.call('HLEN', KEYS[3]) > 0 then
  return R.PEERS
end
local out = {0}
for i = tonumber(ARGV[1]) or #KEYS + 1, #KEYS do
  local f = fed_record(KEYS[i])
  if f then
    local k = #out
    out[k + 1], out[k + 2] = i, f
  end
end
local n = 0
for i = 1, #KEYS, 500 do
  n = n + redis.call('DEL', unpack(KEYS, i, math.min(i + 499, #KEYS)))
end
out[1] = n
return out
