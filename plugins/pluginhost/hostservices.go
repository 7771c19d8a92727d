package pluginhost

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hoardproject/hoard/plugins"
)

// hostServices is one plugin's HostAPI in the host: the queue engine's work
// calls, limited to the projects of the plugin's item types (as last
// described), so a plugin cannot touch the warriors' projects.
type hostServices struct {
	s *supervisor
	q WorkQueues
}

var _ plugins.HostAPI = hostServices{}

// hostAPI returns the plugin's HostAPI, or nil when the host has no queue
// engine to offer.
func (s *supervisor) hostAPI() plugins.HostAPI {
	q, ok := s.h.opts.Queues.(WorkQueues)
	if !ok {
		return nil
	}
	return hostServices{s: s, q: q}
}

func (h hostServices) owned(project string) error {
	if !h.s.description().OwnsProject(project) {
		return fmt.Errorf("project %q: %w", project, plugins.ErrNotOwned)
	}
	return nil
}

func (h hostServices) Enqueue(ctx context.Context, project string, items []string) (int, error) {
	desc := h.s.description()
	for _, item := range items {
		if err := ownedType(desc, project, item, false); err != nil {
			return 0, err
		}
	}
	n, err := h.q.Enqueue(ctx, project, items)
	h.s.itemsQueued.Add(uint64(n))
	return n, err
}

func (h hostServices) EnqueueScored(ctx context.Context, project string, items []plugins.ScoredItem) (int, error) {
	desc := h.s.description()
	for _, item := range items {
		if err := ownedType(desc, project, item.Item, true); err != nil {
			return 0, err
		}
	}
	n, err := h.q.EnqueueScored(ctx, project, items)
	h.s.itemsQueued.Add(uint64(n))
	return n, err
}

// ownedType checks that item belongs to one of the plugin's item types,
// ordered as the call expects.
func ownedType(desc plugins.Description, project, item string, scored bool) error {
	t, ok := desc.Owner(project, item)
	if !ok {
		return fmt.Errorf("item %q of project %q: %w", item, project, plugins.ErrNotOwned)
	}
	if t.Scored() != scored {
		if scored {
			return fmt.Errorf("item %q is of FIFO item type %q: queue it with Enqueue", item, t.Name)
		}
		return fmt.Errorf("item %q is of score-ordered item type %q: queue it with EnqueueScored", item, t.Name)
	}
	return nil
}

func (h hostServices) Claim(ctx context.Context, project, worker string, count int) ([]string, error) {
	if err := h.owned(project); err != nil {
		return nil, err
	}
	return h.q.Claim(ctx, project, worker, count)
}

func (h hostServices) Done(ctx context.Context, project, worker string, items []string, result json.RawMessage) (int, error) {
	if err := h.owned(project); err != nil {
		return 0, err
	}
	return h.q.Done(ctx, project, worker, items, result)
}

func (h hostServices) Release(ctx context.Context, project, worker string, items []string) (int, error) {
	if err := h.owned(project); err != nil {
		return 0, err
	}
	return h.q.Release(ctx, project, worker, items)
}

func (h hostServices) Counts(ctx context.Context, project string) (plugins.ProjectCounts, error) {
	if err := h.owned(project); err != nil {
		return plugins.ProjectCounts{}, err
	}
	return h.q.Counts(ctx, project)
}
