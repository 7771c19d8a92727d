package luascript

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Call is one script call of RunPipelined.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
}

// Pipeliner is a client that can send a pipeline: a *redis.Client, a
// *redis.ClusterClient (which splits it by node) or a
// redis.UniversalClient.
type Pipeliner interface {
	Processor
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// RunPipelined sends calls in one pipeline, each once (see sentOnce), and
// returns one command per call, in order; each call's error is on its
// command. The calls Redis answered without running them (the function
// not loaded on a node, restarted or flushed since) go again in one more
// pipeline after their scripts are loaded, so a restart costs one extra
// round trip, not one per call. Against a server without functions it is
// EVALSHA, then EVAL after a NOSCRIPT.
func RunPipelined(ctx context.Context, rdb Pipeliner, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if evalOnly(rdb) {
		runEvalPipelined(ctx, rdb, calls, cmds, all)
		return cmds
	}
	pipeline(ctx, rdb, calls, cmds, all, fcallName)
	var missing, evalCalls []int
	for i, cmd := range cmds {
		switch err := cmd.Err(); {
		case functionMissing(err):
			missing = append(missing, i)
		case noFunctions(err):
			evalCalls = append(evalCalls, i)
		}
	}
	if len(evalCalls) > 0 {
		markEvalOnly(rdb)
		runEvalPipelined(ctx, rdb, calls, cmds, evalCalls)
	}
	// A library can go again between its load and the resend (see
	// maxLoads): those calls did not run either, and go once more.
	for range maxLoads {
		if len(missing) == 0 {
			break
		}
		missing = loadAndResend(ctx, rdb, calls, cmds, missing)
	}
	return cmds
}

// loadAndResend loads the libraries of the calls at missing and sends
// those calls again in one pipeline; it returns the calls Redis answered
// "not found" again.
func loadAndResend(ctx context.Context, rdb Pipeliner, calls []Call, cmds []*redis.Cmd, missing []int) []int {
	loaded := map[*Script]error{}
	again := missing[:0]
	for _, i := range missing {
		script := calls[i].Script
		err, tried := loaded[script]
		if !tried {
			err = script.loadFunction(ctx, rdb)
			loaded[script] = err
		}
		if err != nil {
			cmds[i] = redis.NewCmdResult(nil, fmt.Errorf("luascript: FUNCTION LOAD %s: %w", script.name, err))
			continue
		}
		again = append(again, i)
	}
	pipeline(ctx, rdb, calls, cmds, again, fcallName)
	still := again[:0]
	for _, i := range again {
		if functionMissing(cmds[i].Err()) {
			still = append(still, i)
		}
	}
	return still
}

// runEvalPipelined sends the calls at which with EVALSHA, then with EVAL
// those Redis answered NOSCRIPT.
func runEvalPipelined(ctx context.Context, rdb Pipeliner, calls []Call, cmds []*redis.Cmd, which []int) {
	pipeline(ctx, rdb, calls, cmds, which, evalShaName)
	var missing []int
	for _, i := range which {
		if noScript(cmds[i].Err()) {
			missing = append(missing, i)
		}
	}
	pipeline(ctx, rdb, calls, cmds, missing, evalName)
}

// pipeline sends the calls at which in one pipeline as name (FCALL,
// EVALSHA or EVAL), each once, and sets their commands in cmds.
func pipeline(ctx context.Context, rdb Pipeliner, calls []Call, cmds []*redis.Cmd, which []int, name any) {
	if len(which) == 0 {
		return
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range which {
			c := calls[i]
			script := c.Script.name
			switch name {
			case evalShaName:
				script = c.Script.hash
			case evalName:
				script = c.Script.src
			}
			cmds[i] = send(ctx, p, name, script, c.Keys, c.Args)
		}
		return nil
	}) // errors are read per command
}
