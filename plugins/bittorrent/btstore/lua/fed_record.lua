-- fed_record.lua: a part prepended to the scripts that delete users'
-- records on a torrent (torrent_remove.lua, orphan_torrent.lua), so they
-- read what the feed needs of a record as it goes in one way. It defines
-- a function only; it reads no KEYS or ARGV and returns nothing.

-- fed_record reads the user record key's feed figures before the caller
-- deletes it: {w, last_announce, seq, uploaded, downloaded, up_extra,
-- down_extra, seed_ms, leech_ms, snatched} as stored ("" for a missing
-- writer stamp, "0" for a missing number), or nil when the record has no
-- numbered change (seq 0: nothing the feed could have missed). The caller
-- returns it, and swarm delivers the row if its writer's "fed up to" is
-- before last_announce (the lead's decision 5, s43).
local function fed_record(key)
  local f = redis.call('HMGET', key, 'w', 'last_announce', 'seq', 'uploaded', 'downloaded', 'up_extra',
    'down_extra', 'seed_ms', 'leech_ms', 'snatched')
  if (tonumber(f[3]) or 0) == 0 then
    return nil
  end
  for j = 1, 10 do
    if not f[j] then
      if j == 1 then f[j] = '' else f[j] = '0' end
    end
  end
  return f
end
