package swarm

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
)

// maxCoalescedCalls caps one shared pipeline, so one slow batch never holds
// many callers and one reply never grows without bound.
const maxCoalescedCalls = 64

// coalescer sends concurrent invocations of one script to Redis in shared
// pipelines: each of a few workers takes the calls waiting when it is
// free and sends them in one write, reading all the replies back in one
// read. Under load this turns a connection check, a write and a read
// (plus a wake-up) per announce into the same per batch, on both sides of
// the socket; with one caller at a time a call still goes out at once, so
// an idle tracker answers as fast as before. Every call is still its own
// script, so each announce stays atomic and single-slot, and go-redis
// splits a batch by node on a cluster.
type coalescer struct {
	store   *Store
	script  *luascript.Script
	workers int

	mu      sync.RWMutex // guards closed against sends on calls
	closed  bool
	calls   chan *coalescedCall
	started sync.Once
	wg      sync.WaitGroup
}

// coalescedCall is one invocation waiting for its batch.
type coalescedCall struct {
	call scriptCall
	cmd  *redis.Cmd
	done chan struct{}
}

func newCoalescer(store *Store, script *luascript.Script, workers int) *coalescer {
	return &coalescer{store: store, script: script, workers: workers,
		calls: make(chan *coalescedCall, workers*maxCoalescedCalls)}
}

// run runs one invocation and returns its reply, through a shared
// pipeline when the coalescer is running, alone once it has stopped.
// When ctx ends first run returns ctx's error; the call may still be
// carried out.
func (c *coalescer) run(ctx context.Context, keys []string, args []any) (*redis.Cmd, error) {
	p := &coalescedCall{call: scriptCall{keys: keys, args: args}, done: make(chan struct{})}
	if !c.submit(p) {
		return c.script.Run(ctx, c.store.rdb, keys, args...), nil
	}
	select {
	case <-p.done:
		return p.cmd, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *coalescer) submit(p *coalescedCall) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	c.started.Do(func() {
		c.wg.Add(c.workers)
		for range c.workers {
			go c.work()
		}
	})
	c.calls <- p
	return true
}

// work sends batches until stop, then finishes what was submitted.
func (c *coalescer) work() {
	defer c.wg.Done()
	batch := make([]*coalescedCall, 0, maxCoalescedCalls)
	calls := make([]scriptCall, 0, maxCoalescedCalls)
	for first := range c.calls {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < maxCoalescedCalls {
			select {
			case p, ok := <-c.calls:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		calls = calls[:0]
		for _, p := range batch {
			calls = append(calls, p.call)
		}
		// Not a caller's context: a batch serves many callers, and one
		// leaving must not fail the others. The client's own read and
		// write timeouts bound it.
		cmds := c.store.runScriptsPipelined(context.Background(), c.script, calls)
		for i, p := range batch {
			p.cmd = cmds[i]
			close(p.done)
		}
	}
}

// stop lets the workers send what was submitted, then ends them; later
// calls run alone. Safe to call twice, or before any call.
func (c *coalescer) stop() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.calls)
	}
	c.mu.Unlock()
	c.wg.Wait()
}
