-- forget_group.lua: drop a removed limit group from the known set once all
-- its sub-queues are empty, atomically, so no item can be left in a
-- sub-queue that claims no longer look at.
--
-- KEYS[1] groups_known SET
-- KEYS[2..5] the group's sub-queues of todo, todo:backfeed, todo:secondary
--            and todo:redo (LIST)
--
-- ARGV[1] the group's name
--
-- Returns 1 when the group was forgotten, 0 when a sub-queue still holds items.

for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
redis.call('SREM', KEYS[1], ARGV[1])
return 1
