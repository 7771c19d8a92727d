package ipmetrics

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Recorder takes registrations off the announce path: Observe only puts
// (IP, torrent) in a bounded queue, dropping it (and counting the drop)
// when the queue is full, never waiting. One batcher goroutine drains the
// queue: it skips the pairs and IPs its cache registered recently, locates
// the others and runs their scripts in one pipeline per batch.
type Recorder struct {
	store   *Store
	locator Locator
	logger  *slog.Logger
	batch   int
	cache   *pairCache

	queue chan observation
	// regs and located are the batcher's, reused batch after batch so an
	// idle tracker's one-announce batches allocate nothing.
	regs    []Registration
	located map[netip.Addr]Location

	startOnce, stopOnce sync.Once
	cancel              context.CancelFunc
	done                chan struct{}

	observed, dropped, skipped, registered, counted, failed atomic.Uint64
}

type observation struct {
	ip   netip.Addr
	hash bittorrent.InfoHash
}

// RecorderConfig configures a Recorder. Zero values take the defaults.
type RecorderConfig struct {
	Store   *Store
	Locator Locator // nil: NoGeo
	Logger  *slog.Logger
	// Queue bounds the observations waiting (default 65536).
	Queue int
	// Batch is the most registrations one pipeline carries (default 512).
	Batch int
	// CacheSize is how many (IP, torrent) pairs and IPs the cache holds
	// (default 200000); CacheTTL how long a registered one is skipped
	// (default 1h; at most the window, so a marker the cache trusts is
	// always live).
	CacheSize int
	CacheTTL  time.Duration
}

// Defaults for RecorderConfig.
const (
	DefaultQueue     = 65536
	DefaultBatch     = 512
	DefaultCacheSize = 200_000
	DefaultCacheTTL  = time.Hour
)

// NewRecorder returns a Recorder; Start runs its batcher.
func NewRecorder(cfg RecorderConfig) *Recorder {
	if cfg.Locator == nil {
		cfg.Locator = NoGeo{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	cfg.CacheTTL = min(cfg.CacheTTL, cfg.Store.Window())
	return &Recorder{
		store: cfg.Store, locator: cfg.Locator, logger: cfg.Logger, batch: cfg.Batch,
		cache: newPairCache(max(cfg.CacheSize, 0), cfg.CacheTTL),
		queue: make(chan observation, cfg.Queue), done: make(chan struct{}),
		located: map[netip.Addr]Location{},
	}
}

// Observe queues one announce's IP and torrent. It never blocks: when the
// queue is full the observation is dropped and counted (Stats.Dropped);
// the IP registers at its next announce.
func (r *Recorder) Observe(ip netip.Addr, hash bittorrent.InfoHash) {
	if !ip.IsValid() {
		return
	}
	select {
	case r.queue <- observation{ip.Unmap(), hash}:
		r.observed.Add(1)
	default:
		r.dropped.Add(1)
	}
}

// Start runs the batcher until Stop.
func (r *Recorder) Start(ctx context.Context) error {
	r.startOnce.Do(func() {
		ctx, r.cancel = context.WithCancel(ctx)
		go r.run(ctx)
	})
	return nil
}

// stopFlushTimeout bounds how long Stop spends registering what is still
// queued.
const stopFlushTimeout = 5 * time.Second

// Stop ends the batcher after it registered what was queued (for at most
// stopFlushTimeout). Safe to call twice, and without Start.
func (r *Recorder) Stop() error {
	r.stopOnce.Do(func() {
		started := false
		r.startOnce.Do(func() { close(r.done) }) // never started: nothing to wait for
		if r.cancel != nil {
			started = true
			r.cancel()
		}
		if started {
			<-r.done
		}
	})
	return nil
}

// flushTimeout bounds one batch's pipeline.
const flushTimeout = 10 * time.Second

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	// A batch taken before Stop is registered whole: Stop's cancel ends
	// the loop, not a pipeline in flight.
	work := context.WithoutCancel(ctx)
	batch := make([]observation, 0, r.batch)
	for {
		select {
		case <-ctx.Done():
			r.drain(work)
			return
		case o := <-r.queue:
			batch = append(batch[:0], o)
		}
		// Take what else is waiting, up to a batch: under load batches
		// fill while the previous pipeline runs; when idle a lone
		// announce is registered at once.
	fill:
		for len(batch) < r.batch {
			select {
			case o := <-r.queue:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		flushCtx, cancel := context.WithTimeout(work, flushTimeout)
		r.flush(flushCtx, batch)
		cancel()
	}
}

// drain registers what is left in the queue at Stop.
func (r *Recorder) drain(work context.Context) {
	ctx, cancel := context.WithTimeout(work, stopFlushTimeout)
	defer cancel()
	batch := make([]observation, 0, r.batch)
	for ctx.Err() == nil {
		batch = batch[:0]
	fill:
		for len(batch) < r.batch {
			select {
			case o := <-r.queue:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		if len(batch) == 0 {
			return
		}
		r.flush(ctx, batch)
	}
}

// flush registers one batch.
func (r *Recorder) flush(ctx context.Context, batch []observation) {
	now := r.store.Now()
	regs := r.regs[:0]
	located := r.located
	clear(located)
	defer func() { r.regs = regs[:0] }()
	var noHash bittorrent.InfoHash
	for _, o := range batch {
		reg := Registration{IP: o.ip, Hash: o.hash,
			Global:  !r.cache.fresh(o.ip, noHash, now),
			Torrent: !r.cache.fresh(o.ip, o.hash, now)}
		if !reg.Global && !reg.Torrent {
			r.skipped.Add(1)
			continue
		}
		loc, ok := located[o.ip]
		if !ok {
			loc = r.locator.Locate(o.ip)
			located[o.ip] = loc
		}
		reg.Loc = loc
		// Marked at once, so a repeat in this batch is skipped; undone
		// below when the pipeline fails.
		if reg.Global {
			r.cache.add(o.ip, noHash, now)
		}
		if reg.Torrent {
			r.cache.add(o.ip, o.hash, now)
		}
		regs = append(regs, reg)
	}
	if len(regs) == 0 {
		return
	}
	added, err := r.store.Register(ctx, regs)
	r.counted.Add(uint64(added))
	if err != nil {
		r.failed.Add(uint64(len(regs)))
		for _, reg := range regs {
			r.cache.forget(reg.IP, noHash)
			r.cache.forget(reg.IP, reg.Hash)
		}
		r.logger.LogAttrs(ctx, slog.LevelWarn, "ipmetrics: registrations failed; the IPs register at their next announce",
			slog.Int("registrations", len(regs)), slog.Any("err", err))
		return
	}
	r.registered.Add(uint64(len(regs)))
}

// RecorderStats counts what a Recorder did in this process.
type RecorderStats struct {
	Observed   uint64 // queued by Observe
	Dropped    uint64 // refused because the queue was full
	Skipped    uint64 // registered recently, per the cache
	Registered uint64 // registrations run (each one or two scripts)
	Counted    uint64 // metrics that counted a new IP
	Failed     uint64 // registrations in failed pipelines
	Queued     int    // waiting now
}

// Stats returns the counters.
func (r *Recorder) Stats() RecorderStats {
	return RecorderStats{
		Observed: r.observed.Load(), Dropped: r.dropped.Load(), Skipped: r.skipped.Load(),
		Registered: r.registered.Load(), Counted: r.counted.Load(), Failed: r.failed.Load(),
		Queued: len(r.queue),
	}
}

// Store is the recorder's store, for views.
func (r *Recorder) Store() *Store { return r.store }
