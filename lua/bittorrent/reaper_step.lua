-- reaper_step.lua: moves one torrent's unseeded-reaper state forward by
-- one step (the done of a notify-initial, notify-final or remove item),
-- atomically, after re-checking everything the step depends on: the
-- torrent is still registered, still unseeded since the same moment (its
-- last_action still equals the item's epoch and it has no seeder), the
-- state is at the step before, and the step's time has come, counted
-- both from unseeded_date (which an extension moves) and from when the
-- previous notice really went out. So no torrent is removed unless both
-- notices went out at least their gaps before, whatever order or delay
-- items arrive in, and a repeated done changes nothing.
--
-- KEYS[1] torrent  HASH  id, created, last_action, seeders (package swarm)
-- KEYS[2] reaper   HASH  state, notify, unseeded_date, initial_at,
--                        final_at, removed_at, since, pending, pending_at
--
-- ARGV[1] now (ms)
-- ARGV[2] step: "initial", "final" or "remove"
-- ARGV[3] epoch (ms): for "initial" the time the step was planned (so
--         each queueing has its own item name, and a queue that keeps
--         done names never skips a restart after truncation); for "final"
--         and "remove" the initial_at of the state row the step belongs
--         to (a row deleted and created again is another generation)
-- ARGV[4..6] never seeded: grace (since created), initial -> final,
--         final -> removal (ms)
-- ARGV[7..9] unseeded: grace (since last_action), initial -> final,
--         final -> removal (ms)
--
-- Returns {code, reason}
--   { 1, "initial" | "final" | "removed" }  the step was done now
--   { 0, "already" }        this step was done before (a repeated done)
--   {-1, reason}            refused, nothing changed: "unregistered",
--                           "reseeded" (last_action moved since the spell
--                           began, or a seeder is here), "out of order"
--                           (no state row of this generation at the step
--                           before), "not due" (a threshold has not
--                           passed, e.g. after an extension)
--
-- A removal unregisters the torrent here (HDEL id: announces are refused
-- from this moment); the caller then drops it from the registry and the
-- indexes, which live in other slots.

local now = tonumber(ARGV[1])
local step = ARGV[2]
local epoch = tonumber(ARGV[3])
local k_torrent, k_reaper = KEYS[1], KEYS[2]

local t = redis.call('HMGET', k_torrent, 'id', 'created', 'last_action', 'seeders')
local r = redis.call('HMGET', k_reaper, 'state', 'notify', 'unseeded_date', 'initial_at', 'final_at', 'since')
local last_action = tonumber(t[3]) or 0
local same_spell = r[1] and tonumber(r[6]) == last_action

if step == 'initial' then
  if same_spell and r[2] then
    return {0, 'already'}
  end
  if not t[1] then
    return {-1, 'unregistered'}
  end
  if (tonumber(t[4]) or 0) > 0 then
    return {-1, 'reseeded'}
  end
  local since, grace, state = last_action, tonumber(ARGV[7]), 'unseeded'
  if last_action == 0 then
    since, grace, state = tonumber(t[2]) or now, tonumber(ARGV[4]), 'never'
  end
  if not (now - since > grace) then
    return {-1, 'not due'}
  end
  -- A row of an older spell (a reseed the announce path did not see
  -- clear it) is replaced: the process starts over from this notice.
  redis.call('DEL', k_reaper)
  redis.call('HSET', k_reaper, 'state', state, 'notify', 'initial', 'unseeded_date', ARGV[1],
    'initial_at', ARGV[1], 'since', string.format('%.0f', last_action))
  return {1, 'initial'}
end

local same_row = r[1] and tonumber(r[4]) == epoch
if same_row and ((step == 'final' and (r[2] == 'final' or r[2] == 'removed'))
    or (step == 'remove' and r[2] == 'removed')) then
  return {0, 'already'}
end
if not t[1] then
  return {-1, 'unregistered'}
end
if not same_row then
  return {-1, 'out of order'}
end
if not same_spell or (tonumber(t[4]) or 0) > 0 then
  return {-1, 'reseeded'}
end
local final_gap, removal_gap = tonumber(ARGV[8]), tonumber(ARGV[9])
if r[1] == 'never' then
  final_gap, removal_gap = tonumber(ARGV[5]), tonumber(ARGV[6])
end
local unseeded_date = tonumber(r[3]) or now
if step == 'final' then
  if r[2] ~= 'initial' then return {-1, 'out of order'} end
  if not (now - unseeded_date > final_gap and now - (tonumber(r[4]) or now) > final_gap) then
    return {-1, 'not due'}
  end
  redis.call('HSET', k_reaper, 'notify', 'final', 'final_at', ARGV[1])
  redis.call('HDEL', k_reaper, 'pending', 'pending_at')
  return {1, 'final'}
end
if step == 'remove' then
  if r[2] ~= 'final' then return {-1, 'out of order'} end
  if not (now - unseeded_date > final_gap + removal_gap and now - (tonumber(r[5]) or now) > removal_gap) then
    return {-1, 'not due'}
  end
  redis.call('HDEL', k_torrent, 'id')
  redis.call('HSET', k_reaper, 'notify', 'removed', 'removed_at', ARGV[1])
  redis.call('HDEL', k_reaper, 'pending', 'pending_at')
  return {1, 'removed'}
end
return redis.error_reply('reaper_step: unknown step ' .. tostring(step))
