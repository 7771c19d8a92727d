package luascript

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

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
// whether the call may be repeated. The one call this package repeats
// itself is one Redis answered without running it: the function or script
// not loaded, or FCALL unknown to the server.

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

// send sends (or, on a pipeline, queues) one script call built by
// scriptCmd, once.
func send(ctx context.Context, rdb Processor, name any, script string, keys []string, args []any) *redis.Cmd {
	cmd := scriptCmd(ctx, name, script, keys, args)
	_ = rdb.Process(ctx, sentOnce{cmd})
	return cmd
}

// The command names, boxed once: a name boxed per call is an allocation.
var (
	evalName    any = "eval"
	evalShaName any = "evalsha"
	fcallName   any = "fcall"
)

// scriptCmd builds a script call as go-redis's own Eval, EvalSha and FCall
// do (name, script, its hash or its function's name, key count, keys, then
// the arguments, a lone slice argument spread out) with KEYS[1] as its
// cluster routing key.
func scriptCmd(ctx context.Context, name any, script string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = name, script, len(keys)
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

// The replies that say a call did not run, so it may be sent again.

// functionMissing: the server has functions but not this one (restarted
// without persistence, FUNCTION FLUSH, a new node, or never loaded).
func functionMissing(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR Function not found")
}

// noScript: EVALSHA of a script not in the server's cache.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// noFunctions: the server has no FCALL or FUNCTION (Redis before 7.0, a
// server that renamed them away), or the client's ACL user may not run
// them.
func noFunctions(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return (strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "noperm")) &&
		(strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function"))
}

// Which clients talk to a server without functions: learnt from the first
// call that Redis answered so (it did not run), then used for every later
// call of that client, so the check is made once per client, not per
// call. Keyed by the client (go-redis's clients are pointers); a cluster's
// node clients, which orphan cleanup uses, are keyed on their own. Only
// such clients are kept, and anyEvalOnly spares every call the map
// look-up until there is one.
var (
	evalOnlyClients sync.Map // Processor → struct{}
	anyEvalOnly     atomic.Bool
)

func evalOnly(rdb Processor) bool {
	if !anyEvalOnly.Load() {
		return false
	}
	_, ok := evalOnlyClients.Load(rdb)
	return ok
}

func markEvalOnly(rdb Processor) {
	evalOnlyClients.Store(rdb, struct{}{})
	anyEvalOnly.Store(true)
}
