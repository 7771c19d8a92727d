-- reaper_rewards.lua: acknowledges the rewards the reaper has published
-- for a torrent's claims, and ends its claim window when it is over.
-- The reaper reads the "c:" claims, publishes their claim and reward
-- events (idempotency key per torrent and user), then runs this: each
-- listed claim still "c:<ms>" becomes "r:<ms>", so a crash between the
-- publish and this step publishes the same events again, never new ones.
-- Repeating it changes nothing.
--
-- KEYS[1] reaper  HASH  the torrent's reaper row (claim_until, rewards)
-- KEYS[2] claims  HASH  user -> "i:<gen>" | "c:<ms>" | "r:<ms>"
--
-- ARGV[1] now (ms)
-- ARGV[2..] users whose rewards were published
--
-- Returns {granted, left}: how many claims became "r:" now, and how many
-- "c:" claims are left (a claim that came after the read). When none is
-- left the row's rewards mark goes; when the claim window is over too
-- (claim_until < now, or none: the uploader reseeded) and no spell began
-- or was queued since, the row goes.

local now = tonumber(ARGV[1])
local k_reaper, k_claims = KEYS[1], KEYS[2]

local granted = 0
for i = 2, #ARGV do
  local v = redis.call('HGET', k_claims, ARGV[i])
  if v and string.sub(v, 1, 2) == 'c:' then
    redis.call('HSET', k_claims, ARGV[i], 'r:' .. string.sub(v, 3))
    granted = granted + 1
  end
end
local left = 0
local all = redis.call('HVALS', k_claims)
for _, v in ipairs(all) do
  if string.sub(v, 1, 2) == 'c:' then left = left + 1 end
end
if left == 0 then
  redis.call('HDEL', k_reaper, 'rewards')
  local r = redis.call('HMGET', k_reaper, 'state', 'claim_until', 'pending')
  if not r[1] and not r[3] and (not r[2] or tonumber(r[2]) < now) then
    redis.call('DEL', k_reaper)
  end
end
return {granted, left}
