package plugins

import (
	"context"
	"encoding/json"

	"github.com/hoardproject/hoard/plugins/pluginpb"
)

// hostGRPCServer serves a plugin's HostAPI to its process, on the broker
// stream named in ConfigureRequest.host_broker_id.
type hostGRPCServer struct {
	pluginpb.UnimplementedHostServer
	api HostAPI
}

func (s *hostGRPCServer) Enqueue(ctx context.Context, req *pluginpb.EnqueueRequest) (*pluginpb.CountReply, error) {
	n, err := s.api.Enqueue(ctx, req.GetProject(), req.GetItems())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginpb.CountReply{Count: int64(n)}, nil
}

func (s *hostGRPCServer) EnqueueScored(ctx context.Context, req *pluginpb.EnqueueScoredRequest) (*pluginpb.CountReply, error) {
	items := make([]ScoredItem, len(req.GetItems()))
	for i, it := range req.GetItems() {
		items[i] = ScoredItem{Item: it.GetItem(), Score: it.GetScore()}
	}
	n, err := s.api.EnqueueScored(ctx, req.GetProject(), items)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginpb.CountReply{Count: int64(n)}, nil
}

func (s *hostGRPCServer) Claim(ctx context.Context, req *pluginpb.ClaimRequest) (*pluginpb.ClaimReply, error) {
	items, err := s.api.Claim(ctx, req.GetProject(), req.GetWorker(), int(req.GetCount()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginpb.ClaimReply{Items: items}, nil
}

func (s *hostGRPCServer) Done(ctx context.Context, req *pluginpb.DoneRequest) (*pluginpb.CountReply, error) {
	var result json.RawMessage
	if len(req.GetResult()) > 0 {
		result = req.GetResult()
	}
	n, err := s.api.Done(ctx, req.GetProject(), req.GetWorker(), req.GetItems(), result)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginpb.CountReply{Count: int64(n)}, nil
}

func (s *hostGRPCServer) Release(ctx context.Context, req *pluginpb.ReleaseRequest) (*pluginpb.CountReply, error) {
	n, err := s.api.Release(ctx, req.GetProject(), req.GetWorker(), req.GetItems())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginpb.CountReply{Count: int64(n)}, nil
}

func (s *hostGRPCServer) Counts(ctx context.Context, req *pluginpb.CountsRequest) (*pluginpb.CountsReply, error) {
	c, err := s.api.Counts(ctx, req.GetProject())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginpb.CountsReply{Todo: c.Todo, Out: c.Out, Done: c.Done}, nil
}

// hostGRPCClient is the HostAPI a plugin process gets in Config.Host.
type hostGRPCClient struct {
	client pluginpb.HostClient
}

var _ HostAPI = (*hostGRPCClient)(nil)

func (c *hostGRPCClient) Enqueue(ctx context.Context, project string, items []string) (int, error) {
	reply, err := c.client.Enqueue(ctx, &pluginpb.EnqueueRequest{Project: project, Items: items})
	if err != nil {
		return 0, fromStatus(err)
	}
	return int(reply.GetCount()), nil
}

func (c *hostGRPCClient) EnqueueScored(ctx context.Context, project string, items []ScoredItem) (int, error) {
	req := &pluginpb.EnqueueScoredRequest{Project: project, Items: make([]*pluginpb.ScoredItem, len(items))}
	for i, it := range items {
		req.Items[i] = &pluginpb.ScoredItem{Item: it.Item, Score: it.Score}
	}
	reply, err := c.client.EnqueueScored(ctx, req)
	if err != nil {
		return 0, fromStatus(err)
	}
	return int(reply.GetCount()), nil
}

func (c *hostGRPCClient) Claim(ctx context.Context, project, worker string, count int) ([]string, error) {
	reply, err := c.client.Claim(ctx, &pluginpb.ClaimRequest{Project: project, Worker: worker, Count: int32(min(count, 1<<30))})
	if err != nil {
		return nil, fromStatus(err)
	}
	items := reply.GetItems()
	if items == nil {
		items = []string{}
	}
	return items, nil
}

func (c *hostGRPCClient) Done(ctx context.Context, project, worker string, items []string, result json.RawMessage) (int, error) {
	reply, err := c.client.Done(ctx, &pluginpb.DoneRequest{Project: project, Worker: worker, Items: items, Result: result})
	if err != nil {
		return 0, fromStatus(err)
	}
	return int(reply.GetCount()), nil
}

func (c *hostGRPCClient) Release(ctx context.Context, project, worker string, items []string) (int, error) {
	reply, err := c.client.Release(ctx, &pluginpb.ReleaseRequest{Project: project, Worker: worker, Items: items})
	if err != nil {
		return 0, fromStatus(err)
	}
	return int(reply.GetCount()), nil
}

func (c *hostGRPCClient) Counts(ctx context.Context, project string) (ProjectCounts, error) {
	reply, err := c.client.Counts(ctx, &pluginpb.CountsRequest{Project: project})
	if err != nil {
		return ProjectCounts{}, fromStatus(err)
	}
	return ProjectCounts{Todo: reply.GetTodo(), Out: reply.GetOut(), Done: reply.GetDone()}, nil
}
