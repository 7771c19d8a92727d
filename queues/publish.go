package queues

import (
	"context"
	"sync"
	"time"
)

// Completions are announced to live viewers on EventsChannel, a hint (the
// pages re-read counts and the log from Redis). Instead of a PUBLISH inside
// every done.lua, each frontend gathers the log entries of its dones and
// publishes them per project every PublishInterval, as one message
// {"project": slug, "entries": [entry, ...]}: one command and one message
// per subscribed frontend for a batch of completions. A frontend that dies
// loses at most that interval's hints; the log itself is written by done.lua.

// PublishInterval is how long a completion's hint may wait in a frontend.
const PublishInterval = 100 * time.Millisecond

// maxPublishBatch caps the entries of one message; past it a project's
// entries are published at once.
const maxPublishBatch = 512

// publishLater queues a done's log entry for the next publish.
func (e *Engine) publishLater(ctx context.Context, slug, entry string) {
	e.published.mu.Lock()
	if e.published.entries == nil {
		e.published.entries = map[string][]string{}
	}
	e.published.entries[slug] = append(e.published.entries[slug], entry)
	full := len(e.published.entries[slug]) >= maxPublishBatch
	e.published.mu.Unlock()
	if full {
		e.PublishCompletions(ctx)
	}
}

// publishBuffer holds log entries not yet published, by project.
type publishBuffer struct {
	mu      sync.Mutex
	entries map[string][]string
}

// PublishCompletions publishes the queued entries; a failed publish drops
// them (they are hints, and the log in Redis has them).
func (e *Engine) PublishCompletions(ctx context.Context) {
	e.published.mu.Lock()
	entries := e.published.entries
	e.published.entries = nil
	e.published.mu.Unlock()
	for slug, batch := range entries {
		b := make([]byte, 0, 64+len(slug)+300*len(batch))
		b = append(b, `{"project":`...)
		b = appendJSONString(b, slug)
		b = append(b, `,"entries":[`...)
		for i, entry := range batch {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, entry...)
		}
		b = append(b, "]}"...)
		if err := e.rdb.Publish(ctx, EventsChannel, b).Err(); err != nil && ctx.Err() == nil {
			e.logger.WarnContext(ctx, "publishing completions", "project", slug, "err", err)
		}
	}
}
