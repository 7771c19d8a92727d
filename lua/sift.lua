-- sift.lua: move a batch of items from the head of one queue to others,
-- atomically. It re-routes queues when limit groups change and moves items
-- between queues for operators, beside live traffic and without a lock:
-- the caller peeks at the head, decides where each item goes, and this
-- script pops the head and applies the decisions.
--
-- KEYS[1] config  HASH
-- KEYS[2] source  LIST
-- KEYS[3..] destinations (LIST)
--
-- ARGV[1] the limit_groups_version the decisions were made with ("" = not
--         checked)
-- ARGV[2] K, how many items to pop from the source head
-- ARGV[3] mode: "all" sends every popped item to KEYS[3]; "decide" reads
--         decisions
-- ARGV[4..] with "decide": (item, d) pairs; d = 0 rotates the item to the
--         source's tail (kept, but out of the way of the next peek), d >= 1
--         sends it to KEYS[2 + d].
--
-- Returns {popped, moved, rotated, unseen}; unseen items (taken from the
-- head by a claim after the caller peeked, so the head moved) are pushed
-- back to the head in order, undecided. {R.NO_PROJECT} when the project does
-- not exist, {R.STALE_GROUPS} when the decisions are stale.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {R.NO_PROJECT}
end
if ARGV[1] ~= '' and (redis.call('HGET', KEYS[1], 'limit_groups_version') or '0') ~= ARGV[1] then
  return {R.STALE_GROUPS}
end
local k = tonumber(ARGV[2])
local batch = redis.call('LPOP', KEYS[2], k)
if not batch then
  return {0, 0, 0, 0}
end
local moved, rotated = 0, 0
local unseen = {}
local to = {}
if ARGV[3] == 'all' then
  call_chunked('RPUSH', KEYS[3], batch)
  return {#batch, #batch, 0, 0}
end
local decisions = {}
for i = 4, #ARGV, 2 do
  decisions[ARGV[i]] = tonumber(ARGV[i + 1])
end
local rotate = {}
for _, item in ipairs(batch) do
  local d = decisions[item]
  if d == nil then
    unseen[#unseen + 1] = item
  elseif d == 0 then
    rotate[#rotate + 1] = item
  else
    to[d] = to[d] or {}
    table.insert(to[d], item)
    moved = moved + 1
  end
end
for d, items in pairs(to) do
  call_chunked('RPUSH', KEYS[2 + d], items)
end
if #rotate > 0 then
  call_chunked('RPUSH', KEYS[2], rotate)
  rotated = #rotate
end
if #unseen > 0 then
  -- LPUSH reverses its arguments, so push the last first.
  local reversed = {}
  for i = #unseen, 1, -1 do reversed[#reversed + 1] = unseen[i] end
  call_chunked('LPUSH', KEYS[2], reversed)
end
return {#batch, moved, rotated, #unseen}
