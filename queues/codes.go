package queues

import (
	"fmt"
	"sort"
	"strings"
)

// The failure codes a Lua script returns first in its reply. Each is named
// once, here: loadScript hands the same names to every script as the Lua
// table R (R.NO_PROJECT, ...), so Go and Lua cannot disagree on a number.
// Replies that start with a count (0 or more) are not codes; codes are
// negative.
const (
	codeNoProject    = -1  // the project does not exist
	codeTooOld       = -2  // claim: the client's version is below the minimum
	codeBlocked      = -3  // claim: the nickname or IP is blocked
	codeRateLimited  = -4  // claim: over a rate limit
	codePaused       = -5  // claim: the project is paused
	codeStaleGroups  = -6  // the limit groups changed: rebuild KEYS and retry
	codeCorrupt      = -7  // a key has the wrong type or an unreadable value; nothing changed
	codeNotHandedOut = -8  // done: items never handed out
	codeNotClaimant  = -9  // done: items claimed by someone else
	codeCountDiffers = -10 // refill: the item count does not match the record
	codeMoved        = -11 // refill: the segment moved to another queue
	codeBadSecret    = -12 // backfeed: wrong secret, or backfeed is off
	codeStaleFilter  = -13 // backfeed: the Bloom generations changed: re-read them
	codeStaleConfig  = -14 // claim_plain: the cached settings are stale; nothing changed
	codeNotPlain     = -15 // claim_plain, done_plain: not a plain call; run the general script
)

// scriptCodes names the codes for Lua.
var scriptCodes = map[string]int64{
	"NO_PROJECT":     codeNoProject,
	"TOO_OLD":        codeTooOld,
	"BLOCKED":        codeBlocked,
	"RATE_LIMITED":   codeRateLimited,
	"PAUSED":         codePaused,
	"STALE_GROUPS":   codeStaleGroups,
	"CORRUPT":        codeCorrupt,
	"NOT_HANDED_OUT": codeNotHandedOut,
	"NOT_CLAIMANT":   codeNotClaimant,
	"COUNT_DIFFERS":  codeCountDiffers,
	"MOVED":          codeMoved,
	"BAD_SECRET":     codeBadSecret,
	"STALE_FILTER":   codeStaleFilter,
	"STALE_CONFIG":   codeStaleConfig,
	"NOT_PLAIN":      codeNotPlain,
}

// luaCodes is the Lua line that defines R, prepended to every script:
// every code, or only the named ones (a table is built on every call, so
// the plain paths' scripts name the few they return).
func luaCodes(only ...string) string {
	names := only
	if len(names) == 0 {
		for name := range scriptCodes {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if _, ok := scriptCodes[name]; !ok {
			panic("no script code " + name)
		}
	}
	sort.Strings(names)
	fields := make([]string, len(names))
	for i, name := range names {
		fields[i] = fmt.Sprintf("%s = %d", name, scriptCodes[name])
	}
	return "local R = {" + strings.Join(fields, ", ") + "}\n"
}
