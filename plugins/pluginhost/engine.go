package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/plugins"
)

// EngineQueues adapts hoard's queue engine to Queues.
func EngineQueues(engine *queues.Engine) Queues { return engineQueues{engine} }

type engineQueues struct{ engine *queues.Engine }

// EnsureProject creates the project with its title set to its slug, its
// event log on, the item types' retention and, when spec.ReclaimTTL > 0,
// reclaiming on. Of an existing project only the retention is changed,
// when it differs: the rest its operators may have tuned.
func (q engineQueues) EnsureProject(ctx context.Context, slug string, spec plugins.ProjectSpec) error {
	var patch queues.SettingsPatch
	title := slug
	patch.Title = &title
	events := queues.DefaultPluginEventLog
	patch.EventLog = &events
	if spec.ReclaimTTL > 0 {
		on, ttl := true, queues.Duration(spec.ReclaimTTL)
		patch.ReclaimEnabled, patch.ReclaimTTL = &on, &ttl
	}
	if spec.DoneMode != "" {
		patch.DoneMode = &spec.DoneMode
	}
	if spec.RecentDone > 0 {
		patch.RecentDone = &spec.RecentDone
	}
	_, err := q.engine.CreateProject(ctx, slug, patch)
	var qe *queues.Error
	if !errors.As(err, &qe) || qe.Code != queues.CodeExists {
		return err
	}
	p, err := q.engine.Project(ctx, slug)
	if err != nil {
		return err
	}
	var retention queues.SettingsPatch
	if spec.DoneMode != "" && p.DoneMode != spec.DoneMode {
		retention.DoneMode = &spec.DoneMode
	}
	if spec.RecentDone > 0 && p.RecentDone != spec.RecentDone {
		retention.RecentDone = &spec.RecentDone
	}
	if retention.DoneMode == nil && retention.RecentDone == nil {
		return nil
	}
	_, err = q.engine.UpdateProject(ctx, slug, retention)
	return err
}

// EnqueueScored puts items in the project's score-ordered queue.
func (q engineQueues) EnqueueScored(ctx context.Context, slug string, items []plugins.ScoredItem) (int, error) {
	done := 0
	for start := 0; start < len(items); start += queues.MaxEnqueueBatch {
		batch := items[start:min(start+queues.MaxEnqueueBatch, len(items))]
		entries := make([]queues.QueueItem, len(batch))
		for i, it := range batch {
			entries[i] = queues.QueueItem{Name: it.Item, Score: it.Score}
		}
		res, err := q.engine.EnqueueScored(ctx, slug, entries)
		done += res.Queued + res.Rescored
		if err != nil {
			return done, err
		}
	}
	return done, nil
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

// EngineEventLog adapts the queue engine's per-project event log to
// EventLog.
func EngineEventLog(engine *queues.Engine) EventLog { return engineEvents{engine} }

type engineEvents struct{ engine *queues.Engine }

// EnableEventLog turns the project's event log on (DefaultPluginEventLog
// entries) if it is off; a size an operator chose is kept.
func (q engineEvents) EnableEventLog(ctx context.Context, project string) error {
	p, err := q.engine.Project(ctx, project)
	if err != nil {
		return err
	}
	if p.Settings.EventLog > 0 {
		return nil
	}
	size := queues.DefaultPluginEventLog
	_, err = q.engine.UpdateProject(ctx, project, queues.SettingsPatch{EventLog: &size})
	return err
}

func (q engineEvents) JoinEventLog(ctx context.Context, project, group string) error {
	return q.engine.JoinEventLog(ctx, project, group)
}

func (q engineEvents) ReadEvents(ctx context.Context, project, group, consumer string, count int, block time.Duration) ([]LoggedEvent, error) {
	evs, err := q.engine.ReadEvents(ctx, project, group, consumer, count, block)
	return loggedEvents(evs), err
}

func (q engineEvents) AckEvents(ctx context.Context, project, group string, ids ...string) error {
	return q.engine.AckEvents(ctx, project, group, ids...)
}

func (q engineEvents) ClaimStaleEvents(ctx context.Context, project, group, consumer string, idle time.Duration, count, maxDeliveries int) (StaleLoggedEvents, error) {
	stale, err := q.engine.ClaimStaleEvents(ctx, project, group, consumer, idle, count, maxDeliveries)
	return StaleLoggedEvents{Events: loggedEvents(stale.Events), GivenUp: loggedEvents(stale.GivenUp), Trimmed: stale.Trimmed}, err
}

func (q engineEvents) ScanExpiredClaims(ctx context.Context, project string, limit int) (int, bool, error) {
	return q.engine.ScanExpiredClaims(ctx, project, limit)
}

func loggedEvents(evs []queues.Event) []LoggedEvent {
	if len(evs) == 0 {
		return nil
	}
	out := make([]LoggedEvent, len(evs))
	for i, ev := range evs {
		out[i] = LoggedEvent{ID: ev.ID, Reclaim: ev.Kind == queues.EventReclaim, Items: ev.Items, By: ev.By,
			At: ev.At, Result: ev.Result, Deliveries: ev.Deliveries}
	}
	return out
}

// Claim hands up to count items to worker; none left is no error.
func (q engineQueues) Claim(ctx context.Context, slug, worker string, count int) ([]string, error) {
	res, err := q.engine.Claim(ctx, queues.ClaimRequest{Project: slug, Downloader: worker, IP: "plugin", Count: count})
	if queues.CodeOf(err) == queues.CodeNoItem {
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	items := make([]string, len(res.Items))
	for i, it := range res.Items {
		items[i] = it.Name
	}
	return items, nil
}

// Done completes worker's items with its result.
func (q engineQueues) Done(ctx context.Context, slug, worker string, items []string, result json.RawMessage) (int, error) {
	res, err := q.engine.Done(ctx, queues.DoneRequest{Project: slug, Downloader: worker, Items: items, Result: result})
	return res.New, err
}

// Release gives worker's claims back.
func (q engineQueues) Release(ctx context.Context, slug, worker string, items []string) (int, error) {
	res, err := q.engine.Release(ctx, slug, items, worker)
	return res.Released, err
}

// Counts reads the project's queue sizes.
func (q engineQueues) Counts(ctx context.Context, slug string) (plugins.ProjectCounts, error) {
	c, err := q.engine.Counts(ctx, slug)
	if err != nil {
		return plugins.ProjectCounts{}, err
	}
	return plugins.ProjectCounts{Todo: c.TodoTotal(), Out: c.Out, Done: c.Done}, nil
}
