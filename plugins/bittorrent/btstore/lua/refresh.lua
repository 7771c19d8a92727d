-- refresh.lua: the written-behind plain re-announces of one torrent, in
-- one call (package swarm's write-behind queue), and optionally a sample
-- of its swarm for the frontend's view of it. A plain re-announce has no
-- event, keeps its role, address and user, and its peer was in the swarm
-- when the frontend answered it; so it moves no peer between role hashes
-- and changes no count: it refreshes the peer's deadline and record, and applies its transfer and time to the user's record through
-- prelude's user_announce, as announce.lua would.
--
-- Each peer is rechecked here against its record, which announce.lua and
-- expire.lua keep in step with the role hashes (active, addr, left, user).
-- A peer no longer as the frontend saw it (it stopped or expired, changed
-- address or role elsewhere, another user took the id) is DROPPED: nothing
-- is written, the frontend forgets it, and the peer's next announce goes
-- through announce.lua, which rejoins it exactly. Applying announce.lua's
-- whole logic here instead would make this script as dear as the one it
-- replaces, for a case that is rare; the transfer is not lost, since the
-- next announce's counters are cumulative. A peer whose record already has
-- a newer (or the same) last_announce is STALE: a later announce was
-- applied, with counters that include this one's, so nothing is written.
--
-- Open mode (ARGV[4] "0": no users) passes only what it reads: the
-- KEYS, ARGV and torrent fields marked "private mode" are left off, as
-- announce.lua leaves them off, since each string costs Redis and Lua.
--
-- KEYS[1] torrent    HASH  announces, last_action, view_tag, view_s,
--                          view_l; read: id, snatches, seeders, leechers;
--                          private mode: credit_up, credit_down, size,
--                          leecher_left
-- KEYS[2] seeders    HASH  peer id -> entry (read: the view's sample)
-- KEYS[3] leechers   HASH  peer id -> entry (read: the view's sample)
-- KEYS[4] deadlines  ZSET  peer id .. user id -> deadline (ms)
-- KEYS[5] reaper     HASH  the unseeded reaper's state (a seeder ends it)
-- KEYS[6] claims     HASH  reseed claims (package reaper)
-- private mode: KEYS[7] users SET user ids with a record on the torrent,
-- KEYS[8] the torrent's feed rows key (btstore.FeedRowsKey), no longer
-- touched: since S5 (s43) the script returns the row (prelude's
-- user_feed) and writes none; the key keeps its place so the peers' keys
-- keep theirs
-- then per peer i (from 0) its record (HASH) and, in private mode, its
-- user's record (HASH): open mode KEYS[7+i], private KEYS[9+2i], KEYS[10+2i]
--
-- ARGV[1] peer timeout (ms): the most time one announce can credit
-- ARGV[2] the reaper's claim window (ms)
-- ARGV[3] view sample: how many entries of each role hash to return (0:
--         none)
-- ARGV[4] "1": private mode (the torrent must be registered; users)
-- private mode:
-- ARGV[5] hit-and-run minimum seed time (ms), 0: none
-- ARGV[6] hit-and-run minimum ratio, 0: none
-- ARGV[7] "1": accounting on (credit the transfer and number the record's
--         change for the feed, as announce.lua does: prelude's user_announce)
-- ARGV[8] the calling frontend's id: the records' writer stamp (prelude's
--         user_feed; unused from s40, when the ledger's and cheat signals'
--         settings left it, to s43); "": no stamp (a frontend with no
--         outbox, which no backstop would find)
-- ARGV[9] how many announces with transfer each user record's ledger
--         keeps, with accounting (prelude's user_ledger); 0: no ledger
-- then per peer i: peer id (20 bytes), compact address (the entry's
-- tail), uploaded, downloaded, left (as reported, decimal), the
-- announce's time (ms), its deadline (time + timeout, ms), and in private
-- mode its user id and the site-wide windows' upload and download rates
-- (percent) at the announce's time, so it is credited as when it was
-- answered: open mode ARGV[5+7i .. 11+7i], private ARGV[10+10i .. 19+10i]
--
-- Returns
--   {R.REFRESHED, seeders, leechers, snatches, torrent id, seeder entries,
--    leecher entries, [private mode: size, leecher_left,] then per peer:
--    status, and in private mode its credit reply (prelude's "The credit
--    reply", flat: bits, version, raw deltas, and with accounting a mask
--    and only the groups it names: credited extra, token, feed row with
--    gap, the row's extras, snatched; so its width varies, and the
--    frontend reads the peers one after another)}; open mode, which has
--    no user to credit, answers per peer its status alone (each element
--    is one more Redis converts out of Lua and the frontend reads)
--      seeders, leechers and snatches are the torrent record's (snatches
--      as the stored text, or 0); size and leecher_left too (as stored,
--      0 when absent: the ledger's and cheat signals' per-torrent
--      figures, once per call, not per peer); the entries are "" unless
--      ARGV[3] asked for them, concatenated as announce.lua returns
--      peers; status is R.REFRESHED, R.STALE or R.DROPPED; a peer not
--      credited (stale, dropped) has a credit reply of zeros (prelude's
--      credit_none: 4, with accounting 5 with the mask)
--   {R.UNREGISTERED}  private mode and the torrent is not registered:
--      nothing was written

local timeout_ms = tonumber(ARGV[1])
local sample = tonumber(ARGV[3])
local private = ARGV[4] == '1'
local k_torrent, k_seeders, k_leechers, k_deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local k_reaper, k_claims, k_users = KEYS[5], KEYS[6], KEYS[7]
-- where the peers start in KEYS and ARGV, and how many each peer has
local key0, arg0, key_step, arg_step = 7, 5, 1, 7
if private then key0, arg0, key_step, arg_step = 9, 10, 2, 10 end
local hnr_seed_ms, hnr_ratio = tonumber(ARGV[5]), tonumber(ARGV[6])
local accounting = private and ARGV[7] == '1'
-- The writer's stamp, nil for "" (once per call, not per peer).
local writer = ARGV[8] ~= '' and ARGV[8] or nil
local ledger = accounting and tonumber(ARGV[9]) or 0

-- The record's counts are the role hashes' lengths, written wherever a
-- peer joins or leaves (announce.lua, expire.lua); a refresh moves none.
-- The view's packed entries (view_s, view_l; see "The view" below) are
-- read only by a call that reads the view; every call reads their tag,
-- to keep it in step with the announces it counts. v0 is the tag's
-- place in t.
local t, v0
if private then
  v0 = 10
  if sample > 0 then
    t = redis.call('HMGET', k_torrent, 'id', 'snatches', 'seeders', 'leechers', 'announces',
      'credit_up', 'credit_down', 'size', 'leecher_left', 'view_tag', 'view_s', 'view_l')
  else
    t = redis.call('HMGET', k_torrent, 'id', 'snatches', 'seeders', 'leechers', 'announces',
      'credit_up', 'credit_down', 'size', 'leecher_left', 'view_tag')
  end
  if not t[1] then
    return {R.UNREGISTERED}
  end
else
  v0 = 6
  if sample > 0 then
    t = redis.call('HMGET', k_torrent, 'id', 'snatches', 'seeders', 'leechers', 'announces',
      'view_tag', 'view_s', 'view_l')
  else
    t = redis.call('HMGET', k_torrent, 'id', 'snatches', 'seeders', 'leechers', 'announces', 'view_tag')
  end
end
-- Each tonumber is a strtod: a field only passed back (snatches) goes
-- back as the stored text, and the left field is compared as text (it is
-- stored as the frontend formats it, "0" for a seeder).
local seeders, leechers = tonumber(t[3]) or 0, tonumber(t[4]) or 0

local out
if private then
  -- The reply's array part sized once for a call of one peer (9, its
  -- status and the longest credit reply, 18: swarm's creditMaxWidth):
  -- the nils make the constructor size it, and #out stays the count of
  -- values set. Grown from 7 a value at a time, Lua reallocated it three
  -- times per call with accounting (s48).
  out = {R.REFRESHED, seeders, leechers, t[2] or 0, t[1] or '', '', '', t[8] or 0, t[9] or 0,
    nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
else
  out = {R.REFRESHED, seeders, leechers, t[2] or 0, t[1] or '', '', ''}
end
local zadd = {}
local applied = 0
local latest, latest_text = 0, nil
local reseeders = {}
local peers = (#ARGV - arg0 + 1) / arg_step
for i = 0, peers - 1 do
  local a, k = arg0 + arg_step * i, key0 + key_step * i
  local peer_id, addr, user = ARGV[a], ARGV[a + 1], ''
  if private then user = ARGV[a + 7] end
  local left_text, at_text = ARGV[a + 4], ARGV[a + 5]
  local at = tonumber(at_text)
  local seeding = left_text == '0'
  local p = redis.call('HMGET', KEYS[k], 'user', 'uploaded', 'downloaded', 'last_announce',
    'active', 'left', 'addr', 'total_time')
  local last = tonumber(p[4])
  local status, d_up, d_down = R.DROPPED, 0, 0
  -- the peer's status goes first, its credit reply after it (prelude's
  -- user_announce appends it; credit_none when no user was credited)
  local n = #out + 1
  out[n] = status
  local credited = false
  if p[5] == '1' and p[1] == user and p[7] == addr and last and (p[6] == '0') == seeding then
    if last >= at then
      status = R.STALE
    else
      status = R.REFRESHED
      local elapsed = math.min(at - last, timeout_ms)
      -- A counter whose text is the record's moved nothing (an idle
      -- peer's upload, a seeder's download): no strtod for either.
      if ARGV[a + 2] ~= p[2] then d_up = math.max(0, tonumber(ARGV[a + 2]) - (tonumber(p[2]) or 0)) end
      if ARGV[a + 3] ~= p[3] then d_down = math.max(0, tonumber(ARGV[a + 3]) - (tonumber(p[3]) or 0)) end
      -- Only what changed is written (a seeder's left and downloaded
      -- rarely move, a leecher's uploaded often not). total_time goes as
      -- a Lua number (Redis formats it); the deltas as int's text, which
      -- the ledger's entry reuses (prelude's user_ledger), so each is
      -- converted once. A direction with no transfer (a seeder's
      -- download, an idle peer's upload) writes the constants int and
      -- string.format would make of it, with neither formatting anything.
      local t_up, t_down = '0', '0'
      local fields = {'last_announce', at_text, 'up_delta', '0', 'down_delta', '0',
        'total_time', whole((tonumber(p[8]) or 0) + elapsed), 'speed_up', '0.00', 'speed_down', '0.00'}
      if d_up ~= 0 then
        t_up = int(d_up)
        fields[4], fields[10] = t_up, string.format('%.2f', d_up * 1000 / elapsed)
      end
      if d_down ~= 0 then
        t_down = int(d_down)
        fields[6], fields[12] = t_down, string.format('%.2f', d_down * 1000 / elapsed)
      end
      if ARGV[a + 2] ~= p[2] then fields[#fields + 1], fields[#fields + 2] = 'uploaded', ARGV[a + 2] end
      if ARGV[a + 3] ~= p[3] then fields[#fields + 1], fields[#fields + 2] = 'downloaded', ARGV[a + 3] end
      if left_text ~= p[6] then fields[#fields + 1], fields[#fields + 2] = 'left', left_text end
      redis.call('HSET', KEYS[k], unpack(fields))
      zadd[#zadd + 1] = ARGV[a + 6]
      zadd[#zadd + 1] = peer_id .. user
      if user ~= '' then
        local rate_up, rate_down
        if accounting then rate_up, rate_down = credit_rates(t[6], t[7], ARGV[a + 8], ARGV[a + 9]) end
        user_announce(KEYS[k + 1], k_users, user, {d_up = d_up, d_down = d_down, elapsed = elapsed,
          was_seeder = seeding, was_active = true, leaving = false, seeding = seeding, snatched = 0, gap = at - last,
          prev = p[4], t_up = t_up, t_down = t_down},
          at, at_text, hnr_seed_ms, hnr_ratio, rate_up, rate_down, writer, ledger, out)
        credited = true
      end
      applied = applied + 1
      if at > latest then latest, latest_text = at, at_text end
      if seeding then reseeders[#reseeders + 1] = {user, at} end
    end
  end
  out[n] = status
  if private and not credited then credit_none(out, accounting, d_up, d_down) end
end

if applied > 0 then
  redis.call('ZADD', k_deadlines, unpack(zadd))
end

-- A seeder's announce ends the unseeded reaper's spell (announce.lua).
if #reseeders > 0 then
  for _, s in ipairs(reseeders) do
    local r = redis.call('HMGET', k_reaper, 'state', 'claim_until')
    if not (r[1] or r[2]) then break end
    reaper_reseed(k_torrent, k_reaper, k_claims, s[1], s[2], r[1], tonumber(r[2]), tonumber(ARGV[2]))
  end
end

-- The view: a sample of each role hash, entries concatenated. A role no
-- larger than the sample (by the record's count, which is the hash's
-- length) is read whole with HVALS: HRANDFIELD would return the whole
-- hash too, in the same order, but with every field name, each one more
-- string into Lua. The count is checked against what came back, so a
-- hash larger than its count still gives at most a sample.
--
-- A role read whole is kept packed in the torrent's record (view_s,
-- view_l: the string this call returns), so the next view read takes one
-- string where HVALS gave one per peer, each pushed into Lua, gathered and
-- concatenated again (about 43k instructions a read of ten peers). The
-- packed entries hold while view_tag equals "announces:seeders:leechers"
-- of the record: every call that changes a role hash changes one of those
-- (announce.lua counts an announce on every call that moves a peer,
-- expire.lua only removes peers and rewrites the counts), and announces
-- only grows, so a tag never comes back for another state. This script
-- changes no role hash, so it moves the tag along with the announces it
-- counts while it holds; a build that does not know the tag (an older
-- frontend beside this one) moves announces without it, which only makes
-- the next read whole again. A role sampled (larger than the sample), or
-- empty, is packed as "": it is read as before whenever it is asked for.
local tag = t[v0] and (t[5] or '0') .. ':' .. (t[3] or '0') .. ':' .. (t[4] or '0')
local packed_held = tag and t[v0] == tag
local repack = false
if sample > 0 then
  for j, key in ipairs({k_seeders, k_leechers}) do
    local count = out[1 + j]
    if count > 0 and count <= sample then
      local packed = packed_held and t[v0 + j]
      if not packed or packed == '' then
        local entries = redis.call('HVALS', key)
        if #entries > sample then entries = {unpack(entries, 1, sample)} end
        packed = table.concat(entries)
        repack = true
      end
      out[5 + j] = packed
    elseif count > 0 then
      local picked = redis.call('HRANDFIELD', key, sample, 'WITHVALUES')
      local entries = {}
      for x = 2, #picked, 2 do entries[#entries + 1] = picked[x] end
      out[5 + j] = table.concat(entries)
    end
  end
end

-- The torrent's record: the announces applied, and the packed view's tag
-- moved along with them (or the view just read, packed).
local fields = {}
if applied > 0 then
  local announces = (tonumber(t[5]) or 0) + applied
  fields[1], fields[2] = 'announces', whole(announces)
  -- last_action moves while the torrent has seeders, as in announce.lua.
  if seeders > 0 then
    fields[3], fields[4] = 'last_action', latest_text
  end
  if packed_held or repack then tag = announces .. ':' .. (t[3] or '0') .. ':' .. (t[4] or '0') end
elseif repack and not tag then
  tag = (t[5] or '0') .. ':' .. (t[3] or '0') .. ':' .. (t[4] or '0')
end
if repack then
  local n = #fields
  -- a sampled role's entries are a sample, not the role: packed as ""
  local s, l = out[6], out[7]
  if seeders > sample then s = '' end
  if leechers > sample then l = '' end
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'view_tag', tag, 'view_s', s
  fields[n + 5], fields[n + 6] = 'view_l', l
elseif packed_held and applied > 0 then
  fields[#fields + 1] = 'view_tag'
  fields[#fields + 1] = tag
end
if #fields > 0 then
  redis.call('HSET', k_torrent, unpack(fields))
end
return out
