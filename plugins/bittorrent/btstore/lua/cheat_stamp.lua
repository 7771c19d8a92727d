-- cheat_stamp.lua: decides which of one announce's per-torrent cheat
-- signals fire, at most once per user, torrent and period: the frontend
-- found their figures above the thresholds (swarm's watch.go) and sends
-- them here in its batched flush, in announce order. A signal fires when
-- the record's stamp for it is absent or at least a period older than
-- the announce, and its stamp then moves to the announce's time. A record
-- that is gone (purged or orphaned since the announce) fires nothing and
-- is not recreated.
--
-- KEYS[1] user  HASH  the user-torrent record; cheat_no_leecher,
--                     cheat_upload_rate, cheat_over_download: when each
--                     signal last fired (ms)
--
-- ARGV[1] the announce's time (ms)
-- ARGV[2] the period (ms)
-- ARGV[3..] the stamp fields of the signals to check
--
-- Returns one number per ARGV[3..]: 1 fired, 0 not (fired within the
-- period, or no record).

local out = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
  for i = 3, #ARGV do out[i - 2] = 0 end
  return out
end
local now, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local stamps = redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
local set = {}
for i = 3, #ARGV do
  local last = tonumber(stamps[i - 2])
  if not last or now - last >= period then
    out[i - 2] = 1
    set[#set + 1] = ARGV[i]
    set[#set + 1] = ARGV[1]
  else
    out[i - 2] = 0
  end
end
if #set > 0 then
  redis.call('HSET', KEYS[1], unpack(set))
end
return out
