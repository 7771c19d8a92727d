package plugins

import (
	"context"
	"encoding/json"
	"fmt"
)

// hostServices is one plugin's HostAPI in the host: the queue engine's work
// calls, limited to the projects of the plugin's item types (as last
// described), so a plugin cannot touch the warriors' projects.
type hostServices struct {
	s *supervisor
	q WorkQueues
}

var _ HostAPI = hostServices{}

// hostAPI returns the plugin's HostAPI, or nil when the host has no queue
// engine to offer.
func (s *supervisor) hostAPI() HostAPI {
	q, ok := s.h.opts.Queues.(WorkQueues)
	if !ok {
		return nil
	}
	return hostServices{s: s, q: q}
}

func (h hostServices) owned(project string) error {
	if !h.s.description().ownsProject(project) {
		return fmt.Errorf("project %q: %w", project, ErrNotOwned)
	}
	return nil
}

func (h hostServices) Enqueue(ctx context.Context, project string, items []string) (int, error) {
	desc := h.s.description()
	for _, item := range items {
		if _, ok := desc.owner(project, item); !ok {
			return 0, fmt.Errorf("item %q of project %q: %w", item, project, ErrNotOwned)
		}
	}
	n, err := h.q.Enqueue(ctx, project, items)
	h.s.itemsQueued.Add(uint64(n))
	return n, err
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

func (h hostServices) Counts(ctx context.Context, project string) (ProjectCounts, error) {
	if err := h.owned(project); err != nil {
		return ProjectCounts{}, err
	}
	return h.q.Counts(ctx, project)
}
