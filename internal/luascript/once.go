package luascript

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Sending a script call twice can run it twice. go-redis sends a command
// again after a read timeout, a connection that breaks after the write, or
// a LOADING or TRYAGAIN reply (a Client's MaxRetries, 3 unless set; a
// ClusterClient's redirect loop, whatever MaxRetries says), and after a
// read timeout or a broken connection the script may have run: a claim
// would claim a second batch, a backfeed would answer "duplicate" for its
// own first request. So every call this package sends is marked NoRetry:
// go-redis still follows a cluster's MOVED and ASK (the script did not run
// there) and replays a command it closed the connection under before
// writing, and otherwise hands the first error to the caller, who knows
// whether the call may be repeated.

// sentOnce is a script call go-redis must not send a second time.
type sentOnce struct{ *redis.Cmd }

// NoRetry tells go-redis's retry loops (single, cluster, pipelines) to
// hand this command's error back instead of sending it again.
func (sentOnce) NoRetry() bool { return true }

// Processor sends a command: a *redis.Client, a *redis.ClusterClient, a
// redis.UniversalClient or a redis.Pipeliner (which queues it).
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceScripter is the redis.Scripter that redis.Script's Run and Eval call
// back (EVALSHA, then EVAL with the script's source after a NOSCRIPT): it
// builds each call as go-redis does and sends it as sentOnce.
type onceScripter struct{ rdb Processor }

func (o onceScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "evalsha", sha1, keys, args)
}

func (o onceScripter) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "eval", src, keys, args)
}

// errNotUsed answers the parts of redis.Scripter that redis.Script's Run
// and Eval never call for a script made by Load (NewScript: its hash is
// computed, not loaded).
var errNotUsed = errors.New("luascript: not used by Run")

func (o onceScripter) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(nil, errNotUsed)
}

func (o onceScripter) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(nil, errNotUsed)
}

func (o onceScripter) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult(nil, errNotUsed)
}

func (o onceScripter) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringResult("", errNotUsed)
}

// send sends a call built by scriptCmd once.
func (o onceScripter) send(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	cmd := scriptCmd(ctx, name, script, keys, args)
	_ = o.rdb.Process(ctx, sentOnce{cmd})
	return cmd
}

// The command names, boxed once: a name boxed per call is an allocation.
var (
	evalName    any = "eval"
	evalShaName any = "evalsha"
)

// scriptCmd builds a script call as go-redis's own Eval and EvalSha do
// (name, script or its hash, key count, keys, then the arguments, a lone
// slice argument spread out) with KEYS[1] as its cluster routing key.
func scriptCmd(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args))
	cmdArgs[0] = evalName
	if name == "evalsha" {
		cmdArgs[0] = evalShaName
	}
	cmdArgs[1], cmdArgs[2] = script, len(keys)
	for i, key := range keys {
		cmdArgs[3+i] = key
	}
	cmdArgs = appendArgs(cmdArgs, args)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// appendArgs spreads a lone []string or []any argument and drops a lone
// nil, as go-redis does for its own commands; anything else goes as it is.
func appendArgs(dst, args []any) []any {
	if len(args) == 1 {
		switch arg := args[0].(type) {
		case []string:
			for _, s := range arg {
				dst = append(dst, s)
			}
			return dst
		case []any:
			return append(dst, arg...)
		case nil:
			return dst
		}
	}
	return append(dst, args...)
}
