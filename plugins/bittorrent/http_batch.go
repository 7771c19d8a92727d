package bittorrent

import (
	"context"

	"github.com/hoardproject/hoard/internal/callbatch"
)

// Bounds of the HTTP announce batches: two in flight, as a UDP socket has
// two readers, each as large as a UDP read. With four (the store's shared
// pipelines), under a client opening a connection per announce, Redis
// read 3.7-3.9 scripts per read; with two, 6.2, and the plugin's pipeline work per announce fell by a
// third (docs/bittorrent.md, "A connection per announce"). A request
// waits at most for the batch in flight: a Redis round trip.
const (
	httpBatchLeaders = 2
	httpBatchMax     = udpBatch
)

// httpBatcher joins concurrent HTTP announces into BatchAnnouncer calls,
// as the UDP reader hands the store a read's announces: one call, one
// round trip to the store's Redis, for the announces that arrived
// together. The requests lead the batches in turn (internal/callbatch):
// with no timer, a lone announce goes at once, and the requests that
// arrive while every batch is in flight go together in the next.
type httpBatcher struct {
	store   BatchAnnouncer
	batches *callbatch.Batches[httpAnnounce]
}

// httpAnnounce is one request and, once its batch has run, its answer.
type httpAnnounce struct {
	ctx context.Context
	req *AnnounceRequest
	res AnnounceResult
}

func newHTTPBatcher(store BatchAnnouncer, leaders, maxBatch int) *httpBatcher {
	b := &httpBatcher{store: store}
	b.batches = callbatch.New(leaders, maxBatch, b.run)
	return b
}

// announce answers req as the store's Announce would, in a batch. A
// waiting request does not leave when its client does: it may be made
// leader, and the others would then wait for nobody. A batch is bounded
// by the store's own timeouts.
func (b *httpBatcher) announce(ctx context.Context, req *AnnounceRequest) (*AnnounceResponse, error) {
	a := &httpAnnounce{ctx: ctx, req: req}
	b.batches.Do(a)
	return a.res.Resp, a.res.Err
}

// run answers a batch with one AnnounceBatch call. A request whose client
// left before its batch is not sent.
func (b *httpBatcher) run(batch []*httpAnnounce) {
	reqs := make([]*AnnounceRequest, 0, len(batch))
	live := make([]*httpAnnounce, 0, len(batch))
	for _, a := range batch {
		if err := a.ctx.Err(); err != nil {
			a.res = AnnounceResult{Err: err}
			continue
		}
		reqs = append(reqs, a.req)
		live = append(live, a)
	}
	if len(live) == 0 {
		return
	}
	results := make([]AnnounceResult, len(live))
	// Not one request's context: the batch carries the others', which must
	// not fail because that client left.
	b.store.AnnounceBatch(context.WithoutCancel(live[0].ctx), reqs, results)
	for i, a := range live {
		a.res = results[i]
	}
}
