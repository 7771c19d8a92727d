// Package callbatch runs calls that many goroutines make at once in
// batches led by the callers themselves: the calls waiting when a batch
// starts go in it, so a busy path pays per batch what it would pay per
// call (a round trip, a wake-up), and an idle one sends a call at once,
// alone. There is no timer and no goroutine of its own.
//
// A caller leads: it runs the waiting calls (its own among them) and hands
// the others their results. At most leaders batches are in flight; a call
// arriving while all are busy waits, and the leader that finishes hands
// its role to the oldest waiting call. The Redis script batcher
// (internal/luascript) and the BitTorrent HTTP listener's announce batches
// share it.
package callbatch

import "sync"

// Batches runs calls of type T through run, in batches of at most
// maxBatch, at most leaders at a time.
type Batches[T any] struct {
	run               func(batch []*T)
	leaders, maxBatch int
	opts              Options

	mu      sync.Mutex
	queue   []*waiting[T]
	leading int

	// Pooled, so that a call allocates neither its waiting record and
	// channel nor a leader its batch's slices: four allocations per call
	// on the warrior path, where every claim and done goes through here.
	waits  sync.Pool // *waiting[T], its channel empty
	slices sync.Pool // *batchSlices[T]
}

// batchSlices is a leader's batch: the waiting records and their calls.
type batchSlices[T any] struct {
	waiting []*waiting[T]
	calls   []*T
}

// waiting is one call waiting for its batch or to be made leader.
type waiting[T any] struct {
	call *T
	// wake gets true when the call is made leader and false when its
	// batch has run; room for both, so no leader ever blocks on it.
	wake chan bool
	// Under the Batches' mu: leader, the call's goroutine leads; taken, a
	// leader has taken it into a batch.
	leader, taken bool
}

// Options change when a batch goes out. The zero Options are New's.
type Options struct {
	// MoreLeadersAt: while a batch is in flight, a further one goes out
	// only once at least this many calls wait (0 or 1: at once); fewer
	// wait for a running leader to hand its role on. A second batch pays
	// its own fixed cost, and one sent with whatever waits at that moment
	// (often one call) halves the batches. With nothing in flight a call
	// still leads at once.
	MoreLeadersAt int
}

// New returns Batches that run each batch with run, which must fill in
// every call's result before it returns.
func New[T any](leaders, maxBatch int, run func(batch []*T)) *Batches[T] {
	return NewWith(leaders, maxBatch, Options{}, run)
}

// NewWith is New with opts.
func NewWith[T any](leaders, maxBatch int, opts Options, run func(batch []*T)) *Batches[T] {
	return &Batches[T]{run: run, leaders: max(leaders, 1), maxBatch: max(maxBatch, 1), opts: opts}
}

// Do returns once call has been run, in a batch.
func (b *Batches[T]) Do(call *T) {
	w, _ := b.waits.Get().(*waiting[T])
	if w == nil {
		w = &waiting[T]{wake: make(chan bool, 2)}
	}
	w.call = call
	b.mu.Lock()
	b.queue = append(b.queue, w)
	lead := b.leading < b.leaders && (b.leading == 0 || len(b.queue) >= b.opts.MoreLeadersAt)
	if lead {
		b.leading++
		w.leader = true
	}
	b.mu.Unlock()
	if lead || <-w.wake {
		b.lead(w)
	}
	// Every send to w.wake has been received by now: false is sent once,
	// after w was taken out of the queue, and true only while it was in
	// the queue, so before false; whichever came last ended the wait. And
	// no one but a leader comparing pointers holds w any more.
	*w = waiting[T]{wake: w.wake}
	b.waits.Put(w)
}

// Waiting is how many calls wait for a batch, for tests that hold one.
func (b *Batches[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// lead runs batches from the head of the queue until self has been taken
// into one (its own or another leader's), then hands the leader's role on
// and, if another leader took self, waits for its result.
func (b *Batches[T]) lead(self *waiting[T]) {
	for {
		b.mu.Lock()
		if self.taken {
			b.handOffLocked()
			b.mu.Unlock()
			<-self.wake
			return
		}
		n := min(len(b.queue), b.maxBatch)
		s, _ := b.slices.Get().(*batchSlices[T])
		if s == nil {
			s = &batchSlices[T]{}
		}
		batch, calls := append(s.waiting[:0], b.queue[:n]...), s.calls[:0]
		b.queue = append(b.queue[:0], b.queue[n:]...)
		for _, w := range batch {
			w.taken = true
			calls = append(calls, w.call)
		}
		b.mu.Unlock()
		b.run(calls)
		mine := false
		for _, w := range batch {
			// Once woken, w's caller may return it to the pool and reuse
			// it: past the send, w is only compared.
			if w == self {
				mine = true
			} else {
				w.wake <- false
			}
		}
		clear(batch)
		clear(calls)
		s.waiting, s.calls = batch[:0], calls[:0]
		b.slices.Put(s)
		if mine {
			b.mu.Lock()
			b.handOffLocked()
			b.mu.Unlock()
			return
		}
	}
}

// handOffLocked gives a finishing leader's role to the oldest waiting
// call that does not lead already, or frees it: also while another batch
// is in flight and fewer than MoreLeadersAt calls wait, since that batch's
// leader hands its role on when it finishes.
func (b *Batches[T]) handOffLocked() {
	if b.leading > 1 && len(b.queue) < b.opts.MoreLeadersAt {
		b.leading--
		return
	}
	for _, w := range b.queue {
		if !w.leader {
			w.leader = true
			w.wake <- true
			return
		}
	}
	b.leading--
}
