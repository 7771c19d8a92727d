-- credit_convert.lua: converts one record written by a build that stored
-- the credited transfer whole (up_credit, down_credit) to the form kept
-- since s43: the credited figure less the raw one (up_extra, down_extra),
-- which the announce leaves unwritten while no multiplier or token
-- applies. swarm's convertCredit runs it over every record and total once,
-- before the frontend serves an announce (btstore.CreditFormKey).
--
-- A converted record always has the new field, even at 0: "no up_extra"
-- then means "not converted yet", so a conversion cut short and run again
-- converts each record once. An old record with no up_credit had nothing
-- credited (accounting off), so its difference is minus the raw figure.
--
-- KEYS[1] record  HASH  a user-torrent record (btstore.UserTorrentKey) or
--                       a user's totals (btstore.UserStatsKey): uploaded,
--                       downloaded, and up_credit/down_credit (old) or
--                       up_extra/down_extra (new)
--
-- Returns the number of figures converted (0, 1 or 2).

local v = redis.call('HMGET', KEYS[1], 'uploaded', 'downloaded', 'up_credit', 'down_credit', 'up_extra', 'down_extra')
local converted = 0
if not v[5] then
  redis.call('HSET', KEYS[1], 'up_extra', (tonumber(v[3]) or 0) - (tonumber(v[1]) or 0))
  converted = converted + 1
end
if not v[6] then
  redis.call('HSET', KEYS[1], 'down_extra', (tonumber(v[4]) or 0) - (tonumber(v[2]) or 0))
  converted = converted + 1
end
if v[3] or v[4] then
  redis.call('HDEL', KEYS[1], 'up_credit', 'down_credit')
end
return converted
