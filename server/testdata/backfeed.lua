-- A grab script's backfeed, as telegram-grab and urls-grab send it: items
-- joined with NUL plus a trailing NUL, POSTed with LuaSocket's simple
-- http.request(url, body) (which labels the body a form).
-- usage: lua5.1 backfeed.lua <url> <prefix> <count> [batch]
local http = require("socket.http")
local url, prefix, count, batch = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4] or "400")
local items = {}
local function flush()
  local body, code = http.request(url, table.concat(items, "\0") .. "\0")
  io.write(code, " ", body or "", "\n")
  items = {}
end
for i = 1, count do
  items[#items + 1] = prefix .. i
  if #items == batch then flush() end
end
if #items > 0 then flush() end
