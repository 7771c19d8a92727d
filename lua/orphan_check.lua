-- orphan_check.lua: of the ids of files that look orphaned, say which have
-- no segment record, and make sure none of them can ever get one: the
-- project's id sequence is raised past them in the same step. offload_take
-- refuses an id at or below the sequence, so a file found unreferenced here
-- can be removed by name afterwards without racing an offload that takes
-- the same id and renames a live segment over it.
--
-- KEYS[1] segments HASH id -> "state queue count node created source"
-- KEYS[2] offload  HASH "seq" -> the highest segment id handed out
--
-- ARGV[1..] the candidate ids (12 digits)
--
-- Returns the candidate ids that have no record.

local unreferenced = {}
local highest = 0
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    unreferenced[#unreferenced + 1] = ARGV[i]
    highest = math.max(highest, tonumber(ARGV[i]))
  end
end
local seq = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0') or 0
if highest > seq then
  redis.call('HSET', KEYS[2], 'seq', int(highest))
end
return unreferenced
