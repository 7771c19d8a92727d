-- prelude.lua: helpers prepended to every script by queues.newScript, so
-- the claim-record format lives in one place. It defines functions only; it
-- reads no KEYS or ARGV and returns nothing.

-- A claim record is "<times claimed> <claimed at ms> <downloader> <ip>".
-- Downloaders match [-_a-zA-Z0-9]{3,30} and IPs never hold spaces, so a
-- space-separated string is unambiguous and cheaper than cjson.
local function parse_claim(record)
  local count, at, downloader, ip = string.match(record, '^(%d+) (%d+) (%S+) (%S+)$')
  return tonumber(count), tonumber(at), downloader, ip
end

local function format_claim(count, at, downloader, ip)
  return string.format('%d %.0f %s %s', count, at, downloader, ip)
end

-- Integral numbers as text without Lua 5.1's exponent formatting.
local function int(n)
  return string.format('%.0f', n)
end

-- One fewer item out for a downloader; the field goes when it reaches zero
-- so the budget hash stays as small as the set of active downloaders.
local function budget_decrement(key, downloader)
  if redis.call('HINCRBY', key, downloader, -1) <= 0 then
    redis.call('HDEL', key, downloader)
  end
end

-- Calls a variadic command with args in slices of at most 1000, because
-- unpack() of a very long table overflows Lua's C stack.
local function call_chunked(command, key, args)
  local total = 0
  for i = 1, #args, 1000 do
    local last = math.min(i + 999, #args)
    total = total + redis.call(command, key, unpack(args, i, last))
  end
  return total
end
