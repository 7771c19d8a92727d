package luascript

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/callbatch"
)

// Batcher runs scripts that many goroutines call at once in shared
// pipelines: the calls waiting when a pipeline is sent go in it, so a busy
// path pays one write and one read per batch (on both sides of the
// connection) instead of per call. Each script is still one EVALSHA, atomic
// on its own; a batch only carries them. There is no timer: a call that
// finds a free leader slot is sent at once, alone if nothing else waits.
// The callers lead the batches in turn (internal/callbatch), so no
// goroutine runs besides them.
type Batcher struct {
	rdb     redis.Cmdable
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
func NewBatcher(rdb redis.Cmdable, leaders, maxBatch int) *Batcher {
	b := &Batcher{rdb: rdb}
	b.batches = callbatch.New(leaders, maxBatch, b.send)
	return b
}

// Run runs the script as luascript.Run does, in a batch. A call whose ctx
// is done before its batch is sent is not sent; once sent, it runs to its
// reply (bounded by the client's timeouts), as a lone EVALSHA would once
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

// send runs a batch as one pipeline of EVALSHAs, then once more with
// EVAL for the calls Redis answered NOSCRIPT (those did not run).
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
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range live {
			c.cmd = scriptCmd(ctx, "evalsha", c.script.Hash(), c.keys, c.args)
			_ = p.Process(ctx, sentOnce{c.cmd})
		}
		return nil
	})
	var missing []*batchCall
	for _, c := range live {
		if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return
	}
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range missing {
			c.cmd = c.script.Eval(ctx, p, c.keys, c.args...)
		}
		return nil
	})
}
