package swarm

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"github.com/hoardproject/hoard/internal/luascript"
)

// Every script, loaded from package btstore. Only the scripts that call
// the prelude's rules (announce.lua, expire.lua, refresh.lua) have it
// prepended: Redis runs a script's whole body on every call, so the
// prelude's closures and tables would otherwise be built for nothing on
// each call (user_sets.lua runs on every flush, feed_settle.lua and
// zrem_unchanged.lua once per torrent per round). expire.lua has the
// codes too: it calls none of the prelude's functions that name them, but
// a function library may not name a global it lacks (luascript's
// TestNoScriptUsesAGlobal).
var (
	announceScript      = btstore.Script("announce.lua", btstore.LuaCodes(announceCodes), prelude)
	expireScript        = btstore.Script("expire.lua", btstore.LuaCodes(announceCodes), prelude)
	dueSettleScript     = btstore.Script("due_settle.lua")
	userSetsScript      = btstore.Script("user_sets.lua")
	zremUnchangedScript = btstore.Script("zrem_unchanged.lua")

	// a user's passkeys and its purge (users.go)
	userAddScript         = btstore.Script("user_add.lua")
	userRemoveScript      = btstore.Script("user_remove.lua")
	userListScript        = btstore.Script("user_list.lua")
	userPurgeStartScript  = btstore.Script("user_purge_start.lua")
	userPurgeRecordScript = btstore.Script("user_purge_record.lua")
	userPurgeDropScript   = btstore.Script("user_purge_drop.lua")
	passkeyDropScript     = btstore.Script("passkey_drop.lua")

	// credited transfer (credit.go)
	creditTorrentScript = btstore.Script("credit_torrent.lua")
	creditConvertScript = btstore.Script("credit_convert.lua")
	tokenSetScript      = btstore.Script("token_set.lua")
	feedSettleScript    = btstore.Script("feed_settle.lua")

	// the frontends' registry (frontends.go)
	frontendForgetScript = btstore.Script("frontend_forget.lua")

	// the cheat signals (watch.go)
	cheatAddrsScript = btstore.Script("cheat_addrs.lua")
	cheatStampScript = btstore.Script("cheat_stamp.lua")
)

var prelude = btstore.Prelude()

// The codes announce.lua refuses with, named once here and handed to the
// script as its table R.
const (
	codeUnregistered = -1
	codePeerTaken    = -2
	codePeerLimit    = -3
	codeFlood        = -4
)

// The token events announce.lua returns (prelude's user_credit), named
// once here and handed to the script as R.TOKEN_USED and R.TOKEN_ENDED.
const (
	tokenUsed  = 1
	tokenEnded = 2
)

var announceCodes = map[string]int64{
	"UNREGISTERED": codeUnregistered, "PEER_TAKEN": codePeerTaken, "PEER_LIMIT": codePeerLimit, "FLOOD": codeFlood,
	"TOKEN_USED": tokenUsed, "TOKEN_ENDED": tokenEnded,
	// the credit reply's groups, bits of its mask (credit_reply.go)
	"CREDIT_EXTRA": creditExtra, "CREDIT_TOKEN": creditToken, "CREDIT_ROW": creditRow,
	"CREDIT_ROW_EXTRA": creditRowExtra, "CREDIT_SNATCHED": creditSnatched,
}

// runScriptList runs a script that returns an array (luascript.Run: FCALL,
// loading its function if missing). On a cluster go-redis routes it by KEYS[1]; all
// KEYS share one hash tag, so one slot.
func (s *Store) runScriptList(ctx context.Context, op string, script *luascript.Script, keys []string, args ...any) ([]any, error) {
	list, err := luascript.RunList(ctx, s.rdb, script, keys, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return list, nil
}

// scriptCall is one script invocation in a pipelined batch; script,
// when set, replaces the batch's script for this call.
type scriptCall struct {
	keys   []string
	args   []any
	script *luascript.Script
}

func (c *scriptCall) scriptOr(batch *luascript.Script) *luascript.Script {
	if c.script != nil {
		return c.script
	}
	return batch
}

// runScriptsPipelined runs many invocations of one script in a single
// pipeline (go-redis splits it by node on a cluster) and returns one
// command per call, in order. Calls a node answered without running (its
// functions lost to a restart or a flush) are loaded and sent again in one
// more pipeline (luascript.RunPipelined), so a restart costs one extra
// round trip, not one per call.
func (s *Store) runScriptsPipelined(ctx context.Context, script *luascript.Script, calls []scriptCall) []*redis.Cmd {
	if len(calls) == 0 {
		return nil
	}
	run := make([]luascript.Call, len(calls))
	for i := range calls {
		run[i] = luascript.Call{Script: calls[i].scriptOr(script), Keys: calls[i].keys, Args: calls[i].args}
	}
	return luascript.RunPipelined(ctx, s.rdb, run)
}

// cmdList reads a pipelined script reply that should be an array.
func cmdList(cmd *redis.Cmd) ([]any, error) {
	reply, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	list, ok := reply.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("script replied %T, want an array", reply)
	}
	return list, nil
}

var errBadReply = errors.New("malformed script reply")

// replyInt reads a script reply element that may come back as an integer
// or as a number in a bulk string.
func replyInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		if n, ok := parseDecimal(v); ok {
			return n
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// parseDecimal reads s when it is empty (0) or 1 to 18 decimal digits,
// and says 0 for text ParseInt would refuse too, without the error
// ParseInt allocates for it: replyInt meets such elements on every
// announce (the memory profile of BenchmarkFeedSticky). ok is false for
// a sign or a longer number: ParseInt reads those.
func parseDecimal(s string) (n int64, ok bool) {
	if len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, i > 0 || (c != '-' && c != '+')
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func replyString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}
