package outbox

import (
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The codes a script returns first when it refuses, named once here and
// handed to every script as the Lua table R, so Go and Lua cannot
// disagree on a number. Counts (0 or more) are not codes.
const (
	codeFull    = -1 // append: the batch would pass max_pending
	codeUnknown = -2 // ack, retry (strict): an id is not pending / not dead
)

var scriptCodes = map[string]int64{"FULL": codeFull, "UNKNOWN": codeUnknown}

func luaCodes() string {
	names := make([]string, 0, len(scriptCodes))
	for name := range scriptCodes {
		names = append(names, name)
	}
	sort.Strings(names)
	fields := make([]string, len(names))
	for i, name := range names {
		fields[i] = fmt.Sprintf("%s = %d", name, scriptCodes[name])
	}
	return "local R = {" + strings.Join(fields, ", ") + "}\n"
}

func loadScript(name string) *redis.Script { return btstore.Script(name, luaCodes()) }

var (
	appendScript = loadScript("outbox_append.lua")
	claimScript  = loadScript("outbox_claim.lua")
	ackScript    = loadScript("outbox_ack.lua")
	failScript   = loadScript("outbox_fail.lua")
	retryScript  = loadScript("outbox_retry.lua")
)
