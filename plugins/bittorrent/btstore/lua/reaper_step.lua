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
-- KEYS[1] torrent  HASH  id, uploader, created, last_action, seeders
--                        (package swarm)
-- KEYS[2] reaper   HASH  state, notify, unseeded_date, initial_at, gen,
--                        final_at, removed_at, since, pending, pending_at
--                        (run: the pending_at of the run that queued the
--                        step, kept as initial_run / final_run /
--                        removed_run for the events; removed_id: the
--                        torrent id a removal took away)
-- KEYS[3] claims   HASH  user -> "i:<gen>" invited, "c:"/"r:" claimed
-- KEYS[4] snatchers SET  users who snatched the torrent
--
-- ARGV[1] now (ms)
-- ARGV[2] step: "initial", "final" or "remove"
-- ARGV[3] epoch (ms): for "initial" the time the step was planned (so
--         each queueing has its own item name, and a queue that keeps
--         done names never skips a restart after truncation); for "final"
--         and "remove" the gen of the state row the step belongs to (its
--         initial_at, moved by each extension: a row deleted and created
--         again, or extended, is another generation whose steps get new
--         names)
-- ARGV[4..6] never seeded: grace (since created), initial -> final,
--         final -> removal (ms)
-- ARGV[7..9] unseeded: grace (since last_action), initial -> final,
--         final -> removal (ms)
--
-- Returns {code, reason, gen, run, torrent id, uploader, state, invited...}
--   { 1, "initial" | "final" | "removed", gen, run, invited... }  the
--                           step was done now; invited: the snatchers an
--                           unseeded initial notice invited to reseed
--                           (not the uploader, nobody invited or claimed
--                           before), each now "i:<gen>" in claims
--   { 0, "already", gen, run, invited... }  this step was done before
--                           (a repeated done), with what it did then, so
--                           a worker that died before publishing its
--                           events publishes the same ones again
--   The torrent id is the removed one's (removed_id) after a removal.
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

local k_claims, k_snatchers = KEYS[3], KEYS[4]

local t = redis.call('HMGET', k_torrent, 'id', 'created', 'last_action', 'seeders', 'uploader')
local r = redis.call('HMGET', k_reaper, 'state', 'notify', 'unseeded_date', 'initial_at', 'final_at', 'since',
  'gen', 'pending_at', 'initial_run', 'final_run', 'removed_run', 'removed_id')
local last_action = tonumber(t[3]) or 0
local same_spell = r[1] and tonumber(r[6]) == last_action
local gen = r[7] or r[4]

-- The users invited by the initial notice of generation g.
local function invited(g)
  local out = {}
  local all = redis.call('HGETALL', k_claims)
  for i = 1, #all, 2 do
    if all[i + 1] == 'i:' .. g then
      out[#out + 1] = all[i]
    end
  end
  table.sort(out)
  return out
end

local function reply(code, reason, g, run, users)
  local out = {code, reason, g or '', run or '', t[1] or r[12] or '', t[5] or '', r[1] or ''}
  for _, u in ipairs(users or {}) do
    out[#out + 1] = u
  end
  return out
end

if step == 'initial' then
  if same_spell and r[2] then
    return reply(0, 'already', r[4], r[9], invited(r[4]))
  end
  if not t[1] then
    return reply(-1, 'unregistered')
  end
  if (tonumber(t[4]) or 0) > 0 then
    return reply(-1, 'reseeded')
  end
  local since, grace, state = last_action, tonumber(ARGV[7]), 'unseeded'
  if last_action == 0 then
    since, grace, state = tonumber(t[2]) or now, tonumber(ARGV[4]), 'never'
  end
  if not (now - since > grace) then
    return reply(-1, 'not due')
  end
  -- A row of an older spell (a reseed the announce path did not see
  -- clear it, or a claim window) is replaced: the process starts over
  -- from this notice. Rewards still to grant stay marked.
  local rewards = redis.call('HGET', k_reaper, 'rewards')
  local run = r[8] or ARGV[3]
  redis.call('DEL', k_reaper)
  redis.call('HSET', k_reaper, 'state', state, 'notify', 'initial', 'unseeded_date', ARGV[1],
    'initial_at', ARGV[1], 'since', string.format('%.0f', last_action), 'initial_run', run)
  if rewards then
    redis.call('HSET', k_reaper, 'rewards', rewards)
  end
  -- Snatchers are invited to reseed an upload that was seeded once (a
  -- never-seeded one has none), except the uploader and anyone invited
  -- or claimed before.
  local users = {}
  if state == 'unseeded' then
    for _, u in ipairs(redis.call('SMEMBERS', k_snatchers)) do
      if u ~= t[5] and redis.call('HSETNX', k_claims, u, 'i:' .. ARGV[1]) == 1 then
        users[#users + 1] = u
      end
    end
    table.sort(users)
  end
  r[1] = state
  return reply(1, 'initial', ARGV[1], run, users)
end

local same_row = r[1] and tonumber(gen) == epoch
if same_row and step == 'final' and (r[2] == 'final' or r[2] == 'removed') then
  return reply(0, 'already', gen, r[10])
end
if same_row and step == 'remove' and r[2] == 'removed' then
  return reply(0, 'already', gen, r[11])
end
if not t[1] then
  return reply(-1, 'unregistered')
end
if not same_row then
  return reply(-1, 'out of order')
end
if not same_spell or (tonumber(t[4]) or 0) > 0 then
  return reply(-1, 'reseeded')
end
local final_gap, removal_gap = tonumber(ARGV[8]), tonumber(ARGV[9])
if r[1] == 'never' then
  final_gap, removal_gap = tonumber(ARGV[5]), tonumber(ARGV[6])
end
local unseeded_date = tonumber(r[3]) or now
if step == 'final' then
  if r[2] ~= 'initial' then return reply(-1, 'out of order') end
  if not (now - unseeded_date > final_gap and now - (tonumber(r[4]) or now) > final_gap) then
    return reply(-1, 'not due')
  end
  redis.call('HSET', k_reaper, 'notify', 'final', 'final_at', ARGV[1], 'final_run', r[8] or ARGV[1])
  redis.call('HDEL', k_reaper, 'pending', 'pending_at')
  return reply(1, 'final', gen, r[8] or ARGV[1])
end
if step == 'remove' then
  if r[2] ~= 'final' then return reply(-1, 'out of order') end
  if not (now - unseeded_date > final_gap + removal_gap and now - (tonumber(r[5]) or now) > removal_gap) then
    return reply(-1, 'not due')
  end
  redis.call('HDEL', k_torrent, 'id')
  -- orphan cleanup's timestamp of interest (swarm.UnregisterTorrent sets it too)
  redis.call('HSET', k_torrent, 'unregistered', ARGV[1])
  redis.call('HSET', k_reaper, 'notify', 'removed', 'removed_at', ARGV[1], 'removed_run', r[8] or ARGV[1],
    'removed_id', t[1])
  redis.call('HDEL', k_reaper, 'pending', 'pending_at')
  return reply(1, 'removed', gen, r[8] or ARGV[1])
end
return redis.error_reply('reaper_step: unknown step ' .. tostring(step))
