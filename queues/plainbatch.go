package queues

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/callbatch"
	"github.com/hoardproject/hoard/internal/luascript"
)

// One-item plain claims and dones (seesaw's requests without multi, nearly
// every call) that arrive together are coalesced: the ones of one project
// go to Redis as one script call (lua/claim_plain_many.lua,
// lua/done_plain_many.lua) instead of one each. A plain script's own
// work per item is small; most of a one-item call's Redis time is the
// call's fixed cost (the FCALL, its arguments, the Lua state, the
// MULTI/EXEC the AOF gets), which a batch of k pays once
// (docs/warrior-path.md, "Coalesced one-item claims and dones (s43)").
//
// The callers lead their batches themselves (internal/callbatch): a call
// that finds a leader slot free is sent at once, alone if nothing else
// waits, as claim_plain.lua or done_plain.lua, the scripts it ran before;
// only calls that wait while plainBatchLeaders batches are in flight are
// coalesced. There is no timer. Each request keeps its own checks (made
// before it gets here, from the frontend's copy of the settings), its own
// claim record and deadline, and its own answer, from which it counts
// itself (counters.go), so nothing a warrior sees or is counted for
// depends on whom it was batched with.

// At most plainBatchLeaders batches are in flight, each of at most
// plainBatchMax calls (claims and dones of any projects; one script call
// per project and kind). A second batch goes out only once
// plainBatchSecondAt calls wait while the first is in flight; fewer wait
// for its leader to hand over. With one leader Redis idled while the leader
// handed out replies and the callers came back; a second leader that sent
// whatever waited at once (often one call) halved the batches (16 -> 10
// claims per call) and measured lower. Held to 16 waiting, the second
// batch keeps Redis busy at ~15 per call: with 32 concurrent callers
// (hoard-bench script) claims 0.54-0.57 and dones 0.46-0.54 of the FCALL
// ceiling against one leader's 0.41-0.54 and 0.39-0.51 in three
// alternated rounds (docs/warrior-path.md, "Coalesced one-item claims and
// dones (s43)"). An idle path still sends a lone call at once.
const (
	plainBatchLeaders  = 2
	plainBatchMax      = 64
	plainBatchSecondAt = plainBatchMax / 4
)

var plainBatchOptions = callbatch.Options{MoreLeadersAt: plainBatchSecondAt}

// plainCall is one one-item plain claim or done waiting for its batch, and
// its reply once the batch has run: the reply claim_plain.lua or
// done_plain.lua would have given it alone, whichever script ran.
type plainCall struct {
	ctx  context.Context
	slug string
	done bool
	// A claim: the copy of the settings it was decided with, and its
	// claim record and deadline (claim_plain.lua's ARGV[3] and ARGV[4]).
	cfg              *plainConfig
	record, deadline string
	// A done: its reporter and item.
	downloader, item string
	// keys are claim_plain.lua's or done_plain.lua's KEYS for one item.
	keys []string

	reply any
	err   error
}

// plainBatcher coalesces plainCalls.
type plainBatcher struct {
	rdb     luascript.Pipeliner
	batches *callbatch.Batches[plainCall]
	// calls are the plainCalls in flight, pooled: a call waiting for its
	// batch is shared with its leader, so it was one heap allocation per
	// one-item claim and done.
	calls sync.Pool
}

func newPlainBatcher(rdb luascript.Pipeliner, leaders, maxBatch int) *plainBatcher {
	p := &plainBatcher{rdb: rdb}
	p.batches = callbatch.NewWith(leaders, maxBatch, plainBatchOptions, p.run)
	return p
}

// do returns call's reply once its batch has run.
func (p *plainBatcher) do(call plainCall) (any, error) {
	c, _ := p.calls.Get().(*plainCall)
	if c == nil {
		c = new(plainCall)
	}
	*c = call
	p.batches.Do(c)
	reply, err := c.reply, c.err
	// No one holds c once Do has returned: its batch has run and every
	// leader's slices are cleared (internal/callbatch).
	*c = plainCall{}
	p.calls.Put(c)
	return reply, err
}

// plainGroup is the calls of one batch that go as one script call: the
// claims of one project decided with one copy of its settings, or the
// dones of one project.
type plainGroup struct {
	done  bool
	slug  string
	cfg   *plainConfig
	calls []*plainCall
}

// run sends a batch: each group as one script call (the one-item script
// for a group of one), all in one pipeline, and hands each call its reply.
func (p *plainBatcher) run(batch []*plainCall) {
	var groups []*plainGroup
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			// Not sent, as luascript.Batcher does not send it.
			c.reply, c.err = nil, err
			continue
		}
		var g *plainGroup
		for _, x := range groups {
			if x.done == c.done && x.slug == c.slug && x.cfg == c.cfg {
				g = x
				break
			}
		}
		if g == nil {
			g = &plainGroup{done: c.done, slug: c.slug, cfg: c.cfg}
			groups = append(groups, g)
		}
		if c.done && namesItem(g.calls, c.item) {
			// A second report of an item in one batch: done.lua answers it
			// after this batch, as the duplicate it then is (one by one,
			// done_plain.lua would have sent it there too).
			c.reply, c.err = []any{int64(codeNotPlain)}, nil
			continue
		}
		g.calls = append(g.calls, c)
	}
	if len(groups) == 0 {
		return
	}
	calls := make([]luascript.Call, len(groups))
	for i, g := range groups {
		calls[i] = g.call()
	}
	// Not the leader's context: the batch carries other callers' calls.
	ctx := context.WithoutCancel(groups[0].calls[0].ctx)
	for i, cmd := range luascript.RunPipelined(ctx, p.rdb, calls) {
		reply, err := cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			for _, c := range groups[i].calls {
				c.reply, c.err = nil, err
			}
			continue
		}
		groups[i].answer(reply)
	}
}

// namesItem reports whether one of calls reports item.
func namesItem(calls []*plainCall, item string) bool {
	for _, c := range calls {
		if c.item == item {
			return true
		}
	}
	return false
}

// call is the group's script call.
func (g *plainGroup) call() luascript.Call {
	first := g.calls[0]
	if len(g.calls) == 1 {
		if g.done {
			return luascript.Call{Script: donePlainScript, Keys: first.keys, Args: []any{first.downloader, first.item}}
		}
		return luascript.Call{Script: claimPlainScript, Keys: first.keys, Args: []any{g.cfg.version, 1, first.record, first.deadline}}
	}
	n := len(g.calls)
	if g.done {
		args := make([]any, 2*n)
		for i, c := range g.calls {
			args[i], args[n+i] = c.item, c.downloader
		}
		return luascript.Call{Script: donePlainManyScript, Keys: first.keys, Args: args}
	}
	args := make([]any, 1+2*n)
	args[0] = g.cfg.version
	for i, c := range g.calls {
		args[1+2*i], args[2+2*i] = c.record, c.deadline
	}
	return luascript.Call{Script: claimPlainManyScript, Keys: first.keys, Args: args}
}

// answer hands each call of the group the reply the one-item script would
// have given it.
func (g *plainGroup) answer(reply any) {
	if len(g.calls) == 1 {
		g.calls[0].reply = reply
		return
	}
	list, _ := reply.([]any)
	if len(list) > 0 {
		if _, code := list[0].(int64); code {
			// A code for the whole call (stale settings, not plain,
			// corrupt): nothing changed, and each call gets it.
			for _, c := range g.calls {
				c.reply = list
			}
			return
		}
	}
	notPlain := []any{int64(codeNotPlain)}
	if !g.done {
		// The items popped, the k-th the k-th call's; the calls after them
		// found todo empty, which claim_plain.lua answers R.NOT_PLAIN.
		for k, c := range g.calls {
			c.reply = notPlain
			if k < len(list) {
				if item, ok := list[k].(string); ok {
					c.reply = item
				}
			}
		}
		return
	}
	if len(list) != len(g.calls)+1 {
		err := unavailable("queues.Done", errors.New("plain done batch script replied a list of the wrong length"))
		for _, c := range g.calls {
			c.err = err
		}
		return
	}
	logLength := replyString(list[0])
	var b strings.Builder
	for k, c := range g.calls {
		at, ok := list[k+1].(string)
		if !ok {
			c.reply = notPlain
			continue
		}
		// done_plain.lua's one-item answer, "<at> <log_length>".
		b.Reset()
		b.WriteString(at)
		b.WriteByte(' ')
		b.WriteString(logLength)
		c.reply = b.String()
	}
}
