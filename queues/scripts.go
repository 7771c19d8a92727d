package queues

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/hoardproject/hoard/lua"

	"github.com/hoardproject/hoard/internal/luascript"
)

// Every script, loaded from lua/ with the shared prelude prepended.
var (
	claimScript = loadScript("claim.lua")
	doneScript  = loadScript("done.lua")
	// The plain paths' scripts carry no prelude: each of its functions is a
	// closure made on every call, and these scripts need none of them.
	claimPlainScript = loadPlainScript("claim_plain.lua")
	donePlainScript  = loadPlainScript("done_plain.lua")
	// done_plain.lua after a step that completes a done of one whole claim
	// batch from the batch's record (lua/done_plain_whole.lua): run only
	// while every frontend counts batches down (Options.PreBatchFrontends).
	donePlainWholeScript = luascript.LoadJoined(lua.Files, []string{"done_plain_whole.lua", "done_plain.lua"},
		luaCodes(plainScriptCodes["done_plain_whole.lua"]...))
	// Concurrent one-item plain claims and dones of a project, coalesced
	// into one call (plainbatch.go).
	claimPlainManyScript = loadPlainScript("claim_plain_many.lua")
	donePlainManyScript  = loadPlainScript("done_plain_many.lua")
	releaseScript        = loadScript("release.lua")
	enqueueScript        = loadScript("enqueue.lua")
	configWriteScript    = loadScript("config_write.lua")
	rescoreScript        = loadScript("rescore.lua")
	siftScript           = loadScript("sift.lua")
	filterSiftScript     = loadScript("filter_sift.lua")
	scoredSiftScript     = loadScript("filter_sift_scored.lua")
	forgetGroupScript    = loadScript("forget_group.lua")
	// bloom_add.lua carries no prelude either: it runs once per ~100
	// items, and defines the one helper it needs.
	bloomAddScript = loadPlainScript("bloom_add.lua")

	offloadTakeScript   = loadScript("offload_take.lua")
	offloadCommitScript = loadScript("offload_commit.lua")
	orphanCheckScript   = loadScript("orphan_check.lua")
	offloadAbortScript  = loadScript("offload_abort.lua")
	refillScript        = loadScript("refill.lua")
	segmentMoveScript   = loadScript("segment_move.lua")
	segmentIndexScript  = loadScript("segment_index.lua")
	doneDrainScript     = loadScript("done_drain.lua")
	archiveFinishScript = loadScript("archive_finish.lua")
	countersFlushScript = loadScript("counters_flush.lua")
	blockWriteScript    = loadScript("block_write.lua")
)

// plainScriptCodes are the result codes the scripts without the prelude
// return: R holds only these there (TestPlainScriptsNameOnlyTheirCodes).
var plainScriptCodes = map[string][]string{
	"claim_plain.lua":      {"STALE_CONFIG", "NOT_PLAIN", "CORRUPT"},
	"done_plain.lua":       {"NOT_PLAIN", "CORRUPT"},
	"done_plain_whole.lua": {"NOT_PLAIN", "CORRUPT"}, // and done_plain.lua's, which it runs
	"claim_plain_many.lua": {"STALE_CONFIG", "CORRUPT"},
	"done_plain_many.lua":  {"NOT_PLAIN", "CORRUPT"},
	"bloom_add.lua":        {"NO_PROJECT", "BAD_SECRET", "STALE_FILTER", "STALE_GROUPS"},
}

// warriorPathScripts are run through the engine's Batcher: the
// warrior path's many small concurrent calls gain from sharing a batch. The
// other scripts are rare, or long enough that a batch would only hold
// claims behind them.
var warriorPathScripts = map[*luascript.Script]bool{claimScript: true, doneScript: true, claimPlainScript: true, donePlainScript: true, donePlainWholeScript: true}

var prelude = luascript.Prelude(lua.Files, "prelude.lua")

// loadScript loads a queue script with the named result codes (R) and the
// shared prelude prepended.
func loadScript(name string) *luascript.Script {
	return luascript.Load(lua.Files, name, luaCodes(), prelude)
}

// loadPlainScript loads a script without the prelude, its R holding only
// the codes plainScriptCodes lists for it.
func loadPlainScript(name string) *luascript.Script {
	return luascript.Load(lua.Files, name, luaCodes(plainScriptCodes[name]...))
}

// runScript runs a script with EVALSHA (EVAL once after a NOSCRIPT) and
// wraps failures as CodeUnavailable errors of op. On a cluster go-redis
// routes it by KEYS[1]; all KEYS share one hash tag, so one slot.
func (e *Engine) runScript(ctx context.Context, op string, script *luascript.Script, keys []string, args ...any) (any, error) {
	var reply any
	var err error
	if warriorPathScripts[script] {
		reply, err = e.warriorPath.Run(ctx, script, keys, args...)
	} else {
		reply, err = luascript.Run(ctx, e.rdb, script, keys, args...)
	}
	if err != nil {
		return nil, unavailable(op, err)
	}
	return reply, nil
}

// runScriptInt runs a script that returns one integer.
func (e *Engine) runScriptInt(ctx context.Context, op string, script *luascript.Script, keys []string, args ...any) (int64, error) {
	reply, err := e.runScript(ctx, op, script, keys, args...)
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	if !ok {
		return 0, unavailable(op, fmt.Errorf("script replied %T, want an integer", reply))
	}
	return n, nil
}

// runScriptList runs a script that returns an array whose first element is
// an integer status code.
func (e *Engine) runScriptList(ctx context.Context, op string, script *luascript.Script, keys []string, args ...any) (int64, []any, error) {
	reply, err := e.runScript(ctx, op, script, keys, args...)
	if err != nil {
		return 0, nil, err
	}
	return scriptListReply(op, reply)
}

// scriptListReply reads a script's reply that is an array whose first
// element is an integer status code.
func scriptListReply(op string, reply any) (int64, []any, error) {
	list, ok := reply.([]any)
	if !ok || len(list) == 0 {
		return 0, nil, unavailable(op, fmt.Errorf("script replied %T, want an array", reply))
	}
	code, ok := list[0].(int64)
	if !ok {
		return 0, nil, unavailable(op, fmt.Errorf("script status is %T, want an integer", list[0]))
	}
	return code, list[1:], nil
}

// replyString reads a script reply element that may come back as a bulk
// string or an integer.
func replyString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

func replyInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// runWithGroups runs a script whose KEYS depend on the project's limit
// groups: build makes KEYS and ARGV from the groups as last read. When the
// script answers codeStaleGroups (another frontend changed them in
// between), the groups are read again and the script runs again, three
// times in all before giving up.
func (e *Engine) runWithGroups(ctx context.Context, op, slug string, script *luascript.Script,
	build func(state *groupState) (keys []string, args []any)) (int64, []any, error) {
	state, err := e.limitGroups(ctx, slug, false)
	if err != nil {
		return 0, nil, err
	}
	for attempt := 0; ; attempt++ {
		keys, args := build(state)
		code, rest, err := e.runScriptList(ctx, op, script, keys, args...)
		if err != nil || code != codeStaleGroups {
			return code, rest, err
		}
		if attempt == 2 {
			return 0, nil, unavailable(op, errors.New("the project's limit groups kept changing"))
		}
		if state, err = e.limitGroups(ctx, slug, true); err != nil {
			return 0, nil, err
		}
	}
}

// applySiftPage runs one page of a sift (sift.lua or filter_sift.lua, which
// answer alike: {popped, moved, rotated, unseen}) and adds it to result.
// stale: the decisions were made with groups or filters that changed
// meanwhile (nothing was popped; decide the page again); empty: the source
// is empty.
func (e *Engine) applySiftPage(ctx context.Context, op, slug string, script *luascript.Script, keys []string, args []any, result *SiftResult) (stale, empty bool, err error) {
	code, rest, err := e.runScriptList(ctx, op, script, keys, args...)
	if err != nil {
		return false, false, err
	}
	switch code {
	case codeNoProject:
		return false, false, errorf(op, CodeProjectNotFound, "no project %q", slug)
	case codeStaleGroups:
		return true, false, nil
	}
	result.Moved += int(replyInt(rest[0]))
	result.Scanned += int(replyInt(rest[0]) + replyInt(rest[1]))
	return false, code == 0, nil
}
