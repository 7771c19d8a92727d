-- frontend_forget.lua: takes a frontend off the registry once the feed's
-- backstop found, and delivered, what it left (swarm.ForgetFrontend), only
-- while its heartbeat is still gone and its "fed up to" is still the one
-- the backstop read. A frontend that came back between the read and here
-- wrote both (swarm's beat, one transaction), so it keeps its entry:
-- dropped, a later kill -9 of it would leave records no backstop looks for.
--
-- KEYS[1] registry  HASH   frontend id -> "fed up to" (ms; btstore.FrontendsKey)
-- KEYS[2] heartbeat STRING the frontend's heartbeat (btstore.FrontendHeartbeatKey)
--
-- ARGV[1] the frontend's id
-- ARGV[2] its "fed up to" as read (ms, decimal)
--
-- Returns 1 when the entry went, 0 when it stays.

if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
return redis.call('HDEL', KEYS[1], ARGV[1])
