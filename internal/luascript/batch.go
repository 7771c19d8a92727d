package luascript

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/callbatch"
)

// Batcher runs scripts that many goroutines call at once in shared
// pipelines: the calls waiting when a pipeline is sent go in it, so a busy
// path pays one write and one read per batch (on both sides of the
// connection) instead of per call. Each script is still one FCALL, atomic
// on its own; a batch only carries them. There is no timer: a call that
// finds a free leader slot is sent at once, alone if nothing else waits.
// The callers lead the batches in turn (internal/callbatch), so no
// goroutine runs besides them.
type Batcher struct {
	rdb     Pipeliner
	batches *callbatch.Batches[batchCall]
}

// batchCall is one Run and, once its batch is sent, its reply.
type batchCall struct {
	ctx    context.Context
	script *Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// NewBatcher returns a Batcher over rdb with at most leaders batches in
// flight, each of at most maxBatch calls.
func NewBatcher(rdb Pipeliner, leaders, maxBatch int) *Batcher {
	b := &Batcher{rdb: rdb}
	b.batches = callbatch.New(leaders, maxBatch, b.send)
	return b
}

// Run runs the script as luascript.Run does, in a batch. A call whose ctx
// is done before its batch is sent is not sent; once sent, it runs to its
// reply (bounded by the client's timeouts), as a lone FCALL would once
// written.
func (b *Batcher) Run(ctx context.Context, script *Script, keys []string, args ...any) (any, error) {
	c := &batchCall{ctx: ctx, script: script, keys: keys, args: args}
	b.batches.Do(c)
	reply, err := c.cmd.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return reply, nil
}

// send runs a batch as one pipeline (RunPipelined: FCALLs, sent again
// after a load for the calls whose function was missing).
func (b *Batcher) send(batch []*batchCall) {
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = redis.NewCmd(c.ctx)
			c.cmd.SetErr(err)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// Not the leader's context: a batch carries other callers' scripts,
	// which must not fail because the leader's request ended.
	ctx := context.WithoutCancel(live[0].ctx)
	calls := make([]Call, len(live))
	for i, c := range live {
		calls[i] = Call{Script: c.script, Keys: c.keys, Args: c.args}
	}
	for i, cmd := range RunPipelined(ctx, b.rdb, calls) {
		live[i].cmd = cmd
	}
}
