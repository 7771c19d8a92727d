package outbox

import (
	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The codes a script returns first when it refuses, named once here and
// handed to every script as the Lua table R, so Go and Lua cannot
// disagree on a number. Counts (0 or more) are not codes.
const (
	codeFull    = -1 // append: the batch would pass max_pending
	codeUnknown = -2 // ack (strict): an id never given; retry: an id not dead
	codeDead    = -3 // ack (strict): an id is dead (retry it first)
)

var scriptCodes = map[string]int64{"FULL": codeFull, "UNKNOWN": codeUnknown, "DEAD": codeDead}

func loadScript(name string) *luascript.Script {
	return btstore.Script(name, btstore.LuaCodes(scriptCodes))
}

var (
	appendScript = loadScript("outbox_append.lua")
	claimScript  = loadScript("outbox_claim.lua")
	ackScript    = loadScript("outbox_ack.lua")
	failScript   = loadScript("outbox_fail.lua")
	retryScript  = loadScript("outbox_retry.lua")
)
