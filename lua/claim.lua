-- claim.lua: hand out up to N items to one downloader, atomically: gates,
-- rate limit, budget, claims limit, queue order and reclaims in one step, so
-- no crash or concurrent request can lose an item or give it out twice.
--
-- KEYS[1]  config     HASH  project settings
-- KEYS[2]  reserved   LIST  todo:d:<downloader>
-- KEYS[3]  todo       LIST
-- KEYS[4]  backfeed   LIST  todo:backfeed
-- KEYS[5]  secondary  LIST  todo:secondary
-- KEYS[6]  redo       LIST  todo:redo
-- KEYS[7]  out        ZSET  item -> claimed at (ms): written only by builds
--                          from before out and deadlines were one set; merged
--                          into deadlines a slice per call (see the note)
-- KEYS[8]  deadlines  ZSET  item -> reclaim deadline (ms): every claim out
--                          (its claim time is in its claim record)
-- KEYS[9]  claims     HASH  item -> claim record
-- KEYS[10] done       SET
-- KEYS[11] budget     HASH  downloader -> items out, kept only while the
--                          project has a budget limit (downloader_budget)
-- KEYS[12] extras     HASH  item -> JSON object of extra keys
-- KEYS[13] stats      HASH  counters (only the rare ones here: see the note)
-- KEYS[14] blocked    HASH  nickname or IP -> JSON reason
-- KEYS[15] rate       STRING GCRA theoretical arrival time (ms, fractional)
-- KEYS[16] released   HASH  item -> released record, for items released to redo
-- KEYS[17] rate:d     STRING this downloader's GCRA state
-- KEYS[18] rate:ip    STRING this client IP's GCRA state
-- KEYS[19] hourly     HASH  this hour's counters: not written here (the
--                          frontend counts them); kept so KEYS keep their places
-- KEYS[20] recent_done ZSET item -> done at (ms): the latest completions
--                          (done_mode count or archive keep no done set)
-- KEYS[21] events      STREAM the project's event log (written when the config's
--                          event_log is above 0)
-- KEYS[22] expired_to  STRING the reclaim deadline (ms) up to which expired
--                          claims are in the event log
-- KEYS[23] scored      ZSET  todo:scored, item -> score, served highest first
-- KEYS[24] reserved_set SET  downloaders with a reserved queue: this one is
--                          removed once its queue is empty
-- KEYS[25] redo_cancelled HASH items completed while a copy waited in
--                          todo:redo (or a group's redo sub-queue): that copy
--                          is dropped when popped
-- then, for each limit group g (in the order of the config's limit_groups):
-- KEYS[26+5g .. 29+5g]  LIST  the group's sub-queues of todo, todo:backfeed,
--                             todo:secondary and todo:redo
-- KEYS[30+5g]           STRING the group's GCRA state
-- and last:
-- KEYS[#KEYS-4] failed   HASH item -> failed record: a due claim whose item
--                          was claimed max_claims times goes here instead
--                          of out again
-- KEYS[#KEYS-3] history  HASH item -> its ended claims (a reclaim adds one)
-- KEYS[#KEYS-2] batches  HASH claim batches (lua/prelude.lua): the plain
--                          path's claim of batch_min or more items writes
--                          one; a due one is moved to deadlines before
--                          reclaims are read
-- KEYS[#KEYS-1] batch_deadlines ZSET batch id -> reclaim deadline (ms)
-- KEYS[#KEYS]   queued   SET the items waiting in the list queues: a
--                             popped item leaves it
--
-- ARGV[1] now (ms)
-- ARGV[2] downloader
-- ARGV[3] client IP
-- ARGV[4] items wanted (>= 1; the caller caps it)
-- ARGV[5] client script version ("" when the client sent none)
-- ARGV[6] the global block entry (JSON) of the downloader or its IP, or ""
--         (the global list is cached by the frontends: no script touches it)
-- ARGV[7] the limit_groups_version the caller built KEYS from
-- ARGV[8..] for each group: rate per minute (-1: a removed group whose
--         sub-queues may still hold items, served without limit so nothing
--         is stranded while a re-route runs), burst, name
--
-- Returns {code, detail, ...}
--   1  {1, reclaims, project extra JSON, item1, extras1, item2, extras2, ...}:
--      how many of the items are reclaims, the project's extra keys (JSON
--      object), then the items (extras is "" when the item has none)
--   0  nothing for you; detail = "empty", "budget" or "claims_limit"
--  R.NO_PROJECT    no such project
--  R.TOO_OLD       version too old; detail = the minimum version
--  R.BLOCKED       blocked; detail = the block entry (JSON)
--  R.RATE_LIMITED  rate limited; detail = milliseconds until a request would pass
--  R.PAUSED        project paused
--  R.STALE_GROUPS  the project's limit groups changed; rebuild KEYS and retry
--  R.CORRUPT       corrupt state, nothing changed; detail = which key or field
--                  is unusable
-- (R is defined from queues/codes.go, the one place the numbers live.)
--
-- Note: items found in claims, done or recent_done when popped, or popped
-- twice in this call, are duplicates queued twice; they are dropped (counted in
-- stats.duplicates_dropped) because the item already has its one place. A
-- released item popped again continues its claim count and claimant list.
-- Claims, done and recent_done are asked only when the config's pop_check
-- is not "0": a project created since pop_check exists starts at "0",
-- because every way into its lists goes through the queued index and
-- skips items out, done or failed, so a popped item can be in no other
-- place. A script that cannot keep that (the scored queue, which has no
-- queued index, or an import of claims or completions of items waiting in
-- a list) sets it to "1" for good, and so does a project from before the
-- field (absent reads as "1").
--
-- Note: nothing popped is lost if a command fails midway (Redis keeps a
-- script's writes before an error). The keys' types are checked where
-- they are set (every writer is a script of this package; `hoard doctor`
-- checks a project's keys on demand), not on every call. What can still
-- fail after a pop (a key made the wrong type from outside, a budget field
-- that is not an integer) runs under pcall: the batch's claim writes are
-- undone, its items (and those of the call's earlier batches) are pushed
-- back to the head of their queue in order, and the script answers
-- R.CORRUPT naming the key. A due claim whose record
-- is missing or unreadable is skipped and counted (claims_unreadable).
--
-- Note: deadlines is the one sorted set of claims: a claim writes its
-- record and its deadline, and a done removes both. A project written by a
-- build from before that also has out (item -> claimed at). Its claims are
-- in deadlines too, except claims imported with no reclaim TTL, so out is
-- merged on first touch: while it exists (found by the EXISTS over the
-- usually absent keys, no extra command otherwise) each call moves up to
-- 100 of its items, giving a claim with no deadline one from its record,
-- and removes them from out, until out is gone. An old frontend still
-- writing out during a rolling upgrade is merged the same way.
--
-- Note: max_claims (0 = off) is checked where a due claim would be handed
-- out again, and only there: a first claim never reads it. An item claimed
-- max_claims times whose claim is due leaves claims and deadlines for
-- failed, with its history (counted in stats.items_failed), and the call
-- looks further for items to hand out.
--
-- Note: the request counters (requests, requests_served, items_served, the
-- hourly ones, ...) are not written here: the frontend counts them from the
-- reply and flushes them once a second (queues/counters.go); only the rare
-- ones (duplicates_dropped, claims_unreadable, items_reclaimed) are.

local now = tonumber(ARGV[1])
local downloader = ARGV[2]
local ip = ARGV[3]
local wanted = tonumber(ARGV[4])
local version = ARGV[5]
local global_block = ARGV[6]
local groups_version = ARGV[7]
local ngroups = (#KEYS - 30) / 5
local index = KEYS[#KEYS]
local failed_key, history_key = KEYS[#KEYS - 4], KEYS[#KEYS - 3]
local batches_key, batch_deadlines_key = KEYS[#KEYS - 2], KEYS[#KEYS - 1]
local group_index = {}
for g = 0, ngroups - 1 do
  group_index[ARGV[10 + 3 * g]] = g
end

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'paused', 'min_version',
  'rate_per_minute', 'rate_burst', 'downloader_budget', 'claims_limit',
  'reclaim_enabled', 'reclaim_ttl_ms', 'max_multi', 'extra', 'limit_groups_version',
  'downloader_rate_per_minute', 'downloader_rate_burst', 'ip_rate_per_minute', 'ip_rate_burst',
  'ignore_global_blocks', 'event_log', 'max_claims', 'has_extras', 'pop_check')
if not cfg[1] then
  return {R.NO_PROJECT, 'no such project'}
end
if (cfg[12] or '0') ~= groups_version then
  return {R.STALE_GROUPS, cfg[12] or '0'}
end
if cfg[2] == '1' then
  return {R.PAUSED, 'paused'}
end

-- One EXISTS over the keys that are usually absent: when none exists (the
-- common case) no per-key probe is needed at all. Whether items have
-- extras is known from the config (has_extras, set where extras are
-- written); only a project from before that flag (false) probes the key.
local has_extras = cfg[20]
local pop_check = cfg[21] ~= '0'
local any_optional
if has_extras then
  any_optional = redis.call('EXISTS', KEYS[14], KEYS[2], KEYS[23], KEYS[16], KEYS[20], KEYS[25], KEYS[7]) > 0
else
  any_optional = redis.call('EXISTS', KEYS[14], KEYS[2], KEYS[23], KEYS[16], KEYS[20], KEYS[25], KEYS[7], KEYS[12]) > 0
end
local present_cache = {}
local function present(k)
  if k == 12 and has_extras then return has_extras == '1' end
  if not any_optional then return false end
  local v = present_cache[k]
  if v == nil then
    v = redis.call('EXISTS', KEYS[k]) == 1
    present_cache[k] = v
  end
  return v
end

-- Block targets are stored lower-cased (queues.blockKey); the exact
-- spelling is still looked up for entries stored before that.
local block = false
if present(14) then
  local found = redis.call('HMGET', KEYS[14], string.lower(downloader), downloader, string.lower(ip))
  block = found[1] or found[2] or found[3]
end
if not block and global_block ~= '' and cfg[17] ~= '1' then
  block = global_block
end
if block then
  return {R.BLOCKED, block}
end

local min_version = cfg[3]
if min_version and min_version ~= '' then
  -- Versions compare as versions: runs of digits numerically (any length),
  -- runs of letters as text, separators ignored, missing parts as zero.
  local function version_tokens(v)
    local tokens = {}
    for run in string.gmatch(v, '%w+') do
      local pos = 1
      while pos <= #run do
        local s, e = string.find(run, '^%d+', pos)
        if not s then s, e = string.find(run, '^%a+', pos) end
        tokens[#tokens + 1] = string.sub(run, s, e)
        pos = e + 1
      end
    end
    return tokens
  end
  local function compare_tokens(a, b)
    local a_num, b_num = string.find(a, '^%d') ~= nil, string.find(b, '^%d') ~= nil
    if a_num and b_num then
      a = string.gsub(a, '^0+', '')
      b = string.gsub(b, '^0+', '')
      if #a ~= #b then return #a < #b and -1 or 1 end
    elseif a_num ~= b_num then
      return a_num and 1 or -1 -- "1.0.1" is newer than "1.0.beta"
    end
    if a == b then return 0 end
    return a < b and -1 or 1
  end
  local function version_less(a, b)
    local ta, tb = version_tokens(a), version_tokens(b)
    for i = 1, math.max(#ta, #tb) do
      local c = compare_tokens(ta[i] or '0', tb[i] or '0')
      if c ~= 0 then return c < 0 end
    end
    return false
  end
  if version == '' or version_less(version, min_version) then
    return {R.TOO_OLD, min_version}
  end
end

-- GCRA: requests are spaced by period ms with a burst allowance, so there
-- is no burst at minute boundaries as with per-minute counters. All three
-- limits (project, downloader, IP) are checked before any is charged, so a
-- refused request costs no limit its slot. Times are fractional ms so rates
-- over 60,000/min still add up; 1 us of slack absorbs rounding.
-- A GCRA key whose time has passed limits nothing (tat < now reads as
-- now), so it may expire any time after; the minute of slack covers a
-- caller whose clock runs behind Redis's (tests with an injected clock on
-- a loaded machine, where a 1 s slack expired keys that still limited).
local rate_key_slack = 60000
-- A project with no rate set (each reads "0" or is absent) skips the
-- limiter and its functions.
if (cfg[4] or '0') ~= '0' or (cfg[13] or '0') ~= '0' or (cfg[15] or '0') ~= '0' then
  local function gcra_check(key, rate_text, burst_text)
    local rate = tonumber(rate_text or '0') or 0
    if rate <= 0 then return 0, nil end
    local period = 60000 / rate
    local burst = math.max(1, tonumber(burst_text or '1') or 1)
    local tat = tonumber(redis.call('GET', key) or '0') or 0
    if tat < now then tat = now end
    local wait = tat + period - burst * period - now
    if wait > 0.001 then return wait, nil end
    return 0, {key, tat + period}
  end
  local function gcra_charge(charge)
    if charge then
      redis.call('SET', charge[1], string.format('%.4f', charge[2]), 'PX', int(math.ceil(charge[2] - now) + rate_key_slack))
    end
  end
  local wait_project, charge_project = gcra_check(KEYS[15], cfg[4], cfg[5])
  local wait_downloader, charge_downloader = gcra_check(KEYS[17], cfg[13], cfg[14])
  local wait_ip, charge_ip = gcra_check(KEYS[18], cfg[15], cfg[16])
  local wait = math.max(wait_project, wait_downloader, wait_ip)
  if wait > 0 then
    return {R.RATE_LIMITED, int(math.ceil(wait))}
  end
  gcra_charge(charge_project)
  gcra_charge(charge_downloader)
  gcra_charge(charge_ip)
end

local max_multi = tonumber(cfg[10] or '0') or 0
if max_multi > 0 then wanted = math.min(wanted, max_multi) end

local budget_limit = tonumber(cfg[6] or '0') or 0
local budget_on = budget_kept(cfg[6])
if budget_on then
  -- Read before any item moves: a budget that is not a hash refuses the
  -- claim naming the key; a field that is not a number reads as 0 and is
  -- refused by the guarded HINCRBY below, after which every pop is undone.
  local have = redis.pcall('HGET', KEYS[11], downloader)
  if type(have) == 'table' and have.err then
    return {R.CORRUPT, KEYS[11] .. ': ' .. have.err}
  end
  have = tonumber(have or '0') or 0
  if have >= budget_limit then
    return {0, 'budget'}
  end
  wanted = math.min(wanted, budget_limit - have)
end

local claims_limit = tonumber(cfg[7] or '0') or 0
local reclaim_enabled = cfg[8] == '1'
local events_max = event_log_max(cfg[18])
local expired_to = 0
if events_max then
  expired_to = tonumber(redis.call('GET', KEYS[22]) or '0') or 0
end
local max_claims = tonumber(cfg[19] or '0') or 0
local ttl = reclaim_ttl(cfg[9])

-- The plain claim: a project with none of the optional keys (no reserved
-- queue, scored queue, released items, ...), no limit groups, claims limit
-- or budget, no duplicate look-up and no extras pops its items from todo
-- here, before the general path's functions exist: a Lua closure costs an
-- allocation and a walk of the open upvalues on every call, and the general
-- path makes about a dozen (docs/warrior-path.md). Same order of writes and
-- the same undo: what fails after the pop puts the items back at the head
-- of todo, in order, and in the queued index, with nothing written. When
-- todo gives fewer than wanted, its items are claimed here and the general
-- path serves the rest (their batch is handed to it, for its undo).
local plain_batch, plain_batch_id, todo_dry = nil, nil, false
if not any_optional and ngroups == 0 and claims_limit == 0 and not budget_on and not pop_check
    and has_extras ~= '1' then
  local batch = redis.pcall('LPOP', KEYS[3], wanted)
  if type(batch) == 'table' and batch.err then
    return {R.CORRUPT, KEYS[3] .. ': ' .. batch.err}
  end
  if not batch then
    todo_dry = true
  else
    local record, deadline = format_claim(1, now, downloader, ip, '-', '-'), int(now + ttl)
    local failure, batch_id
    if #batch >= batch_min then
      -- One deadline for the batch (lua/prelude.lua): the index first, then
      -- the batch and the records naming it.
      for i = 1, #batch, 1000 do
        local reply = redis.pcall('SREM', index, unpack(batch, i, math.min(i + 999, #batch)))
        if type(reply) == 'table' then
          -- Only the first slice can fail (on the key's type).
          failure = index .. ': ' .. reply.err
          break
        end
      end
      if not failure then
        local key, why
        batch_id, key, why = batch_write(KEYS[9], batches_key, batch_deadlines_key, batch, record, deadline)
        if key then
          failure = key .. ': ' .. tostring(why)
          redis.pcall('SADD', index, unpack(batch))
        end
      end
      if failure then
        local reversed = {}
        for i = #batch, 1, -1 do reversed[#reversed + 1] = batch[i] end
        redis.pcall('LPUSH', KEYS[3], unpack(reversed))
        return {R.CORRUPT, failure}
      end
    else
    local claim_args, deadline_args = {}, {}
    for i = 1, #batch do
      claim_args[2 * i - 1], claim_args[2 * i] = batch[i], record
      deadline_args[2 * i - 1], deadline_args[2 * i] = deadline, batch[i]
    end
    -- The index first, then the claim record (what done.lua and reclaims go
    -- by), then the deadline; each in slices of 1000 arguments.
    for _, write in ipairs({{'SREM', index, batch}, {'HSET', KEYS[9], claim_args}, {'ZADD', KEYS[8], deadline_args}}) do
      local args = write[3]
      for i = 1, #args, 1000 do
        local reply = redis.pcall(write[1], write[2], unpack(args, i, math.min(i + 999, #args)))
        if type(reply) == 'table' and reply.err then
          failure = write[2] .. ': ' .. reply.err
          break
        end
      end
      if failure then break end
    end
    if failure then
      redis.pcall('HDEL', KEYS[9], unpack(batch))
      redis.pcall('ZREM', KEYS[8], unpack(batch))
      local reversed = {}
      for i = #batch, 1, -1 do reversed[#reversed + 1] = batch[i] end
      redis.pcall('LPUSH', KEYS[3], unpack(reversed))
      redis.pcall('SADD', index, unpack(batch))
      return {R.CORRUPT, failure}
    end
    end
    if #batch == wanted then
      local reply = {1, 0, cfg[11] or '{}'}
      for i = 1, #batch do
        reply[2 * i + 2], reply[2 * i + 3] = batch[i], ''
      end
      return reply
    end
    plain_batch, plain_batch_id, todo_dry = batch, batch_id, true
  end
end

-- Limit groups: how many items each may hand out now (GCRA tokens).
local group_tokens, group_tat, group_period = {}, {}, {}
local unlimited = 1000000000
for g = 0, ngroups - 1 do
  local rate = tonumber(ARGV[8 + 3 * g]) or 0
  local burst = math.max(1, tonumber(ARGV[9 + 3 * g]) or 1)
  local tokens = 0
  if rate < 0 then
    tokens = unlimited
  elseif rate > 0 then
    local period = 60000 / rate
    local tat = tonumber(redis.call('GET', KEYS[30 + 5 * g]) or '0') or 0
    if tat < now then tat = now end
    tokens = math.max(0, math.floor((now - tat) / period + burst + 0.000001))
    group_tat[g], group_period[g] = tat, period
  end
  group_tokens[g] = tokens
end
-- Whether a group is holding back items it has waiting ("limit hit").
-- Only reclaim priority and the final reason need it, so it is computed
-- when those ask, not on every request.
-- Spends n of group g's tokens (items handed out under its limit).
local function charge_group(g, n)
  if n <= 0 or group_tokens[g] >= unlimited then return end
  group_tokens[g] = group_tokens[g] - n
  group_tat[g] = group_tat[g] + n * group_period[g]
  redis.call('SET', KEYS[30 + 5 * g], string.format('%.4f', group_tat[g]),
    'PX', int(math.ceil(group_tat[g] - now) + rate_key_slack))
end

local function group_limit_hit()
  for g = 0, ngroups - 1 do
    if group_tokens[g] == 0 then
      for q = 0, 3 do
        if redis.call('EXISTS', KEYS[26 + 5 * g + q]) == 1 then
          return true
        end
      end
    end
  end
  return false
end

local taken = {}
local reclaims = 0
local fresh = 0
local unreadable = 0


-- Due claims of a limit group with no tokens left are skipped (they stay
-- due); the window looks past a few of them so they cannot starve others.
local function take_reclaims(want)
  if not reclaim_enabled or want <= 0 then return end
  -- Due claim batches first become claims of their own (at the batch's
  -- deadline), so the due claims are all in deadlines.
  batches_explode_due(KEYS[9], KEYS[8], batches_key, batch_deadlines_key, now, math.min(want, 100))
  local due = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, want * 4 + 16)
  for d = 1, #due, 2 do
    local item, deadline = due[d], tonumber(due[d + 1])
    if want <= 0 then break end
    local record = redis.call('HGET', KEYS[9], item)
    local count, claimed_at, previous, _, earlier, group
    if record then
      count, claimed_at, previous, _, earlier, group = parse_claim(record)
    end
    if not count then
      -- Missing or unreadable: leave it due for an operator, never guess.
      unreadable = unreadable + 1
    elseif max_claims > 0 and count >= max_claims then
      -- Claimed max_claims times without a done: failed, not out again.
      if budget_on then budget_decrement(KEYS[11], previous) end
      redis.call('HDEL', KEYS[9], item)
      redis.call('ZREM', KEYS[8], item)
      history_push(history_key, item, previous, claimed_at, 'expired')
      fail_item(failed_key, history_key, item, count, now, 'max_claims', '')
      redis.call('HINCRBY', KEYS[13], 'items_failed', 1)
      if events_max and deadline > expired_to then
        log_event(KEYS[21], events_max, 'reclaim', {item}, previous, deadline)
      end
    else
    local g = group_index[group]
    if g == nil or group_tokens[g] > 0 then
    if g ~= nil then charge_group(g, 1) end
    want = want - 1
    if budget_on then budget_decrement(KEYS[11], previous) end
    count = count + 1
    if count == 2 then
      redis.call('HINCRBY', KEYS[13], 'items_reclaimed', 1)
    end
    -- Written at once (not batched) so a second ZRANGEBYSCORE in this call
    -- cannot see the item as due again.
    history_push(history_key, item, previous, claimed_at, 'expired')
    redis.call('HSET', KEYS[9], item, format_claim(count, now, downloader, ip, push_claimant(previous, earlier, 4), group))
    redis.call('ZADD', KEYS[8], int(now + ttl * count), item)
    taken[#taken + 1] = item
    reclaims = reclaims + 1
    -- The expiry scan (expire_scan.lua) has not reached this deadline and
    -- never will now that it moved: log the expiry here, once.
    if events_max and deadline > expired_to then
      log_event(KEYS[21], events_max, 'reclaim', {item}, previous, deadline)
    end
    end
    end
  end
end

local dropped = 0
local picked = {}
local extras_of = {} -- popped items' extra keys, read in their batch
local batches = {} -- the batches popped so far, to undo if a later one fails
if plain_batch then
  -- Claimed by the plain path above; todo ran dry there.
  batches[1] = {key = KEYS[3], scored = false, batch = plain_batch, written = plain_batch, batch_id = plain_batch_id}
  for _, item in ipairs(plain_batch) do
    picked[item] = true
    taken[#taken + 1] = item
  end
  fresh = #plain_batch
end
-- A command that fails after a pop must not lose the popped items: calls
-- in the guarded part of a batch go through checked(), which raises an
-- error naming the key (and field), for undo_batch to catch.
local function checked(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    local field = ''
    if command == 'HINCRBY' then field = ' field ' .. tostring((...)) end
    error({corrupt = key .. field .. ': ' .. reply.err}, 0)
  end
  return reply
end
-- Calls a variadic command in slices of at most 1000 arguments, checked.
local function checked_chunked(command, key, args)
  for i = 1, #args, 1000 do
    checked(command, key, unpack(args, i, math.min(i + 999, #args)))
  end
end
-- Pops up to n items: the head of a list, or the highest scores of the
-- scored queue (a ZSET). false when it is empty.
local function pop(key, n, scored)
  if not scored then
    return checked('LPOP', key, n)
  end
  local popped = checked('ZPOPMAX', key, n)
  if #popped == 0 then return false end
  local items, scores = {}, {}
  for i = 1, #popped, 2 do
    items[#items + 1] = popped[i]
    scores[#scores + 1] = popped[i + 1]
  end
  return items, scores
end
-- Puts a failed batch back: its claim writes undone (each may fail too, on
-- the key that broke the batch), its items back at the head of their queue
-- in their order, and in the queued index.
local function undo_batch(key, scored, batch, scores, written, batch_id)
  if #written > 0 then
    redis.pcall('HDEL', KEYS[9], unpack(written))
    if batch_id then
      -- The plain path's claim batch: every item leaves it, so it goes.
      pcall(batch_leave, batches_key, batch_deadlines_key, batch_id, #written)
    else
      redis.pcall('ZREM', KEYS[8], unpack(written))
    end
  end
  if scored then
    for i, item in ipairs(batch) do redis.pcall('ZADD', key, scores[i], item) end
    return
  end
  local reversed = {}
  for i = #batch, 1, -1 do reversed[#reversed + 1] = batch[i] end
  redis.pcall('LPUSH', key, unpack(reversed))
  redis.pcall('SADD', index, unpack(batch))
end
-- Undoes every batch this call popped, newest first.
local function undo_all()
  for b = #batches, 1, -1 do
    local done_batch = batches[b]
    undo_batch(done_batch.key, done_batch.scored, done_batch.batch, done_batch.scores, done_batch.written, done_batch.batch_id)
    if budget_on and #done_batch.written > 0 then
      redis.pcall('HINCRBY', KEYS[11], downloader, -#done_batch.written)
    end
  end
end
local function pop_fresh(key, want, group, scored, redo)
  local rounds = 0
  while want > 0 and rounds < 8 do
    rounds = rounds + 1
    local asked = want
    local popped, batch, scores = pcall(pop, key, asked, scored)
    if not popped then
      undo_all()
      error(batch, 0)
    end
    if not batch then return end
    local written = {}
    local ok, err = pcall(function()
      if not scored then checked_chunked('SREM', index, batch) end
      -- Items already out or done were queued twice: one look-up per batch.
      local in_claims, in_done, in_recent = {}, {}, {}
      if pop_check then
        in_claims = checked('HMGET', KEYS[9], unpack(batch))
        in_done = checked('SMISMEMBER', KEYS[10], unpack(batch))
        if present(20) then in_recent = checked('ZMSCORE', KEYS[20], unpack(batch)) end
      end
      local deadline_args, claim_args = {}, {}
      local first_record, first_deadline
      for i, item in ipairs(batch) do
        if redo and present(25) and checked('HDEL', KEYS[25], item) == 1 then
          -- completed while this copy waited (done.lua marks, never scans)
          dropped = dropped + 1
        elseif picked[item] or in_claims[i] or in_done[i] == 1 or in_recent[i] then
          dropped = dropped + 1
        else
          picked[item] = true
          local count, earlier = 1, '-'
          if present(16) then
            local released = checked('HGET', KEYS[16], item)
            if released then
              local before, _, claimants = parse_released(released)
              count, earlier = before + 1, push_claimant(downloader, claimants, 5)
              -- drop ourselves from the head: earlier lists the others
              earlier = string.match(earlier, '^[^,]+,(.*)$') or '-'
              if earlier == '' then earlier = '-' end
              checked('HDEL', KEYS[16], item)
            end
          end
          if count == 1 and earlier == '-' then
            -- A first claim (nearly every one): the record and deadline are
            -- the same for the whole batch, formatted once.
            first_record = first_record or format_claim(1, now, downloader, ip, '-', group)
            first_deadline = first_deadline or int(now + ttl)
            deadline_args[#deadline_args + 1] = first_deadline
            claim_args[#claim_args + 1] = item
            claim_args[#claim_args + 1] = first_record
          else
            deadline_args[#deadline_args + 1] = int(now + ttl * count)
            claim_args[#claim_args + 1] = item
            claim_args[#claim_args + 1] = format_claim(count, now, downloader, ip, earlier, group)
          end
          deadline_args[#deadline_args + 1] = item
          written[#written + 1] = item
        end
      end
      if #written > 0 and present(12) then
        local found = checked('HMGET', KEYS[12], unpack(written))
        for i, item in ipairs(written) do extras_of[item] = found[i] end
      end
      if #written > 0 then
        -- The claim record first: it is what done.lua and reclaims go by.
        checked_chunked('HSET', KEYS[9], claim_args)
        checked_chunked('ZADD', KEYS[8], deadline_args)
        if budget_on then checked('HINCRBY', KEYS[11], downloader, #written) end
      end
    end)
    if not ok then
      -- This batch and every earlier one of this call go back: a refused
      -- claim hands out nothing and leaves every item where it was.
      undo_batch(key, scored, batch, scores, written)
      undo_all()
      error(err, 0)
    end
    batches[#batches + 1] = {key = key, scored = scored, batch = batch, scores = scores, written = written}
    for _, item in ipairs(written) do taken[#taken + 1] = item end
    fresh = fresh + #written
    want = want - #written
    if #batch < asked then return end -- the queue ran dry
  end
end

-- The previous build's out, merged into deadlines a slice at a time (see
-- the note): before any pop, so a key of the wrong type refuses the claim
-- with nothing popped. Writing a slice again is harmless.
if present(7) then
  local merged, failure = pcall(function()
    local items = checked('ZRANGE', KEYS[7], 0, 99)
    if #items == 0 then return end
    local records = checked('HMGET', KEYS[9], unpack(items))
    local have = checked('ZMSCORE', KEYS[8], unpack(items))
    local missing = {}
    for i, item in ipairs(items) do
      -- (A record naming a claim batch has the batch's deadline.)
      if records[i] and not have[i] and not select(7, parse_claim(records[i])) then
        -- An unreadable record is made due now: a reclaim finds it and
        -- counts it (claims_unreadable) for an operator.
        local count, at = parse_claim(records[i])
        missing[#missing + 1] = count and int(at + ttl * count) or int(now)
        missing[#missing + 1] = item
      end
    end
    if #missing > 0 then checked('ZADD', KEYS[8], unpack(missing)) end
    checked('ZREM', KEYS[7], unpack(items))
  end)
  if not merged then
    if type(failure) == 'table' and failure.corrupt then return {R.CORRUPT, failure.corrupt} end
    error(failure, 0)
  end
end

-- Priority (seed 004): reclaims first when the claims limit or a limit
-- group's limit is hit, then the downloader's reserved queue, then the
-- scored queue (highest score first), then todo,
-- backfeed, secondary and redo (each: the groups' sub-queues as their
-- limits allow, then the rest), then reclaims.
local fresh_room = wanted
local claims_limit_hit = false
if claims_limit > 0 then
  local out = redis.call('ZCARD', KEYS[8]) + (tonumber(redis.call('HGET', batches_key, 'out') or '0') or 0)
  fresh_room = math.max(0, claims_limit - out)
  claims_limit_hit = fresh_room == 0
end
if claims_limit_hit or (reclaim_enabled and group_limit_hit()) then
  take_reclaims(wanted)
end
local function room()
  return math.min(wanted - #taken, fresh_room - fresh)
end
local function serve()
  if present(2) and room() > 0 then
    pop_fresh(KEYS[2], room(), '-')
    -- An emptied reserved queue leaves the set, so the set (and what
    -- Counts reads) stays as small as the reservations still waiting.
    if redis.call('LLEN', KEYS[2]) == 0 then
      redis.call('SREM', KEYS[24], downloader)
    end
  end
  if present(23) and room() > 0 then
    pop_fresh(KEYS[23], room(), '-', true)
  end
  for q = 0, 3 do
    for g = 0, ngroups - 1 do
      local want = math.min(room(), group_tokens[g])
      if want > 0 then
        local before = #taken
        pop_fresh(KEYS[26 + 5 * g + q], want, ARGV[10 + 3 * g], false, q == 3)
        charge_group(g, #taken - before)
      end
    end
    if room() > 0 and not (q == 0 and todo_dry) then
      pop_fresh(KEYS[3 + q], room(), '-', false, q == 3)
    end
  end
end
local served, failure = pcall(serve)
if not served then
  if type(failure) == 'table' and failure.corrupt then
    -- Every batch popped in this call is back where it was.
    return {R.CORRUPT, failure.corrupt}
  end
  error(failure, 0)
end
take_reclaims(wanted - #taken)

if dropped > 0 then
  redis.call('HINCRBY', KEYS[13], 'duplicates_dropped', dropped)
end
if unreadable > 0 then
  redis.call('HINCRBY', KEYS[13], 'claims_unreadable', unreadable)
end
if #taken == 0 then
  if claims_limit_hit then return {0, 'claims_limit'} end
  if group_limit_hit() then return {0, 'group_limit'} end
  return {0, 'empty'}
end

if budget_on and reclaims > 0 then
  redis.call('HINCRBY', KEYS[11], downloader, reclaims)
end

if reclaims > 0 and present(12) then
  -- Reclaimed items were not popped: their extras are read here.
  local again = {}
  for _, item in ipairs(taken) do
    if extras_of[item] == nil then again[#again + 1] = item end
  end
  if #again > 0 then
    local found = redis.call('HMGET', KEYS[12], unpack(again))
    for i, item in ipairs(again) do extras_of[item] = found[i] end
  end
end
local reply = {1, reclaims, cfg[11] or '{}'}
for _, item in ipairs(taken) do
  reply[#reply + 1] = item
  reply[#reply + 1] = extras_of[item] or ''
end
return reply
