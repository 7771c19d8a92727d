-- announce.lua: one announce, atomically: checks the torrent is registered
-- (private mode), writes the peer into its role hash and deadline index
-- (the sweep expires it from there), updates the peer record, the user-torrent record and the
-- torrent's counters, and picks random peers for the reply. Everything a
-- listener needs comes back in this one round trip.
--
-- KEYS[1] torrent    HASH  id, created, last_action, announces, seeders,
--                          leechers, snatches, credit_up, credit_down (the
--                          site's multipliers for it, percent), size (the
--                          site's, bytes), leecher_left (ms: when a
--                          leecher last left; prelude's torrent_counts)
-- KEYS[2] seeders    HASH  peer id (20 bytes) -> peer entry (see ARGV[3])
-- KEYS[3] leechers   HASH  peer id (20 bytes) -> peer entry
-- KEYS[4] deadlines  ZSET  peer id .. user id -> deadline (ms)
-- KEYS[5] peer       HASH  this peer's record
-- KEYS[6] reaper     HASH  the torrent's unseeded-reaper state (package
--                          reaper); a seeder's announce ends the spell
-- KEYS[7] claims     HASH  reseed invitations and claims (package reaper),
--                          touched only when the reaper state exists
-- KEYS[8] owners     HASH  open mode: owner (see peer_owner) -> the
--                          owner's peers in the swarm, for ARGV[19]
-- Open mode (no user, ARGV[10] "", and ARGV[9] "0") passes only
-- KEYS[1..8]: the rest are read or written for a user only.
-- KEYS[9] user       HASH  this user's record on the torrent
-- KEYS[10] snatchers SET   users who snatched the torrent (private mode)
-- KEYS[11] users     SET   user ids with a record on the torrent (KEYS[9]
--                          of each), added when the record is created, so
--                          orphan cleanup can delete a removed torrent's
--                          records together with it
-- KEYS[12] deleted   STRING the site's reason for removing the torrent,
--                          read only when refusing an unregistered one
--                          (private mode)
--
-- ARGV[1]  now (ms)
-- ARGV[2]  peer id (20 bytes)
-- ARGV[3]  peer entry: one byte N (6 or 18), the peer id, then the N-byte
--          compact address (4 or 16 address bytes, 2 port bytes). Entries
--          are stored ready to send, so picking peers is a concatenation.
-- ARGV[4]  uploaded (bytes, as reported)
-- ARGV[5]  downloaded (bytes, as reported)
-- ARGV[6]  left (bytes)
-- ARGV[7]  event: 0 none, 1 completed, 2 started, 3 stopped
-- ARGV[8]  numwant (>= 0, already capped)
-- ARGV[9]  "1": the torrent must be registered (private mode)
-- ARGV[10] user id, "" in open mode
-- ARGV[11] peer timeout (ms)
-- ARGV[12] peer record retention (ms) once the peer left
-- ARGV[13] open-mode torrent retention (ms) once its swarm is empty; 0 keeps it
-- ARGV[14] hit-and-run minimum seed time (ms), 0: none
-- ARGV[15] hit-and-run minimum ratio, 0: none
-- ARGV[16] the peer's new deadline: now + timeout (ms)
-- ARGV[17] "6": pick only IPv4 peers, "18": only IPv6 peers (a UDP reply
--          carries its socket's family only), "0": either
-- ARGV[18] the reaper's claim window (ms): after the first reseed by
--          someone other than the uploader, others who start seeding
--          within it also win the claim
-- ARGV[19] how many peers one owner may have in the swarm: a user (its
--          record's peers) in private mode, an address in open mode
--          (KEYS[11]); 0: no limit. Checked only when a peer joins, so a
--          peer already in the swarm is never refused by it.
-- ARGV[20] flood control: the least time (ms) between two announces of
--          one peer without an event; 0: off. Checked against the peer
--          record's last_announce (the last accepted announce), so it
--          costs nothing but a comparison; an announce with an event
--          (started, stopped, completed) is never refused by it.
-- ARGV[21] the window (ms) in which the peer record's floods field
--          counts a peer's refusals
-- ARGV[22] how many refusals in one window make the peer a repeat
--          offender, reported once per window (0: never reported)
-- ARGV[23] the time (ms) of the peer's last announce the calling frontend
--          accepted, 0 when none: plain re-announces are written behind
--          (refresh.lua), so the record's last_announce may lag it; flood
--          control counts from the later of the two
-- Open mode passes only ARGV[1..23]: the rest are read for a user only.
-- ARGV[24] "1": accounting on (credit the transfer, prelude's user_credit,
--          and number the record's change for the feed, user_feed)
-- ARGV[25] the site-wide windows' upload rate now (percent; 100: none open)
-- ARGV[26] the site-wide windows' download rate now (percent; 100: none open)
-- ARGV[27] the calling frontend's id, with accounting only: the record's
--          writer stamp when the announce changes its fed figures
--          (prelude's user_feed); "": no stamp (a frontend with no outbox)
-- ARGV[28] how many announces with transfer each user record's ledger
--          keeps, with accounting (prelude's user_ledger); 0: no ledger
--
-- Returns
--   {1, seeders, leechers, snatches, born, d_seeders, d_leechers, snatched,
--    torrent id, peers, size, leecher_left, then the credit reply}
--      born: 1 when the swarm had no peer before this announce (the caller
--      then indexes it for the expiry sweep); snatched: 1 when this
--      announce counted a snatch; torrent id "" when not registered;
--      peers: the chosen peers' entries concatenated into one string, so
--      the reply is one bulk string, not one per peer; size and
--      leecher_left: the torrent record's as stored (0 when absent; the
--      ledger's and cheat signals' per-torrent figures); the credit
--      reply: prelude's ("The credit reply"), flat: user bits (0 when
--      the user's state did not change, see user_write), user version,
--      d_uploaded/d_downloaded (what this peer transferred since its
--      previous announce); that is all with accounting off (open mode
--      too); with accounting on (ARGV[24] "1") then a mask and only the
--      groups it names: the credited extra, the token event and its first
--      use, the record's feed row (user_feed: the frontend holds it for
--      its feed round) with the gap since the peer's previous announce,
--      the row's cumulative extras, its snatched
--  {R.UNREGISTERED [, reason]}  the torrent is not registered (private
--      mode); reason: KEYS[12], the site's reason while it lasts
--  {R.PEER_TAKEN}  the peer id is active in this swarm under another user
--  {R.PEER_LIMIT}  the peer would join, and its owner has ARGV[19] peers
--  {R.FLOOD, refusals, report, since, torrent id}  the peer announced
--      again within ARGV[20]: nothing but the peer record's floods and
--      flood_since fields changed; refusals: this window's count; report:
--      1 when this refusal reached ARGV[22] (once per window); since: the
--      window's start (ms)
--
-- Note: a seeder gets only leechers; a leecher gets seeders first, then
-- other leechers. Peers are picked with HRANDFIELD, so an announce costs
-- O(numwant), never O(swarm). The requester is never among them. Numbers
-- that arrive as decimal text are stored as they came, because formatting
-- numbers is one of the dearer things a script does.

local now = tonumber(ARGV[1])
local peer_id = ARGV[2]
local entry = ARGV[3]
local uploaded = tonumber(ARGV[4])
local downloaded = tonumber(ARGV[5])
local left = tonumber(ARGV[6])
local event = ARGV[7]
local numwant = tonumber(ARGV[8])
local user = ARGV[10]
local timeout_ms = tonumber(ARGV[11])
local hnr_seed_ms = tonumber(ARGV[14])
local hnr_ratio = tonumber(ARGV[15])
local only_len = tonumber(ARGV[17])
if only_len == 0 then only_len = nil end

local k_torrent, k_seeders, k_leechers, k_deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local k_peer, k_reaper, k_claims, k_owners = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local k_user, k_snatchers, k_users = KEYS[9], KEYS[10], KEYS[11]
local max_owned = tonumber(ARGV[19])

-- Fields 6-9 matter for a user's record only: an open-mode announce
-- does not read them.
local t
if user ~= '' then
  t = redis.call('HMGET', k_torrent, 'id', 'created', 'announces', 'snatches', 'registered',
    'credit_up', 'credit_down', 'size', 'leecher_left')
else
  t = redis.call('HMGET', k_torrent, 'id', 'created', 'announces', 'snatches', 'registered')
end
if ARGV[9] == '1' and not t[1] then
  local reason = redis.call('GET', KEYS[12])
  if reason then return {R.UNREGISTERED, reason} end
  return {R.UNREGISTERED}
end
local torrent_id = t[1] or ''

local p = redis.call('HMGET', k_peer, 'user', 'uploaded', 'downloaded', 'last_announce',
  'completed', 'total_time', 'addr', 'active', 'left')
local known = p[1] ~= false
if known and p[1] ~= user then
  if redis.call('HEXISTS', k_seeders, peer_id) == 1 or redis.call('HEXISTS', k_leechers, peer_id) == 1 then
    return {R.PEER_TAKEN}
  end
  -- An old, inactive record of another user's session: start afresh.
  redis.call('DEL', k_peer)
  p = {}
  known = false
end
-- An inactive record older than the torrent itself (its record is new, or
-- it was registered since the peer left) is from a torrent that was
-- removed: orphan cleanup deletes a torrent's record and user records in
-- one step but its peer records (which expire by themselves) page by
-- page, so the peer starts afresh, as on a fresh torrent.
if known and p[8] ~= '1' and (not t[2] or (tonumber(t[5]) or 0) > (tonumber(p[4]) or 0)) then
  redis.call('DEL', k_peer)
  p = {}
  known = false
end

local member = peer_id .. user
local addr = string.sub(entry, 22) -- the compact address
local leaving = event == '3'
local seeding = left == 0

-- Flood control: a peer in the swarm announcing again, without an event,
-- sooner than ARGV[20] after its last accepted announce is refused. Only
-- the refusal pays for the count (one HMGET, one HSET on the record).
local flood_ms = tonumber(ARGV[20])
if flood_ms > 0 and event == '0' and known and p[8] == '1'
  and now - math.max(tonumber(p[4]) or 0, tonumber(ARGV[23])) < flood_ms then
  local f = redis.call('HMGET', k_peer, 'floods', 'flood_since')
  local count, since = tonumber(f[1]) or 0, tonumber(f[2]) or 0
  if now - since >= tonumber(ARGV[21]) then
    count, since = 0, now
  end
  count = count + 1
  redis.call('HSET', k_peer, 'floods', count, 'flood_since', int(since))
  local threshold = tonumber(ARGV[22])
  local report = 0
  if threshold > 0 and count == threshold then report = 1 end
  return {R.FLOOD, count, report, int(since), torrent_id}
end

-- The per-owner bound, checked where a peer joins the swarm and before
-- anything is written (the deletions above only drop dead records). A
-- peer whose record says it is in the swarm is not joining.
if max_owned > 0 and not leaving and not (known and p[8] == '1') then
  local owned
  if user ~= '' then
    owned = tonumber(redis.call('HGET', k_user, 'peers'))
  else
    local owner = peer_owner(addr)
    owned = owner and tonumber(redis.call('HGET', k_owners, owner))
  end
  if (owned or 0) >= max_owned then
    return {R.PEER_LIMIT}
  end
end

-- Move the peer to its role (or out); the replies say where it was. An
-- active peer's record says which role hash holds it (its last left), so
-- a peer that keeps its role skips the other hash.
local was_seeder, was_leecher = false, false
if leaving then
  local was = peer_leave(k_seeders, k_leechers, k_deadlines, peer_id, member)
  was_seeder, was_leecher = was == 1, was == 0
else
  local same_role = known and p[8] == '1' and (tonumber(p[9]) == 0) == seeding
  if seeding then
    if not same_role then was_leecher = redis.call('HDEL', k_leechers, peer_id) == 1 end
    was_seeder = redis.call('HSET', k_seeders, peer_id, entry) == 0
  else
    if not same_role then was_seeder = redis.call('HDEL', k_seeders, peer_id) == 1 end
    was_leecher = redis.call('HSET', k_leechers, peer_id, entry) == 0
  end
  redis.call('ZADD', k_deadlines, ARGV[16], member)
end
local was_active = was_seeder or was_leecher

-- Open mode counts each address's peers in the swarm: a peer joining or
-- leaving moves its owner's count, and one that changed address moves
-- from the old owner (its record's addr, what was counted) to the new.
if user == '' then
  local old = was_active and p[7] and peer_owner(p[7])
  local new = not leaving and peer_owner(addr)
  if old ~= new then
    if old then owner_drop(k_owners, old) end
    if new then redis.call('HINCRBY', k_owners, new, 1) end
  end
end

-- What happened since the previous announce. Time counts only while the
-- peer was in the swarm, and never more than one timeout. A started event
-- opens a new session whose counters begin at the values it reports;
-- counters that went backwards (a client restart) count as nothing.
local elapsed = 0
if was_active then
  elapsed = math.min(math.max(0, now - (tonumber(p[4]) or now)), timeout_ms)
end
local d_up, d_down = 0, 0
if known and event ~= '2' then
  d_up = math.max(0, uploaded - (tonumber(p[2]) or 0))
  d_down = math.max(0, downloaded - (tonumber(p[3]) or 0))
end
-- A snatch: a completed event, or a peer whose left went from above 0
-- to 0 (a client that finishes and stops at once, as aria2c does, sends
-- "stopped, left=0" and never "completed"). It counts once per peer and,
-- in private mode, once per user and torrent (the user record's snatched
-- stamp), because the reaper invites snatchers and they must be real.
local snatched = 0
local finished = event == '1' or (known and (tonumber(p[9]) or 0) > 0 and left == 0)
if finished and not (known and p[5] == '1') then
  snatched = 1
  if user ~= '' and (tonumber(redis.call('HGET', k_user, 'snatched')) or 0) > 0 then
    snatched = 0
  end
end

-- The peer record. A stopped event from a peer never seen leaves none.
-- t_up and t_down are its deltas' text, which the ledger's entry reuses
-- (prelude's user_ledger).
local t_up, t_down = '0', '0'
if known or not leaving then
  local active = '1'
  if leaving then active = '0' end
  t_up, t_down = int(d_up), int(d_down)
  local fields = {'uploaded', ARGV[4], 'downloaded', ARGV[5], 'left', ARGV[6],
    'last_announce', ARGV[1], 'active', active, 'up_delta', t_up, 'down_delta', t_down}
  if not known then
    local n = #fields
    fields[n + 1], fields[n + 2] = 'user', user
    fields[n + 3], fields[n + 4] = 'first_announce', ARGV[1]
    fields[n + 5], fields[n + 6] = 'total_time', '0'
  end
  if addr ~= p[7] or not known then
    fields[#fields + 1] = 'addr'
    fields[#fields + 1] = addr
  end
  if elapsed > 0 then
    local n = #fields
    fields[n + 1], fields[n + 2] = 'total_time', int((tonumber(p[6]) or 0) + elapsed)
    fields[n + 3], fields[n + 4] = 'speed_up', string.format('%.2f', d_up * 1000 / elapsed)
    fields[n + 5], fields[n + 6] = 'speed_down', string.format('%.2f', d_down * 1000 / elapsed)
  end
  if finished then
    fields[#fields + 1] = 'completed'
    fields[#fields + 1] = '1'
  end
  redis.call('HSET', k_peer, unpack(fields))
  -- A record lives while its peer does (expire.lua removes every peer in
  -- the end), then PeerRetention longer.
  if leaving then
    redis.call('PEXPIRE', k_peer, ARGV[12])
  elseif known and p[8] ~= '1' then
    redis.call('PERSIST', k_peer)
  end
end

-- Up to n random peers of one role hash, skipping the requester. When one
-- family is wanted, twice as many are sampled (still O(numwant)), so a
-- family that is a minority in the swarm is not crowded out by the other.
-- Returns how many it picked, and the hash's size when the sample was the
-- whole hash (HRANDFIELD returns min(count, size) distinct fields), else
-- nil. The peers are picked here, once the role hashes are as this
-- announce leaves them: nothing below changes them.
local packed = {}
local function pick(key, n, skip)
  local want = n
  if only_len then want = 2 * n end
  if skip then want = want + 1 end
  local picked = redis.call('HRANDFIELD', key, want, 'WITHVALUES')
  local got = 0
  for i = 1, #picked, 2 do
    if got >= n then break end
    if picked[i] ~= skip and (not only_len or string.byte(picked[i + 1], 1) == only_len) then
      got = got + 1
      packed[#packed + 1] = picked[i + 1]
    end
  end
  local size = #picked / 2
  if size < want then return got, size end
  return got, nil
end

-- The swarm's counts after this announce (the user's record changes no
-- role hash): a role whose sample was the whole hash has its size
-- already, which most swarms, smaller than numwant, give for free; HLEN
-- counts the others.
local seeders, leechers, _
if not leaving and numwant > 0 then
  if seeding then
    _, leechers = pick(k_leechers, numwant, nil)
  else
    local got
    got, seeders = pick(k_seeders, numwant, nil)
    if got < numwant then
      _, leechers = pick(k_leechers, numwant - got, peer_id)
    end
  end
end
seeders = seeders or redis.call('HLEN', k_seeders)
leechers = leechers or redis.call('HLEN', k_leechers)

-- The user's record on this torrent (prelude's user_announce), whose
-- credit reply ends the reply: out's header is filled in at the end.
local accounting = ARGV[24] == '1'
-- Sized once for the longest credit reply (18 values: swarm's
-- creditMaxWidth): the nils make the constructor size its array part,
-- and #out stays the count of values set; grown a value at a time it was
-- reallocated twice with accounting (s48, as refresh.lua's reply).
local out = {1, 0, 0, 0, 0, 0, 0, 0, '', '', t[8] or 0, t[9] or 0,
  nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
if user ~= '' and (known or not leaving) then
  local rate_up, rate_down
  if accounting then rate_up, rate_down = credit_rates(t[6], t[7], ARGV[25], ARGV[26]) end
  local gap, prev = 0, ''
  if known and p[4] then gap, prev = math.max(0, now - tonumber(p[4])), p[4] end
  user_announce(k_user, k_users, user, {d_up = d_up, d_down = d_down, elapsed = elapsed, was_seeder = was_seeder,
    was_active = was_active, leaving = leaving, seeding = seeding, snatched = snatched, gap = gap, prev = prev,
    t_up = t_up, t_down = t_down},
    now, ARGV[1], hnr_seed_ms, hnr_ratio, rate_up, rate_down, ARGV[27] ~= '' and ARGV[27] or nil,
    accounting and tonumber(ARGV[28]) or 0, out)
else
  credit_none(out, accounting, d_up, d_down)
end

if snatched == 1 and user ~= '' then
  redis.call('SADD', k_snatchers, user)
end

-- A reseed ends the reaper's spell at once: the torrent is seeded, so no
-- notice or removal of it may follow (the steps already queued find the
-- row gone or last_action moved and do nothing). The hot path pays one
-- HMGET; the claim keys are touched only when a row exists.
if seeding and not leaving then
  local r = redis.call('HMGET', k_reaper, 'state', 'claim_until')
  if r[1] or r[2] then
    reaper_reseed(k_torrent, k_reaper, k_claims, user, now, r[1], tonumber(r[2]), tonumber(ARGV[18]))
  end
end

-- The torrent's counters.
-- An empty swarm has no owners: whatever count is left is a stray one.
if user == '' and leaving and seeders + leechers == 0 then
  redis.call('DEL', k_owners)
end
local d_seeders, d_leechers = 0, 0
if was_seeder then d_seeders = -1 end
if was_leecher then d_leechers = -1 end
if not leaving then
  if seeding then d_seeders = d_seeders + 1 else d_leechers = d_leechers + 1 end
end
local was_empty = seeders + leechers - d_seeders - d_leechers == 0
local snatches = (tonumber(t[4]) or 0) + snatched
local fields = {'announces', int((tonumber(t[3]) or 0) + 1)}
if snatched == 1 then
  fields[3], fields[4] = 'snatches', int(snatches)
end
if not t[2] then
  fields[#fields + 1] = 'created'
  fields[#fields + 1] = ARGV[1]
end
torrent_counts(fields, seeders, leechers, ARGV[1], leaving and was_seeder, was_leecher and (leaving or seeding))
redis.call('HSET', k_torrent, unpack(fields))
local born = 0
if was_empty and seeders + leechers > 0 then born = 1 end
torrent_retention(k_torrent, t[1] ~= false, seeders + leechers == 0, born == 1, tonumber(ARGV[13]))

-- Whole numbers go back as integer replies (prelude's whole), which cost
-- no string.format; one past 2^53 goes back as text, as before, since
-- Redis would wrap it converting it to an integer.
out[2], out[3], out[4], out[5], out[6], out[7], out[8] = seeders, leechers, snatches, born, d_seeders, d_leechers,
  snatched
out[9], out[10] = torrent_id, table.concat(packed)
return out
