package luascript

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Batcher runs scripts that many goroutines call at once in shared
// pipelines: the calls waiting when a pipeline is sent go in it, so a busy
// path pays one write and one read per batch (on both sides of the
// connection) instead of per call. Each script is still one EVALSHA, atomic
// on its own; a batch only carries them. There is no timer: a call that
// finds a free leader slot is sent at once, alone if nothing else waits.
//
// A caller leads: it sends the waiting calls (its own among them) and hands
// the results out. At most leaders batches are in flight; a call arriving
// while all are busy waits, and the leader that finishes hands its role to
// the oldest waiting call, so no goroutine runs besides the callers.
type Batcher struct {
	rdb      redis.Cmdable
	leaders  int
	maxBatch int

	mu      sync.Mutex
	queue   []*batchCall
	leading int
}

// batchCall is one Run waiting for its reply or to be made leader.
type batchCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	// wake gets true when the call is made leader and false when its reply
	// is in cmd; room for both, so no leader ever blocks on it.
	wake chan bool
	// Under the Batcher's mu: leader, the call's goroutine leads; taken, a
	// leader has taken it into a batch.
	leader, taken bool
}

// NewBatcher returns a Batcher over rdb with at most leaders batches in
// flight, each of at most maxBatch calls.
func NewBatcher(rdb redis.Cmdable, leaders, maxBatch int) *Batcher {
	return &Batcher{rdb: rdb, leaders: max(leaders, 1), maxBatch: max(maxBatch, 1)}
}

// Run runs the script as luascript.Run does, in a batch. A call whose ctx
// is done before its batch is sent is not sent; once sent, it runs to its
// reply (bounded by the client's timeouts), as a lone EVALSHA would once
// written.
func (b *Batcher) Run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	c := &batchCall{ctx: ctx, script: script, keys: keys, args: args, wake: make(chan bool, 2)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.leading < b.leaders
	if lead {
		b.leading++
		c.leader = true
	}
	b.mu.Unlock()
	if lead || <-c.wake {
		b.lead(c)
	}
	reply, err := c.cmd.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return reply, nil
}

// lead sends batches from the head of the queue until self has been taken
// into one (its own or another leader's), then hands the leader's role on
// and, if another leader took self, waits for its reply.
func (b *Batcher) lead(self *batchCall) {
	for {
		b.mu.Lock()
		if self.taken {
			b.handOff()
			b.mu.Unlock()
			<-self.wake
			return
		}
		n := min(len(b.queue), b.maxBatch)
		batch := append([]*batchCall(nil), b.queue[:n]...)
		b.queue = b.queue[n:]
		for _, c := range batch {
			c.taken = true
		}
		b.mu.Unlock()
		b.send(batch)
		mine := false
		for _, c := range batch {
			if c == self {
				mine = true
			} else {
				c.wake <- false
			}
		}
		if mine {
			b.mu.Lock()
			b.handOff()
			b.mu.Unlock()
			return
		}
	}
}

// handOff gives a finishing leader's role to the oldest waiting call that
// does not lead already, or frees it. Called with mu held.
func (b *Batcher) handOff() {
	for _, c := range b.queue {
		if !c.leader {
			c.leader = true
			c.wake <- true
			return
		}
	}
	b.leading--
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
			c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
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
