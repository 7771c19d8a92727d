-- credit_torrent.lua: sets a registered torrent's credit multipliers, the
-- site's freeleech / neutral / double upload / percent off status, which
-- announce.lua reads with the record it already reads (prelude's
-- credit_rates). 100 and 100 (normal) delete the fields.
--
-- KEYS[1] torrent  HASH  the torrent's record (credit_up, credit_down)
--
-- ARGV[1] upload rate (percent, 0-1000)
-- ARGV[2] download rate (percent, 0-100)
--
-- Returns 1, or 0 when the torrent is not registered (nothing written).

if redis.call('HEXISTS', KEYS[1], 'id') == 0 then
  return 0
end
if ARGV[1] == '100' and ARGV[2] == '100' then
  redis.call('HDEL', KEYS[1], 'credit_up', 'credit_down')
else
  redis.call('HSET', KEYS[1], 'credit_up', ARGV[1], 'credit_down', ARGV[2])
end
return 1
