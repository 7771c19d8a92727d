-- removed_users_forget.lua: removes users from the index of removed users
-- (a hint for orphan cleanup; the mark in each user's slot is the truth)
-- only if their score is still the one read, so a user removed again
-- after the read (a newer score) stays indexed.
--
-- KEYS[1] index ZSET user id -> removed_at (ms)
--
-- ARGV[1], ARGV[2], ...: pairs of user id and the score read
--
-- Returns how many were removed.

local n = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
