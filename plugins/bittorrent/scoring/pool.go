package scoring

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/plugins"
)

// WorkerName is the name the plugin's workers claim score items under.
const WorkerName = "scorer"

// claimBatch is how many items a worker claims at once.
const claimBatch = 10

// Pool is the plugin's own score workers on one frontend: goroutines that
// claim score items through the host, count the torrent's peers, and
// report the result with Done. The torrent's score is only written when
// the result comes back through OnItemDone (Scorer.Apply), so a worker
// that dies mid-item leaves it untouched: its claim expires and the queue
// hands the item out again.
//
// The pool sizes itself (seed 002's "future" item): Scale grows it while
// items wait and the backlog (the project's todo plus out) is not
// shrinking, doubling up to Max, and shrinks it by one while nothing
// waits, down to one worker.
type Pool struct {
	host    plugins.HostAPI
	project string
	worker  string
	process func(ctx context.Context, item string) (json.RawMessage, error)
	max     int
	poll    time.Duration
	logger  *slog.Logger

	mu          sync.Mutex
	ctx         context.Context
	workers     []context.CancelFunc
	stopped     bool
	lastBacklog int64
	wg          sync.WaitGroup

	done     atomic.Int64
	failures atomic.Int64
}

// PoolConfig configures a Pool.
type PoolConfig struct {
	Host    plugins.HostAPI
	Project string
	// Worker is the name the workers claim under (WorkerName when ""):
	// another item type reusing the pool (the reaper) names its own.
	Worker string
	// Process returns the result of one item (Scorer.Process).
	Process func(ctx context.Context, item string) (json.RawMessage, error)
	// Max workers (at least 1); Poll is how long an idle worker waits.
	Max    int
	Poll   time.Duration
	Logger *slog.Logger
}

// NewPool returns a pool with no workers; Start runs the first.
func NewPool(cfg PoolConfig) *Pool {
	if cfg.Max < 1 {
		cfg.Max = 1
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Worker == "" {
		cfg.Worker = WorkerName
	}
	return &Pool{host: cfg.Host, project: cfg.Project, worker: cfg.Worker, process: cfg.Process, max: cfg.Max, poll: cfg.Poll, logger: cfg.Logger}
}

// Start starts one worker; the workers stop when ctx ends or Stop is
// called.
func (p *Pool) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx = ctx
	if len(p.workers) == 0 && !p.stopped {
		p.addLocked()
	}
}

func (p *Pool) addLocked() {
	ctx, cancel := context.WithCancel(p.ctx)
	p.workers = append(p.workers, cancel)
	p.wg.Add(1)
	go p.work(ctx)
}

// Size is how many workers run.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.workers)
}

// Done counts the items this pool's workers reported done.
func (p *Pool) Done() int64 { return p.done.Load() }

// Scale compares the backlog with the last one seen and resizes the pool:
// items waiting and a backlog that did not shrink double it (up to Max),
// nothing waiting takes one worker away (down to one). It returns the new
// size.
func (p *Pool) Scale(ctx context.Context) (int, error) {
	counts, err := p.host.Counts(ctx, p.project)
	if err != nil {
		return p.Size(), err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil || p.ctx.Err() != nil || p.stopped {
		return len(p.workers), nil
	}
	n := len(p.workers)
	// The backlog is what is not finished: waiting and claimed. Claims
	// move items from todo to out without finishing them, so todo alone
	// would shrink as soon as new workers claim their first batch.
	backlog := counts.Todo + counts.Out
	switch {
	case counts.Todo > 0 && backlog >= p.lastBacklog && n < p.max:
		for range min(max(n, 1), p.max-n) {
			p.addLocked()
		}
	case counts.Todo == 0 && n > 1:
		last := len(p.workers) - 1
		p.workers[last]()
		p.workers = p.workers[:last]
	}
	if len(p.workers) != n {
		p.logger.Debug("scoring pool resized", "workers", len(p.workers), "backlog", backlog, "previous_backlog", p.lastBacklog)
	}
	p.lastBacklog = backlog
	return len(p.workers), nil
}

// Run calls Scale every interval until ctx ends.
func (p *Pool) Run(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if _, err := p.Scale(ctx); err != nil && ctx.Err() == nil {
				p.logger.Warn("scoring pool: reading the backlog failed", "error", err)
			}
		}
	}
}

// Stop stops every worker for good and waits for them; the items a worker
// held unprocessed are released back to the queue. Safe to call twice.
func (p *Pool) Stop() {
	p.mu.Lock()
	for _, cancel := range p.workers {
		cancel()
	}
	p.workers, p.stopped = nil, true
	p.mu.Unlock()
	p.wg.Wait()
}

// work is one worker: claim, process, done, until its context ends.
func (p *Pool) work(ctx context.Context) {
	defer p.wg.Done()
	for ctx.Err() == nil {
		items, err := p.host.Claim(ctx, p.project, p.worker, claimBatch)
		if err != nil || len(items) == 0 {
			if err != nil && ctx.Err() == nil {
				p.failures.Add(1)
				p.logger.Debug("scoring worker: claim failed", "error", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(p.poll):
			}
			continue
		}
		for i, item := range items {
			if ctx.Err() != nil {
				p.release(items[i:])
				return
			}
			result, err := p.process(ctx, item)
			if err != nil {
				var bad *itemError
				if asItemError(err, &bad) {
					// An item that can never be processed leaves the queue
					// with no result; OnItemDone ignores it.
					result = nil
				} else {
					if ctx.Err() == nil {
						p.failures.Add(1)
						p.logger.Warn("scoring worker: processing failed; the item goes back", "item", item, "error", err)
					}
					p.release(items[i:])
					break
				}
			}
			if _, err := p.host.Done(ctx, p.project, p.worker, []string{item}, result); err != nil {
				p.failures.Add(1)
				p.logger.Warn("scoring worker: done failed; the claim will expire", "item", item, "error", err)
				continue
			}
			p.done.Add(1)
		}
	}
}

// release gives unprocessed claims back, on a context of its own: the
// worker's may be over.
func (p *Pool) release(items []string) {
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.host.Release(ctx, p.project, p.worker, items); err != nil {
		p.logger.Warn("scoring worker: release failed; the claims will expire", "items", len(items), "error", err)
	}
}
