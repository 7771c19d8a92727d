package plugins

import (
	"context"
	"errors"
	"time"

	"github.com/hoardproject/hoard/queues"
)

// EngineQueues adapts hoard's queue engine to Queues.
func EngineQueues(engine *queues.Engine) Queues { return engineQueues{engine} }

type engineQueues struct{ engine *queues.Engine }

// EnsureProject creates the project with its title set to its slug and,
// when reclaimTTL > 0, reclaiming on. An existing project is left alone:
// its operators may have tuned it.
func (q engineQueues) EnsureProject(ctx context.Context, slug string, reclaimTTL time.Duration) error {
	var patch queues.SettingsPatch
	title := slug
	patch.Title = &title
	if reclaimTTL > 0 {
		on, ttl := true, queues.Duration(reclaimTTL)
		patch.ReclaimEnabled, patch.ReclaimTTL = &on, &ttl
	}
	_, err := q.engine.CreateProject(ctx, slug, patch)
	var qe *queues.Error
	if errors.As(err, &qe) && qe.Code == queues.CodeExists {
		return nil
	}
	return err
}

// Enqueue queues items into the project's todo queue, in batches the engine
// accepts.
func (q engineQueues) Enqueue(ctx context.Context, slug string, items []string) (int, error) {
	queued := 0
	for start := 0; start < len(items); start += queues.MaxEnqueueBatch {
		batch := items[start:min(start+queues.MaxEnqueueBatch, len(items))]
		entries := make([]queues.QueueItem, len(batch))
		for i, name := range batch {
			entries[i] = queues.QueueItem{Name: name}
		}
		result, err := q.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, entries)
		queued += result.Queued
		if err != nil {
			return queued, err
		}
	}
	return queued, nil
}
