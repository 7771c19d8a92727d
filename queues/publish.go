package queues

import (
	"context"
	"sync"
	"time"

	"github.com/hoardproject/hoard/internal/jsonstring"
)

// A done's log entry goes to two places, both from the frontend, batched
// per project every PublishInterval: the project's recent-completions log
// (LogKey, one LPUSH and one LTRIM for the batch, instead of an LPUSH inside
// every done.lua) and live viewers on EventsChannel, a hint (the pages
// re-read counts and the log from Redis), as one message
// {"project": slug, "entries": [entry, ...]}. The log is what viewers see
// of recent completions, never where an item is: a frontend killed with
// SIGKILL loses at most that interval's entries and hints, never an item
// (the done set, claims and counts are done.lua's and counters.go's).

// PublishInterval is how long a completion's log entry and hint may wait in
// a frontend.
const PublishInterval = 100 * time.Millisecond

// maxPublishBatch caps the entries of one message; past it a project's
// entries are pushed and published at once.
const maxPublishBatch = 512

// publishLater queues a done's log entry for the next push and publish;
// logLength is the project's log_length as done.lua read it (0: no log).
func (e *Engine) publishLater(ctx context.Context, slug, entry string, logLength int) {
	e.published.mu.Lock()
	if e.published.entries == nil {
		e.published.entries = map[string]*publishBatch{}
	}
	batch := e.published.entries[slug]
	if batch == nil {
		batch = &publishBatch{}
		e.published.entries[slug] = batch
	}
	batch.entries = append(batch.entries, entry)
	batch.logLength = logLength
	full := len(batch.entries) >= maxPublishBatch
	e.published.mu.Unlock()
	if full {
		e.PublishCompletions(ctx)
	}
}

// publishBuffer holds log entries not yet pushed and published, by project.
type publishBuffer struct {
	mu      sync.Mutex
	entries map[string]*publishBatch
}

// publishBatch is one project's waiting entries, oldest first, and its
// log_length as the latest done read it.
type publishBatch struct {
	entries   []string
	logLength int
}

// PublishCompletions pushes the queued entries to their projects' logs
// and publishes them. A failed push or publish drops them (a log entry is
// a display, and a retry could push one twice), and is logged.
func (e *Engine) PublishCompletions(ctx context.Context) {
	e.published.mu.Lock()
	batches := e.published.entries
	e.published.entries = nil
	e.published.mu.Unlock()
	for slug, batch := range batches {
		pipe := e.rdb.Pipeline()
		if batch.logLength > 0 {
			// LPUSH e1 ... en leaves en, the newest, at the head.
			values := make([]any, len(batch.entries))
			for i, entry := range batch.entries {
				values[i] = entry
			}
			pipe.LPush(ctx, LogKey(slug), values...)
			pipe.LTrim(ctx, LogKey(slug), 0, int64(batch.logLength-1))
		}
		// Sized to the entries: a multi=100 done's entry names its 100
		// items (~2.7 kB), so a guess of 300 bytes each grew the buffer
		// by doubling, about its final size again in copies.
		size := 64 + len(slug)
		for _, entry := range batch.entries {
			size += len(entry) + 1
		}
		b := make([]byte, 0, size)
		b = append(b, `{"project":`...)
		b = jsonstring.Append(b, slug)
		b = append(b, `,"entries":[`...)
		for i, entry := range batch.entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, entry...)
		}
		b = append(b, "]}"...)
		pipe.Publish(ctx, EventsChannel, b)
		if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
			e.logger.WarnContext(ctx, "pushing and publishing completions", "project", slug, "entries", len(batch.entries), "err", err)
		}
	}
}
