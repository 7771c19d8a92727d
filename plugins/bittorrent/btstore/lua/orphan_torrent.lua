-- orphan_torrent.lua: orphan cleanup of one torrent's records (package
-- orphans), check and delete in one step (fed_record.lua is prepended). A torrent is gone when nothing
-- can reach it: it has no registered id, its swarm is empty, and its
-- record is absent or older than the protection window (in open mode a
-- record whose retention TTL runs is kept: it expires by itself). Only
-- then are its records deleted, each also older than the window by its
-- own timestamp of interest. Since every key here shares the torrent's
-- hash tag, an announce or a registration either ran before (and the
-- torrent is not gone) or runs after (and finds nothing: a fresh torrent).
--
-- KEYS[1] torrent   HASH  id, registered, unregistered, created, last_action
-- KEYS[2] seeders   HASH
-- KEYS[3] leechers  HASH
-- KEYS[4] users     SET   user ids with a record on the torrent
-- KEYS[5] reaper    HASH  the reaper's state
-- KEYS[6] seen      ZSET  scoring's IP -> last seen (ms)
-- KEYS[7] snatchers SET   users who snatched it (the reaper's invitations)
-- KEYS[8] claims    HASH  the reaper's reseed invitations and claims
-- KEYS[9] score     HASH  scoring's record: state, removed_at, applied_at,
--                         rev, tracked_at (score_apply.lua, score_track.lua)
-- KEYS[10] history  LIST  scoring's last rounds
-- KEYS[11] trackers HASH  external tracker URL -> max peers
-- KEYS[12] trackers_at STRING when KEYS[11] was written (ms)
-- KEYS[13..] records of the torrent, each of the kind ARGV[i-7] names
--
-- ARGV[1] now (ms)
-- ARGV[2] protection window (ms)
-- ARGV[3] "1": private mode
-- ARGV[4] "1": an open-mode record without a TTL is kept for ever
--         (OpenTorrentRetention < 0)
-- ARGV[5] "1": finish: when no user of KEYS[4] is left, delete the torrent
--         record, its reaper state, seen set, snatchers, claims and users
--         set too
-- ARGV[6..] the kind of KEYS[13..]: "user" (a user-torrent record; its id
--         is removed from KEYS[4]; while the torrent record exists only a
--         finishing call deletes these), "peer", "timeout", "reaper", "seen",
--         "snatchers", "claims" (these two too only finishing, or with the
--         record gone), "source_seen" (an external tracker's seen set,
--         score:seen:<id>), "pending" (a worker's staged IPs,
--         score:pending:<id>), "ipm" (unique-IP metrics of the torrent:
--         ipm:n, ipm:n:<month> counters and ipm:m:<ip> markers; they go
--         with the torrent, page by page like peer records), "feed_rows"
--         (the feed's rows: only finishing, or with the record gone)
--
-- Scoring's keys of a gone torrent (KEYS[9..12] and the source_seen and
-- pending ones) go in any call but a finishing one, record here or not:
-- no announce reads them. The score record goes when it is not "active" (a tombstone:
-- scoring decays an active one to removal itself) and its newest stamp
-- is older than the window; the history, source_seen and pending keys go
-- with it, or when there is no record; the trackers list by its own stamp
-- (a list set for a torrent about to be registered stays the window).
--
-- Returns {gone, users, peers, timeouts, reapers, seens, torrents, left, scores, ipms,
--   then per user record deleted with a numbered change (seq > 0): its
--   index in KEYS and {w, last_announce, seq, uploaded, downloaded,
--   up_extra, down_extra, seed_ms, leech_ms, snatched} as stored ("" or
--   "0" when absent), as torrent_remove.lua returns them, so the caller
--   delivers the rows a writer killed with them only in its memory would
--   lose (the lead's decision 5, s43)}
--   (reapers counts the reaper's state, snatchers and claims)
--   gone 0: the torrent is live (or too recent), nothing was deleted;
--   then how many records of each kind were deleted (torrents is 1 when
--   the record itself went), left: users still in KEYS[4], scores:
--   scoring's keys deleted, and ipms: unique-IP metric keys deleted

local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local private, keep_open = ARGV[3] == '1', ARGV[4] == '1'

-- stale: a timestamp of interest (ms) older than the window; strictly, so
-- a record touched exactly at the cutoff stays.
local function stale(ms)
  return now - ms > window
end

local function newest(values)
  local m = 0
  for _, v in ipairs(values) do
    local n = tonumber(v)
    if n and n > m then m = n end
  end
  return m
end

if redis.call('HLEN', KEYS[2]) + redis.call('HLEN', KEYS[3]) > 0 then
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end
local t = redis.call('HMGET', KEYS[1], 'id', 'registered', 'unregistered', 'created', 'last_action')
if t[1] then
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if not private and (keep_open or redis.call('PTTL', KEYS[1]) > 0) then
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  end
  if not stale(newest({t[2], t[3], t[4], t[5]})) then
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  end
end

-- While the record is here, its user records go only with it (finish),
-- so no announce ever sees a torrent with half of its users' records.
local record_here = redis.call('EXISTS', KEYS[1]) == 1
local out = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
-- the deleted user records with a numbered change: index, fields
local fed = {}

-- Scoring's keys: a tombstone older than the window takes the rest with
-- it; with no record at all the rest is left over already. A finishing
-- call skips them: the walk's first call for the torrent in the same page
-- (with the page's source_seen and pending keys) has just done this.
local score_gone = ARGV[5] ~= '1'
if score_gone and redis.call('EXISTS', KEYS[9]) == 1 then
  local sc = redis.call('HMGET', KEYS[9], 'state', 'removed_at', 'applied_at', 'rev', 'tracked_at')
  score_gone = sc[1] ~= 'active' and stale(newest({sc[2], sc[3], sc[4], sc[5]}))
  if score_gone then out[9] = out[9] + redis.call('DEL', KEYS[9]) end
end
if score_gone then
  out[9] = out[9] + redis.call('DEL', KEYS[10])
  -- a list without a stamp was written before stamps existed: old
  if stale(tonumber(redis.call('GET', KEYS[12])) or 0) then
    out[9] = out[9] + redis.call('DEL', KEYS[11], KEYS[12])
  end
end

for i = 13, #KEYS do
  local key, kind = KEYS[i], ARGV[i - 7]
  local delete = false
  if (kind == 'user' or kind == 'snatchers' or kind == 'claims' or kind == 'feed_rows') and record_here and ARGV[5] ~= '1' then
    -- deferred to the call that finishes the torrent
  elseif kind == 'user' then
    -- seq too: the feed's figures are read again only for a record with
    -- a numbered change (accounting on), not on every delete
    local u = redis.call('HMGET', key, 'peers', 'last_announce', 'first_announce', 'seq')
    delete = (tonumber(u[1]) or 0) == 0 and stale(newest({u[2], u[3]}))
    if delete or redis.call('EXISTS', key) == 0 then
      -- the id after "...:user:" names the user
      local user = string.match(key, ':user:(.*)$')
      if user then redis.call('SREM', KEYS[4], user) end
    end
    if delete then
      local f = (tonumber(u[4]) or 0) > 0 and fed_record(key)
      if f then fed[#fed + 1], fed[#fed + 2] = i, f end
      out[2] = out[2] + redis.call('DEL', key)
    end
  elseif kind == 'peer' then
    -- its retention TTL (accounting) outlives a gone torrent for nothing
    local p = redis.call('HMGET', key, 'last_announce', 'first_announce')
    if stale(newest({p[1], p[2]})) then out[3] = out[3] + redis.call('DEL', key) end
  elseif kind == 'timeout' then
    -- a timeout key without a TTL is stray (the swarm is empty)
    if redis.call('PTTL', key) == -1 then out[4] = out[4] + redis.call('DEL', key) end
  elseif kind == 'reaper' then
    local r = redis.call('HMGET', key, 'unseeded_date', 'initial_at', 'final_at', 'removed_at', 'pending_at')
    if stale(newest(r)) then out[5] = out[5] + redis.call('DEL', key) end
  elseif kind == 'snatchers' or kind == 'claims' then
    out[5] = out[5] + redis.call('DEL', key)
  elseif kind == 'feed_rows' then
    -- the feed's rows of records that go with the torrent (not counted)
    redis.call('DEL', key)
  elseif kind == 'source_seen' then
    -- by its newest IP, like the own swarm's seen set
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if score_gone and (#last < 2 or stale(tonumber(last[2]))) then out[9] = out[9] + redis.call('DEL', key) end
  elseif kind == 'pending' then
    -- staged by a worker for a round of the (gone) record: no stamp of
    -- its own, it goes with the record
    if score_gone then out[9] = out[9] + redis.call('DEL', key) end
  elseif kind == 'ipm' then
    -- counters have no stamp of their own and markers only collect by a
    -- 30-day TTL: they are the gone torrent's, and go with it
    out[10] = out[10] + redis.call('DEL', key)
  elseif kind == 'seen' then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #last < 2 or stale(tonumber(last[2])) then out[6] = out[6] + redis.call('DEL', key) end
  end
end

local left = redis.call('SCARD', KEYS[4])
if ARGV[5] == '1' and left == 0 then
  out[7] = redis.call('DEL', KEYS[1])
  out[5] = out[5] + redis.call('DEL', KEYS[5])
  out[6] = out[6] + redis.call('DEL', KEYS[6])
  out[5] = out[5] + redis.call('DEL', KEYS[7], KEYS[8])
  redis.call('DEL', KEYS[4])
end
out[8] = left
for j = 1, #fed do out[10 + j] = fed[j] end
return out
