// Package ratelog logs events that come in floods (refused requests,
// requests failing while Redis is down, a webhook that keeps failing)
// without one line per event: a kind of event is logged at most once per
// interval, the line saying how many of that kind went unlogged since
// the previous one, and every event is counted, so /metrics has the exact
// number however few lines were written. One client making 5,000 refused
// requests costs a line or two, not 5,000.
package ratelog

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/hoardproject/hoard/internal/clock"
)

// Defaults of Config.
const (
	DefaultInterval = time.Minute
	DefaultMaxKinds = 100
)

// OtherKind counts the events of kinds beyond MaxKinds.
const OtherKind = "other"

// Config configures a Log.
type Config struct {
	// Logger writes the lines (slog.Default() when nil).
	Logger *slog.Logger
	// Interval is the least time between two lines of one kind
	// (DefaultInterval).
	Interval time.Duration
	// Clock (the system clock when nil) times the interval.
	Clock clock.Clock
	// MaxKinds bounds the kinds tracked (DefaultMaxKinds), so kinds
	// can never grow memory or metric series without bound; later kinds
	// are counted and logged as one more, OtherKind.
	MaxKinds int
}

// Log logs and counts events by kind. It is safe for concurrent use.
type Log struct {
	cfg   Config
	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	total    uint64
	unlogged uint64 // events since the last line that were not logged
	last     time.Time
	logged   bool
}

// New returns a Log.
func New(cfg Config) *Log {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.MaxKinds <= 0 {
		cfg.MaxKinds = DefaultMaxKinds
	}
	return &Log{cfg: cfg, kinds: map[string]*kind{}}
}

// Log counts one event of the kind and writes msg with attrs at level
// when the kind's last line is at least an interval old (or it has none);
// the line carries the kind and "unlogged", how many events of the kind
// were not logged since its previous line. It reports whether it wrote.
func (l *Log) Log(ctx context.Context, level slog.Level, name, msg string, attrs ...any) bool {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	name, k := l.kindLocked(name)
	k.total++
	if k.logged && now.Sub(k.last) < l.cfg.Interval {
		k.unlogged++
		l.mu.Unlock()
		return false
	}
	unlogged := k.unlogged
	k.unlogged, k.last, k.logged = 0, now, true
	l.mu.Unlock()
	l.cfg.Logger.Log(ctx, level, msg, append(attrs, "kind", name, "unlogged", unlogged)...)
	return true
}

// Count counts one event of the kind without logging it (refusals that
// are the client's doing, which only /metrics shows).
func (l *Log) Count(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, k := l.kindLocked(name)
	k.total++
}

// kindLocked finds or adds a kind; past MaxKinds it is OtherKind.
func (l *Log) kindLocked(name string) (string, *kind) {
	if k, ok := l.kinds[name]; ok {
		return name, k
	}
	if len(l.kinds) >= l.cfg.MaxKinds {
		name = OtherKind
	}
	k, ok := l.kinds[name]
	if !ok {
		k = &kind{}
		l.kinds[name] = k
	}
	return name, k
}

// Count is one kind's total.
type Count struct {
	Kind  string
	Total uint64
}

// Counts returns every kind's events since New, by kind name.
func (l *Log) Counts() []Count {
	l.mu.Lock()
	out := make([]Count, 0, len(l.kinds))
	for name, k := range l.kinds {
		out = append(out, Count{Kind: name, Total: k.total})
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// Total is one kind's events since New (0 for a kind never seen).
func (l *Log) Total(name string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.kinds[name]; ok {
		return k.total
	}
	return 0
}
