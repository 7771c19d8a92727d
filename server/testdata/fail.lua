-- A grab script reporting an item it could not do, as seesaw cannot:
-- POST <tracker>/<slug>/fail with a JSON body {downloader, item, reason},
-- sent with LuaSocket's generic http.request so it can set the JSON
-- content type. Prints the status and the reply's body.
-- usage: lua5.1 fail.lua <tracker url> <slug> <downloader> <item> <reason>
local http = require("socket.http")
local ltn12 = require("ltn12")
local tracker, slug, downloader, item, reason = arg[1], arg[2], arg[3], arg[4], arg[5]

-- JSON string: quotes, backslashes and control characters escaped.
local function json_string(s)
  return '"' .. string.gsub(s, '[%c"\\]', function(c)
    return string.format('\\u%04x', string.byte(c))
  end) .. '"'
end

local body = '{"downloader":' .. json_string(downloader) .. ',"item":' .. json_string(item) ..
  ',"reason":' .. json_string(reason) .. '}'
local reply = {}
local _, code = http.request{
  url = tracker .. "/" .. slug .. "/fail",
  method = "POST",
  headers = {["Content-Type"] = "application/json", ["Content-Length"] = tostring(#body)},
  source = ltn12.source.string(body),
  sink = ltn12.sink.table(reply),
}
io.write(tostring(code), " ", table.concat(reply), "\n")
