-- prelude.lua: helpers prepended to the BitTorrent scripts that use them
-- (announce.lua, expire.lua, refresh.lua; swarm/scripts.go), so the rules
-- they share (leaving a swarm, the torrent's counters, a user's state on a
-- torrent) live in one place. It defines functions only; it reads no KEYS or ARGV
-- and returns nothing.
--
-- Performance note: every redis.call costs about a microsecond, so the
-- hot path reads each record with one HMGET and writes it with one HSET.

-- Integral numbers as text without Lua 5.1's exponent formatting. '%d'
-- (a C long here) for a whole number below 2^53, which a double holds
-- exactly: it costs about half of '%.0f' (by callgrind, 2.4k against 5.0k
-- instructions for a 12-digit number), and every announce formats several.
-- Anything else (a fraction, 2^53 and above: counters a client reports
-- may reach 2^64) keeps '%.0f', and so does everything where Lua's '%d'
-- is narrower than 53 bits (a C long of 32 bits), checked the first time
-- int runs (the library's state lives on between calls).
local wide_d
local function int(n)
  if wide_d == nil then wide_d = string.format('%d', 2 ^ 52) == '4503599627370496' end
  if wide_d and n % 1 == 0 and n < 9007199254740992 and n > -9007199254740992 then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

-- A whole number as a Lua number for redis.call's arguments or a reply
-- (Redis formats an argument with %.17g, exact within 2^53 either side
-- of 0, and Lua interns no string), as text from int beyond: a client may
-- report counters up to 2^64, and a record's up_extra or down_extra may
-- be as far below 0. On Redis 7.0 a number costs about what int's text
-- does (%.17g against string.format and an interned string: within 0.1k
-- instructions a figure, s49), so callers holding no text use this.
local function whole(n)
  if n < 9007199254740992 and n > -9007199254740992 then return n end
  return int(n)
end

-- peer_leave takes one peer out of its swarm: the role hashes (whose
-- lengths are the seeder and leecher counts) and the deadline index. A
-- timeout key an older build wrote for it is left to its own TTL: its
-- expiry event finds no deadline and removes nothing. Its record stays (marked inactive by the caller) until its
-- own TTL, for accounting. Returns 1 when the peer was a seeder, 0 a
-- leecher, -1 when it was not in the swarm.
local function peer_leave(k_seeders, k_leechers, k_deadlines, peer_id, member)
  local was = -1
  if redis.call('HDEL', k_seeders, peer_id) == 1 then was = 1 end
  if redis.call('HDEL', k_leechers, peer_id) == 1 and was < 0 then was = 0 end
  redis.call('ZREM', k_deadlines, member)
  return was
end

-- peer_owner is who an open-mode peer counts against for the per-owner
-- bound: its address's bytes from a compact address (4 address bytes and
-- a port, or 16 and a port), an IPv6 address cut to its /64 (one
-- subscriber's network). Returns false for anything else.
local function peer_owner(addr)
  if not addr then return false end
  if #addr == 6 then return string.sub(addr, 1, 4) end
  if #addr == 18 then return string.sub(addr, 1, 8) end
  return false
end

-- owner_drop takes one peer off an owner's count, deleting the field at
-- zero. A count that is already gone (peers that joined before counts
-- were kept) stays gone.
local function owner_drop(k_owners, owner)
  if redis.call('HINCRBY', k_owners, owner, -1) <= 0 then
    redis.call('HDEL', k_owners, owner)
  end
end

-- torrent_counts appends the torrent record's count fields to an HSET
-- argument list: the seeder and leecher counts (the role hashes' lengths,
-- which cannot drift) and last_action, the "last seeded" stamp a reaper
-- reads, which moves to now (ms, as text) only while the torrent has
-- seeders or when seeded_now says a seeder was here until now (it just
-- stopped). leecher_gone says a leecher left the leecher role now
-- (stopped, finished or expired): leecher_left, when that last happened,
-- is what the no-leecher signal (swarm's watch.go) compares with a seeder's
-- previous announce, so only departures are stamped, never a count.
local function torrent_counts(fields, seeders, leechers, now_text, seeded_now, leecher_gone)
  local n = #fields
  fields[n + 1], fields[n + 2] = 'seeders', seeders
  fields[n + 3], fields[n + 4] = 'leechers', leechers
  if seeders > 0 or seeded_now then
    fields[#fields + 1] = 'last_action'
    fields[#fields + 1] = now_text
  end
  if leecher_gone then
    fields[#fields + 1] = 'leecher_left'
    fields[#fields + 1] = now_text
  end
end

-- torrent_retention lets an open-mode torrent's record (one with no
-- registered id) expire open_retention_ms after its swarm empties, and
-- keeps it again when a peer comes back (born), so random info-hashes do
-- not accumulate.
local function torrent_retention(k_torrent, registered, empty, born, open_retention_ms)
  if registered or open_retention_ms <= 0 then return end
  if empty then
    redis.call('PEXPIRE', k_torrent, open_retention_ms)
  elseif born then
    redis.call('PERSIST', k_torrent)
  end
end

-- The numeric fields of a user's record on one torrent. up_extra and
-- down_extra are the credited transfer (the raw one times the
-- multipliers in force at each announce; see credit_rates) less the raw
-- one: stored as that difference, they stay unwritten on the announces no
-- multiplier or token touches, nearly all of them (s43: one field write
-- and one HINCRBY of the totals fewer per announce). Every reader adds the
-- raw figure (swarm's creditOf); records of builds that stored the
-- credited figure whole are converted once, before a frontend serves
-- (swarm's convertCredit).
-- seq numbers the record's fed figures (user_feed); user_write writes it
-- apart, from seq_texts.
local user_numbers = {'peers', 'snatched', 'seed_ms', 'leech_ms', 'uploaded', 'downloaded',
  'up_extra', 'down_extra'}

-- seq_texts caches the text of small seqs, made once per library by
-- int and kept, as ledger_names: seq changes on every announce with
-- transfer when accounting is on, and a number handed to redis.call is
-- formatted by Redis 7.0 with snprintf's %.17g, 2.3k instructions a
-- figure (callgrind, s56), while a table look-up costs a few dozen. Most
-- records' seqs stay below seq_text_limit (a change per announce with
-- transfer: some 48 a day for a client announcing every 30 minutes), and
-- the cache is bounded by it (at most that many short strings, some
-- 300 KB); a seq above it is formatted every time, as before.
local seq_texts = {}
local seq_text_limit = 8192
local function seq_text(seq)
  local text = seq_texts[seq]
  if text then return text end
  if seq >= 0 and seq < seq_text_limit and seq % 1 == 0 then
    text = int(seq)
    seq_texts[seq] = text
    return text
  end
  return whole(seq)
end
-- token_used and token_ended are read only for a record with a token
-- (user_read): a field a record lacks costs HMGET a walk of the whole
-- record, and most records have no token. w is the writer's stamp: the
-- frontend that last numbered a change of the record's fed figures
-- (user_feed), written only when it changes (a sticky frontend: once), so
-- the feed's backstop can find the records a dead frontend changed (s43,
-- step 2; btstore.FrontendsKey). It is read only with a feed, where
-- records have it (a record without a stamp would cost the walk on every
-- announce with accounting off). The fields are named in the HMGET calls
-- themselves (user_read), not in a table: the prelude runs on every call,
-- and a second table of fifteen names cost every announce, accounting on
-- or off, some 3-4k instructions (s43, step 2b).

-- A user's record on one torrent, read with one HMGET. u.was keeps the
-- values read, so user_write writes only what changed. token is the
-- personal freeleech token's end (ms, 0: it never ends; nil: no token),
-- token_used and token_ended when it was first used and seen ended (ms),
-- read by a second HMGET only when there is a token; fed: with the
-- writer's stamp (u.w), false when not read.
local function user_read(key, fed)
  local v, o
  if fed then
    v, o = redis.call('HMGET', key, 'peers', 'snatched', 'seed_ms', 'leech_ms', 'uploaded', 'downloaded',
      'up_extra', 'down_extra', 'seq', 'complete', 'bits', 'ver', 'first_announce', 'token', 'w'), 0
  else
    v, o = redis.call('HMGET', key, 'peers', 'snatched', 'seed_ms', 'leech_ms', 'uploaded', 'downloaded',
      'up_extra', 'down_extra', 'seq', 'complete', 'bits', 'ver', 'first_announce', 'token'), 0
  end
  -- Each table is built by a constructor that names every field it will
  -- hold (v's positions are the HMGET's), so Lua sizes it once: filled
  -- one field at a time, a table is reallocated and rehashed each time it
  -- doubles, four or five times for each of these, on every announce of
  -- a user. A field set to false here is one the caller sets later.
  local was = {peers = tonumber(v[o + 1]) or 0, snatched = tonumber(v[o + 2]) or 0, seed_ms = tonumber(v[o + 3]) or 0,
    leech_ms = tonumber(v[o + 4]) or 0, uploaded = tonumber(v[o + 5]) or 0, downloaded = tonumber(v[o + 6]) or 0,
    up_extra = tonumber(v[o + 7]) or 0, down_extra = tonumber(v[o + 8]) or 0, seq = tonumber(v[o + 9]) or 0,
    complete = v[o + 10] == '1'}
  local u = {key = key, was = was, complete = was.complete, bits = tonumber(v[o + 11]) or -1,
    ver = tonumber(v[o + 12]) or 0, first = v[o + 13], token = tonumber(v[o + 14]), w = v[o + 15] or false,
    writer = false,
    peers = was.peers, snatched = was.snatched, seed_ms = was.seed_ms, leech_ms = was.leech_ms,
    uploaded = was.uploaded, downloaded = was.downloaded, up_extra = was.up_extra,
    down_extra = was.down_extra, seq = was.seq,
    token_used = false, token_ended = false, token_mark = false, last = false}
  if u.token then
    local used = redis.call('HMGET', key, 'token_used', 'token_ended')
    u.token_used, u.token_ended = used[1], used[2]
  end
  return u
end

-- A user's state on one torrent, as the user sets show it: bit 1 active
-- (has a peer in the swarm), 2 complete (has had the whole torrent: a
-- completed event or an announce with left=0), 4 incomplete (announced,
-- never complete), 8 hit-and-run (snatched it, has no peer left, and
-- neither seeded hnr_seed_ms nor reached hnr_ratio; both 0 disables it).
local function user_bits(u, hnr_seed_ms, hnr_ratio)
  local bits = 0
  if u.peers > 0 then bits = bits + 1 end
  if u.complete then bits = bits + 2 else bits = bits + 4 end
  if u.snatched > 0 and u.peers == 0 and (hnr_seed_ms > 0 or hnr_ratio > 0) then
    local served = (hnr_seed_ms > 0 and u.seed_ms >= hnr_seed_ms)
      or (hnr_ratio > 0 and (u.downloaded == 0 or u.uploaded / u.downloaded >= hnr_ratio))
    if not served then bits = bits + 8 end
  end
  return bits
end

-- user_write stores what the caller changed in a record read by user_read
-- (u.last, when set, is the new last_announce as text; u.token_mark, when
-- set, the token stamp to set to now; u.writer, when set, the writer's
-- stamp, written only when it differs from the one read; ledger_field,
-- when set, the ledger entry's field and ledger_text its text:
-- user_ledger; parameters, not fields of u, whose table one more pair of
-- fields would double) with one HSET.
-- When the state bits changed it gives them a new version, max(previous +
-- 1, now), so versions only grow even if the record is ever recreated;
-- the caller copies changed bits to the user's sets (another slot), and
-- the versions let that copy ignore stale, reordered writes. Returns bits
-- and version, or -1 and 0 when the state did not change.
local function user_write(key, u, now, hnr_seed_ms, hnr_ratio, ledger_field, ledger_text)
  -- fields is sized once by its constructor for the most an announce
  -- with accounting writes (every number, the stamps and a ledger entry:
  -- 28 slots) and filled to n; grown one pair at a time it was
  -- reallocated five or six times per announce.
  local fields = {false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false, false, false,
    false, false}
  local n = 0
  for _, name in ipairs(user_numbers) do
    if u[name] ~= u.was[name] then
      fields[n + 1], fields[n + 2] = name, whole(u[name])
      n = n + 2
    end
  end
  if u.seq ~= u.was.seq then
    fields[n + 1], fields[n + 2] = 'seq', seq_text(u.seq)
    n = n + 2
  end
  if u.complete ~= u.was.complete then
    fields[n + 1], fields[n + 2] = 'complete', '1'
    n = n + 2
  end
  if not u.first then
    fields[n + 1], fields[n + 2] = 'first_announce', u.last or int(now)
    n = n + 2
  end
  if u.last then
    fields[n + 1], fields[n + 2] = 'last_announce', u.last
    n = n + 2
  end
  if u.token_mark then
    fields[n + 1], fields[n + 2] = u.token_mark, int(now)
    n = n + 2
  end
  if u.writer and u.writer ~= u.w then
    fields[n + 1], fields[n + 2] = 'w', u.writer
    n = n + 2
  end
  if ledger_field then
    fields[n + 1], fields[n + 2] = ledger_field, ledger_text
    n = n + 2
  end
  local bits = user_bits(u, hnr_seed_ms, hnr_ratio)
  local ver = 0
  if bits ~= u.bits then
    ver = math.max(u.ver + 1, now)
    fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'bits', bits, 'ver', int(ver)
    n = n + 4
  end
  if n > 0 then
    redis.call('HSET', key, unpack(fields, 1, n))
  end
  if bits == u.bits then
    return -1, 0
  end
  return bits, ver
end

-- credit_rates combines the multipliers in force for an announce, in
-- percent: the torrent's (its record's credit_up and credit_down, absent:
-- 100) and the site-wide windows' (w_up, w_down, from ARGV: 100 when no
-- window is open). The most generous download rate wins (the lowest), and
-- so does the upload rate (the highest), except that a neutral torrent or
-- window (upload 0) credits no upload at all: neutral means the transfer
-- does not count. Returns the upload and the download rate: two numbers,
-- no table made per announce. w_up and w_down may be the ARGV text: "100"
-- and "100", no window open, as on nearly every announce, then cost no
-- tonumber (a strtod each, about 2k instructions).
local function credit_rates(t_up, t_down, w_up, w_down)
  local up, down = tonumber(t_up) or 100, tonumber(t_down) or 100
  if w_up == '100' and w_down == '100' then
    return up, down
  end
  w_up, w_down = tonumber(w_up), tonumber(w_down)
  if up == 0 or w_up == 0 then
    up = 0
  else
    up = math.max(up, w_up)
  end
  return up, math.min(down, w_down)
end

-- user_credit credits one announce's transfer d_up and d_down to the
-- record u at rate_up and rate_down (credit_rates) and the user's
-- personal token: a token
-- in force (u.token 0, or later than now) makes the download free. It
-- marks the token's first use (an announce with download credited free by
-- it) and its end (the first announce at or after its end, once used),
-- each once per grant. Returns the credited deltas and the token event
-- (0, R.TOKEN_USED or R.TOKEN_ENDED: a script crediting transfer is loaded
-- with the announce codes, swarm's announceCodes).
local function user_credit(u, d_up, d_down, rate_up, rate_down, now)
  -- Nearly every announce: no token, no multiplier, no window. Credited
  -- is raw, exactly (d * 100 / 100 rounds past 2^53 / 100), and the
  -- differences stay as they are.
  if not u.token and rate_up == 100 and rate_down == 100 then
    return d_up, d_down, 0
  end
  local event = 0
  if u.token then
    if u.token == 0 or now < u.token then
      if d_down > 0 and rate_down > 0 then
        rate_down = 0
        if not u.token_used then
          u.token_used = int(now)
          u.token_mark = 'token_used'
          event = R.TOKEN_USED
        end
      end
    elseif u.token_used and not u.token_ended then
      u.token_ended = int(now)
      u.token_mark = 'token_ended'
      event = R.TOKEN_ENDED
    end
  end
  local c_up = math.floor(d_up * rate_up / 100)
  local c_down = math.floor(d_down * rate_down / 100)
  -- A multiplier of 100% and no token leave the difference as it was,
  -- and user_write then writes neither field.
  u.up_extra = u.up_extra + c_up - d_up
  u.down_extra = u.down_extra + c_down - d_down
  return c_up, c_down, event
end

-- user_feed numbers a change of the record's fed figures (seq grows by
-- one) and stamps the record with writer (u.writer, user_write); the
-- record's row at that seq goes into the reply (R.CREDIT_ROW), for the
-- frontend that answered to hold and deliver (S5, s43: swarm's
-- feedbuf.go). Nothing of the row is written to Redis: the record's seq
-- and stamp are what the backstop reads if that frontend dies first
-- (swarm's FeedDeadWriters). changed says the record's fed figures
-- changed (seed_ms, leech_ms, uploaded, downloaded, up_extra, down_extra
-- or snatched): the caller knows it from what the announce added, d_up,
-- d_down, elapsed, the credited less the raw and a snatch, without
-- comparing the seven figures with the values read (s56: 14 table
-- look-ups and 7 comparisons on every crediting announce). Returns true
-- when they changed (a new seq, a row), else false.
local function user_feed(u, writer, changed)
  if changed then
    u.seq = u.seq + 1
    u.writer = writer
    return true
  end
  return false
end

-- The ledger's field names, "l0" to "l<n - 1>", each made once per
-- library (a cache of constants: the names never change) rather than
-- formatted on every announce.
local ledger_names = {}

-- user_ledger is the ledger entry of an announce with transfer in u's
-- record, its field and text for user_write's HSET: the record's slot seq
-- mod size (the ledger keeps the last size announces with transfer), as
-- "time,raw up,raw down,credited up,credited down,,time of the peer's
-- previous announce" (ms; empty when unknown), a credited
-- figure left empty when it equals the raw one (so an entry stays short
-- and the record a listpack: values up to 64 bytes; swarm's ledgerOf reads
-- it, and the entries of builds before s56, whose sixth figure is the gap
-- itself). Written with the credit it records, in the same HSET, a ledger
-- entry is never lost nor written twice: until s47 the frontend wrote it
-- in its flush, one more command per announce, and lost the entries it
-- held when killed. t_up and t_down are d_up's and d_down's text (int's),
-- made once by the caller for the peer record's up_delta and down_delta
-- too, and prev_text is the peer record's last_announce as read: the
-- entry is joined from texts alone. Until s56 it carried the gap, whose
-- string.format cost 2.6k instructions an announce (callgrind, s56), the
-- most of any part of the entry; ledgerOf subtracts instead.
local function user_ledger(u, size, now_text, t_up, t_down, d_up, d_down, c_up, c_down, prev_text)
  local slot = u.seq % size
  local name = ledger_names[slot]
  if not name then
    name = 'l' .. int(slot)
    ledger_names[slot] = name
  end
  if c_up == d_up and c_down == d_down then
    -- credited as raw, as nearly always: the general join below gives
    -- the same text, with two empty pieces and two tests more (1.0k
    -- instructions an announce, callgrind s49)
    return name, now_text .. ',' .. t_up .. ',' .. t_down .. ',,,,' .. prev_text
  end
  local cu, cd = '', ''
  if c_up ~= d_up then cu = int(c_up) end
  if c_down ~= d_down then cd = int(c_down) end
  return name, now_text .. ',' .. t_up .. ',' .. t_down .. ',' .. cu .. ',' .. cd .. ',,' .. prev_text
end

-- The credit reply: the crediting scripts' answer for one announce of a
-- user (announce.lua's tail, and each peer's after its status in
-- refresh.lua): flat, numbers only, so Redis makes no nested array and
-- the frontend reads no boxed list. Read by swarm's parseCredit
-- (credit_reply.go), which names the mask's bits and hands them to the
-- scripts as R.CREDIT_*; the two change together. Every reply starts
-- with 4 values:
--   user bits (0: the state did not change; a state always has bit 2 or
--   4), user version, d_uploaded, d_downloaded (raw, since the peer's
--   previous announce)
-- With accounting off that is all. With accounting on a mask follows,
-- the sum of the bits of the groups that follow it, in this order; a
-- group left off is zero (each value costs Redis a conversion out of
-- Lua, and most were zeros on nearly every announce):
--   R.CREDIT_EXTRA: up_extra and down_extra of this announce (credited
--     less raw), when a multiplier or token (user_credit) made either
--     non-zero
--   R.CREDIT_TOKEN: token event (user_credit) and token used (ms)
--   R.CREDIT_ROW: the record's row when its fed figures changed
--     (user_feed), after the announce: seq, uploaded, downloaded,
--     seed_ms, leech_ms, then gap (ms since the peer's previous
--     announce, 0: unknown)
--   R.CREDIT_ROW_EXTRA (with the row): the record's up_extra and
--     down_extra, when either is non-zero
--   R.CREDIT_SNATCHED (with the row): the record's snatched (ms), when
--     the user snatched the torrent
-- A typical announce (a row, no multiplier or token) answers 4 + 1 + 6
-- values. The ledger and cheat signals' other figures are the call's
-- (the torrent's size and leecher_left, in the reply's header) or
-- derived by the frontend (the swarm's leechers but this peer).
-- credit_none appends the reply of an announce that credited no user
-- (no user, a peer refresh.lua dropped or found stale, a stopped peer
-- announce.lua did not know): unchanged bits, the raw deltas d_up and
-- d_down (0 when none), and with accounting an empty mask.
local function credit_none(out, accounting, d_up, d_down)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, 0, whole(d_up), whole(d_down)
  if accounting then out[n + 5] = 0 end
end

-- user_announce applies one announce of user's peer to the user's record
-- on the torrent (key; users is the torrent's set of users with a record):
-- transfer, raw and credited, seed and leech time, active peers, complete
-- and snatched, and from them the user's state. a holds what the announce
-- did: d_up and d_down (bytes since the peer's previous announce), elapsed
-- (ms the peer was in the swarm since), was_seeder, was_active, leaving,
-- seeding and snatched (1 when this announce counted a snatch), and for
-- the ledger and the frontend's cheat signals gap (ms since the peer's
-- previous announce, 0: unknown), prev (that announce's time, the peer
-- record's last_announce as read, "" when unknown), t_up and t_down
-- (d_up's and d_down's text, as the peer record has them): the ledger
-- entry's texts. rate_up and rate_down are the
-- multipliers in force (credit_rates), nil when accounting is off; with
-- them the record's changes are numbered for the feed too, and writer is
-- the frontend's id for the record's stamp (user_feed). It is the one
-- place an announce's transfer reaches the user's record, whichever
-- script applies the announce. ledger: how many announces with transfer the
-- record's ledger keeps (0: none; user_ledger writes the entry of an
-- announce with transfer, with accounting). Appends the announce's credit
-- reply to out (see "The credit reply" above: the mask and its groups
-- with accounting only).
--
-- The cheat signals' figures (the row's downloaded, gap; the call's size
-- and leecher_left; the swarm's leechers) go back with accounting on; the
-- frontend checks the signals from them in its batched flush (swarm's
-- watch.go): the signals' bookkeeping here cost Redis more than the
-- check in the frontend. A frontend killed before its flush loses those
-- signals, never credit nor a ledger entry: both are written here.
local function user_announce(key, users, user, a, now, now_text, hnr_seed_ms, hnr_ratio, rate_up, rate_down, writer,
    ledger, out)
  local u = user_read(key, rate_up ~= nil)
  u.uploaded = u.uploaded + a.d_up
  u.downloaded = u.downloaded + a.d_down
  local c_up, c_down, token_event = 0, 0, 0
  if rate_up then
    c_up, c_down, token_event = user_credit(u, a.d_up, a.d_down, rate_up, rate_down, now)
  end
  if a.was_seeder then
    u.seed_ms = u.seed_ms + a.elapsed
  else
    u.leech_ms = u.leech_ms + a.elapsed
  end
  if a.leaving and a.was_active then
    u.peers = math.max(0, u.peers - 1)
  elseif not a.leaving and not a.was_active then
    u.peers = u.peers + 1
  end
  if (a.seeding and not a.leaving) or a.snatched == 1 then
    u.complete = true
  end
  if a.snatched == 1 and u.snatched == 0 then
    u.snatched = now
  end
  u.last = now_text
  if not u.first then
    redis.call('SADD', users, user) -- a new record: once per user and torrent
  end
  local row = rate_up and user_feed(u, writer, a.d_up ~= 0 or a.d_down ~= 0 or a.elapsed ~= 0 or c_up ~= a.d_up
    or c_down ~= a.d_down or u.snatched ~= u.was.snatched)
  local ledger_field, ledger_text
  if row and ledger > 0 and (a.d_up > 0 or a.d_down > 0) then
    ledger_field, ledger_text = user_ledger(u, ledger, now_text, a.t_up, a.t_down, a.d_up, a.d_down, c_up, c_down,
      a.prev)
  end
  local bits, ver = user_write(key, u, now, hnr_seed_ms, hnr_ratio, ledger_field, ledger_text)
  local n = #out
  if bits < 0 then bits = 0 end
  if not rate_up then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = bits, whole(ver), whole(a.d_up), whole(a.d_down)
    return
  end
  -- The mask's place is filled first (0), so out stays a sequence for
  -- Lua's array part, and set once the groups are known.
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = bits, whole(ver), whole(a.d_up), whole(a.d_down), 0
  local mask, m = 0, n + 5
  local x_up, x_down = c_up - a.d_up, c_down - a.d_down
  if x_up ~= 0 or x_down ~= 0 then
    mask = R.CREDIT_EXTRA
    out[m + 1], out[m + 2] = whole(x_up), whole(x_down)
    m = m + 2
  end
  if token_event ~= 0 then
    mask = mask + R.CREDIT_TOKEN
    out[m + 1], out[m + 2] = token_event, u.token_used
    m = m + 2
  end
  if row then
    mask = mask + R.CREDIT_ROW
    -- seq counts changes, seed_ms and leech_ms add up at most a timeout
    -- per announce, gap is a difference of two announce times: all far
    -- below 2^53, so they go as they are, without whole's call; the
    -- transfer a client reports may pass it.
    -- whole's test inline (uploaded and downloaded never go below 0):
    -- two calls fewer on every crediting announce
    local up, down = u.uploaded, u.downloaded
    if up >= 9007199254740992 then up = int(up) end
    if down >= 9007199254740992 then down = int(down) end
    out[m + 1], out[m + 2], out[m + 3] = u.seq, up, down
    out[m + 4], out[m + 5], out[m + 6] = u.seed_ms, u.leech_ms, a.gap
    m = m + 6
    if u.up_extra ~= 0 or u.down_extra ~= 0 then
      mask = mask + R.CREDIT_ROW_EXTRA
      out[m + 1], out[m + 2] = whole(u.up_extra), whole(u.down_extra)
      m = m + 2
    end
    if u.snatched ~= 0 then
      mask = mask + R.CREDIT_SNATCHED
      out[m + 1] = whole(u.snatched)
    end
  end
  if mask ~= 0 then out[n + 5] = mask end
end

-- reaper_claim records that user reseeded the torrent in the reaper's
-- process, unless they claimed it before (one person claims one upload
-- once, ever: claimed entries are never deleted). An invitation ("i:")
-- becomes a claim; a winner who was never invited (never snatched) gets
-- one too, so every win is recorded. "c:<ms>" waits for its reward,
-- which the reaper grants and marks "r:" (reaper_rewards.lua); the row's
-- rewards field tells the reaper's next run to look.
local function reaper_claim(k_reaper, k_claims, user, now)
  local had = redis.call('HGET', k_claims, user)
  if had and string.sub(had, 1, 2) ~= 'i:' then
    return
  end
  redis.call('HSET', k_claims, user, 'c:' .. int(now))
  redis.call('HSET', k_reaper, 'rewards', '1')
end

-- reaper_reseed: a seeder announced on a torrent with a reaper row.
-- state is the row's state (never/unseeded) while the spell is on, nil
-- when the row is a claim window (claim_until, ms) after a reseed.
--   - In a spell: the spell ends, its open invitations go (claims stay).
--     The uploader reseeding gets no reward and opens no window; anyone
--     else claims it and opens the window, so others who start seeding
--     within window_ms of the first reseed (whose seed time is within
--     window_ms of the longest, the first's) win too: per torrent.
--   - In a window: a user other than the uploader claims, until it ends.
local function reaper_reseed(k_torrent, k_reaper, k_claims, user, now, state, claim_until, window_ms)
  local uploader = redis.call('HGET', k_torrent, 'uploader')
  local eligible = user ~= '' and user ~= uploader
  if state then
    local all = redis.call('HGETALL', k_claims)
    for i = 1, #all, 2 do
      if string.sub(all[i + 1], 1, 2) == 'i:' then
        redis.call('HDEL', k_claims, all[i])
      end
    end
    local rewards = redis.call('HGET', k_reaper, 'rewards')
    redis.call('DEL', k_reaper)
    if rewards then
      redis.call('HSET', k_reaper, 'rewards', rewards)
    end
    if eligible then
      redis.call('HSET', k_reaper, 'claim_until', int(now + window_ms), 'saved_at', int(now), 'saved_state', state)
      reaper_claim(k_reaper, k_claims, user, now)
    end
  elseif eligible and claim_until and now <= claim_until then
    reaper_claim(k_reaper, k_claims, user, now)
  end
end
