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
-- KEYS[7]  out        ZSET  item -> claimed at (ms)
-- KEYS[8]  deadlines  ZSET  item -> reclaim deadline (ms)
-- KEYS[9]  claims     HASH  item -> claim record
-- KEYS[10] done       SET
-- KEYS[11] budget     HASH  downloader -> items out
-- KEYS[12] extras     HASH  item -> JSON object of extra keys
-- KEYS[13] stats      HASH  counters
-- KEYS[14] blocked    HASH  nickname or IP -> JSON reason
-- KEYS[15] rate       STRING GCRA theoretical arrival time (ms, fractional)
-- KEYS[16] released   HASH  item -> released record, for items released to redo
-- KEYS[17] rate:d     STRING this downloader's GCRA state
-- KEYS[18] rate:ip    STRING this client IP's GCRA state
-- KEYS[19] hourly     HASH  this hour's counters (expires after 8 days)
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
-- and last, KEYS[#KEYS] queued SET the items waiting in the list queues: a
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
--
-- Note: the script cannot stop between a pop and its claim record. Every key
-- it touches is type-checked, and every counter it increments is checked to
-- be an integer, before its first write (a failing command in a script keeps
-- the writes before it); each popped batch's out, deadlines, claims and
-- budget are written right after its pop; a due claim whose record is
-- missing or unreadable is skipped and counted (claims_unreadable).

local now = tonumber(ARGV[1])
local downloader = ARGV[2]
local ip = ARGV[3]
local wanted = tonumber(ARGV[4])
local version = ARGV[5]
local global_block = ARGV[6]
local groups_version = ARGV[7]
local ngroups = (#KEYS - 26) / 5
local index = KEYS[#KEYS]
local group_index = {}
for g = 0, ngroups - 1 do
  group_index[ARGV[10 + 3 * g]] = g
end

local cfg = redis.call('HMGET', KEYS[1], 'created_at', 'paused', 'min_version',
  'rate_per_minute', 'rate_burst', 'downloader_budget', 'claims_limit',
  'reclaim_enabled', 'reclaim_ttl_ms', 'max_multi', 'extra', 'limit_groups_version',
  'downloader_rate_per_minute', 'downloader_rate_burst', 'ip_rate_per_minute', 'ip_rate_burst',
  'ignore_global_blocks', 'event_log')
if not cfg[1] then
  return {R.NO_PROJECT, 'no such project'}
end
if (cfg[12] or '0') ~= groups_version then
  return {R.STALE_GROUPS, cfg[12] or '0'}
end
if cfg[2] == '1' then
  return {R.PAUSED, 'paused'}
end

-- Validate before the first write (see the note above).
local expected_types = {
  [2] = 'list', [3] = 'list', [4] = 'list', [5] = 'list', [6] = 'list',
  [7] = 'zset', [8] = 'zset', [9] = 'hash', [10] = 'set', [11] = 'hash',
  [12] = 'hash', [13] = 'hash', [14] = 'hash', [15] = 'string', [16] = 'hash',
  [17] = 'string', [18] = 'string', [19] = 'hash', [20] = 'zset',
  [21] = 'stream', [22] = 'string', [23] = 'zset', [24] = 'set', [25] = 'hash',
  [#KEYS] = 'set',
}
for g = 0, ngroups - 1 do
  for q = 0, 3 do expected_types[26 + 5 * g + q] = 'list' end
  expected_types[30 + 5 * g] = 'string'
end
for i, want in pairs(expected_types) do
  local have = redis.call('TYPE', KEYS[i])['ok']
  if have ~= 'none' and have ~= want then
    return {R.CORRUPT, KEYS[i] .. ' is a ' .. have .. ', not a ' .. want}
  end
end
local function integer_field(value)
  return value == false or (#value <= 18 and string.find(value, '^%-?%d+$') ~= nil)
end
local counters = {'requests', 'requests_blocked', 'requests_too_old', 'requests_rate_limited',
  'requests_empty', 'requests_group_limited', 'requests_served', 'items_served',
  'requests_served_reclaim', 'reclaims_served', 'items_reclaimed', 'duplicates_dropped',
  'claims_unreadable'}
local values = redis.call('HMGET', KEYS[13], unpack(counters))
for i, field in ipairs(counters) do
  if not integer_field(values[i]) then
    return {R.CORRUPT, KEYS[13] .. ' field ' .. field .. ' is not an integer'}
  end
end
local hourly_counters = {'requests', 'requests_served', 'requests_served_reclaim'}
values = redis.call('HMGET', KEYS[19], unpack(hourly_counters))
for i, field in ipairs(hourly_counters) do
  if not integer_field(values[i]) then
    return {R.CORRUPT, KEYS[19] .. ' field ' .. field .. ' is not an integer'}
  end
end
if not integer_field(redis.call('HGET', KEYS[11], downloader)) then
  return {R.CORRUPT, KEYS[11] .. ' field ' .. downloader .. ' is not an integer'}
end

-- Block targets are stored lower-cased (queues.blockKey); the exact
-- spelling is still looked up for entries stored before that.
local block = redis.call('HGET', KEYS[14], string.lower(downloader)) or redis.call('HGET', KEYS[14], downloader)
  or redis.call('HGET', KEYS[14], string.lower(ip))
if not block and global_block ~= '' and cfg[17] ~= '1' then
  block = global_block
end
if block then
  redis.call('HINCRBY', KEYS[13], 'requests_blocked', 1)
  return {R.BLOCKED, block}
end

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

local min_version = cfg[3]
if min_version and min_version ~= '' and (version == '' or version_less(version, min_version)) then
  redis.call('HINCRBY', KEYS[13], 'requests_too_old', 1)
  return {R.TOO_OLD, min_version}
end

redis.call('HINCRBY', KEYS[13], 'requests', 1)
local function hourly(field, n)
  redis.call('HINCRBY', KEYS[19], field, n)
end
hourly('requests', 1)
redis.call('EXPIRE', KEYS[19], 691200)

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
  redis.call('HINCRBY', KEYS[13], 'requests_rate_limited', 1)
  return {R.RATE_LIMITED, int(math.ceil(wait))}
end
gcra_charge(charge_project)
gcra_charge(charge_downloader)
gcra_charge(charge_ip)

local max_multi = tonumber(cfg[10] or '0') or 0
if max_multi > 0 then wanted = math.min(wanted, max_multi) end

local budget_limit = tonumber(cfg[6] or '0') or 0
if budget_limit > 0 then
  local have = tonumber(redis.call('HGET', KEYS[11], downloader) or '0')
  if have >= budget_limit then
    redis.call('HINCRBY', KEYS[13], 'requests_empty', 1)
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
local ttl = tonumber(cfg[9] or '0') or 0
if ttl <= 0 then ttl = 21600000 end

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
  local due = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, want * 4 + 16)
  for d = 1, #due, 2 do
    local item, deadline = due[d], tonumber(due[d + 1])
    if want <= 0 then break end
    local record = redis.call('HGET', KEYS[9], item)
    local count, _, previous, _, earlier, group
    if record then
      count, _, previous, _, earlier, group = parse_claim(record)
    end
    if not count then
      -- Missing or unreadable: leave it due for an operator, never guess.
      unreadable = unreadable + 1
    else
    local g = group_index[group]
    if g == nil or group_tokens[g] > 0 then
    if g ~= nil then charge_group(g, 1) end
    want = want - 1
    budget_decrement(KEYS[11], previous)
    count = count + 1
    if count == 2 then
      redis.call('HINCRBY', KEYS[13], 'items_reclaimed', 1)
    end
    -- Written at once (not batched) so a second ZRANGEBYSCORE in this call
    -- cannot see the item as due again.
    redis.call('HSET', KEYS[9], item, format_claim(count, now, downloader, ip, push_claimant(previous, earlier, 4), group))
    redis.call('ZADD', KEYS[7], int(now), item)
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
local any_released = redis.call('EXISTS', KEYS[16]) == 1
local any_recent = redis.call('EXISTS', KEYS[20]) == 1
-- Pops up to n items: the head of a list, or the highest scores of the
-- scored queue (a ZSET). false when it is empty.
local function pop(key, n, scored)
  if not scored then
    local items = redis.call('LPOP', key, n)
    if items then call_chunked('SREM', index, items) end
    return items
  end
  local popped = redis.call('ZPOPMAX', key, n)
  if #popped == 0 then return false end
  local items = {}
  for i = 1, #popped, 2 do items[#items + 1] = popped[i] end
  return items
end
local any_cancelled = redis.call('EXISTS', KEYS[25]) == 1
local function pop_fresh(key, want, group, scored, redo)
  local rounds = 0
  while want > 0 and rounds < 8 do
    rounds = rounds + 1
    local asked = want
    local batch = pop(key, asked, scored)
    if not batch then return end
    -- This batch's claims are written before anything else can run.
    local out_args, deadline_args, claim_args = {}, {}, {}
    for _, item in ipairs(batch) do
      if redo and any_cancelled and redis.call('HDEL', KEYS[25], item) == 1 then
        -- completed while this copy waited (done.lua marks, never scans)
        dropped = dropped + 1
      elseif picked[item] or redis.call('HEXISTS', KEYS[9], item) == 1 or redis.call('SISMEMBER', KEYS[10], item) == 1
          or (any_recent and redis.call('ZSCORE', KEYS[20], item)) then
        dropped = dropped + 1
      else
        picked[item] = true
        local count, earlier = 1, '-'
        if any_released then
          local released = redis.call('HGET', KEYS[16], item)
          if released then
            local before, _, claimants = parse_released(released)
            count, earlier = before + 1, push_claimant(downloader, claimants, 5)
            -- drop ourselves from the head: earlier lists the others
            earlier = string.match(earlier, '^[^,]+,(.*)$') or '-'
            if earlier == '' then earlier = '-' end
            redis.call('HDEL', KEYS[16], item)
          end
        end
        taken[#taken + 1] = item
        out_args[#out_args + 1] = int(now)
        out_args[#out_args + 1] = item
        deadline_args[#deadline_args + 1] = int(now + ttl * count)
        deadline_args[#deadline_args + 1] = item
        claim_args[#claim_args + 1] = item
        claim_args[#claim_args + 1] = format_claim(count, now, downloader, ip, earlier, group)
        want = want - 1
      end
    end
    if #claim_args > 0 then
      call_chunked('ZADD', KEYS[7], out_args)
      call_chunked('ZADD', KEYS[8], deadline_args)
      call_chunked('HSET', KEYS[9], claim_args)
      redis.call('HINCRBY', KEYS[11], downloader, #claim_args / 2)
      fresh = fresh + #claim_args / 2
    end
    if #batch < asked then return end -- the queue ran dry
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
  fresh_room = math.max(0, claims_limit - redis.call('ZCARD', KEYS[7]))
  claims_limit_hit = fresh_room == 0
end
if claims_limit_hit or (reclaim_enabled and group_limit_hit()) then
  take_reclaims(wanted)
end
local function room()
  return math.min(wanted - #taken, fresh_room - fresh)
end
if room() > 0 then
  pop_fresh(KEYS[2], room(), '-')
  -- An emptied reserved queue leaves the set, so the set (and what Counts
  -- reads) stays as small as the reservations still waiting.
  if redis.call('LLEN', KEYS[2]) == 0 then
    redis.call('SREM', KEYS[24], downloader)
  end
end
if room() > 0 then
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
  if room() > 0 then
    pop_fresh(KEYS[3 + q], room(), '-', false, q == 3)
  end
end
take_reclaims(wanted - #taken)

if dropped > 0 then
  redis.call('HINCRBY', KEYS[13], 'duplicates_dropped', dropped)
end
if unreadable > 0 then
  redis.call('HINCRBY', KEYS[13], 'claims_unreadable', unreadable)
end
if #taken == 0 then
  redis.call('HINCRBY', KEYS[13], 'requests_empty', 1)
  if claims_limit_hit then return {0, 'claims_limit'} end
  if group_limit_hit() then
    redis.call('HINCRBY', KEYS[13], 'requests_group_limited', 1)
    return {0, 'group_limit'}
  end
  return {0, 'empty'}
end

if reclaims > 0 then
  redis.call('HINCRBY', KEYS[11], downloader, reclaims)
end
redis.call('HINCRBY', KEYS[13], 'requests_served', 1)
redis.call('HINCRBY', KEYS[13], 'items_served', #taken)
hourly('requests_served', 1)
if reclaims > 0 then
  redis.call('HINCRBY', KEYS[13], 'requests_served_reclaim', 1)
  redis.call('HINCRBY', KEYS[13], 'reclaims_served', reclaims)
  hourly('requests_served_reclaim', 1)
end

local extras = {}
if redis.call('EXISTS', KEYS[12]) == 1 then
  extras = redis.call('HMGET', KEYS[12], unpack(taken))
end
local reply = {1, reclaims, cfg[11] or '{}'}
for i, item in ipairs(taken) do
  reply[#reply + 1] = item
  reply[#reply + 1] = extras[i] or ''
end
return reply
