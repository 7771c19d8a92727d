package bittorrent

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// TestHTTPJoinsConcurrentAnnouncesIntoStoreBatches: with a store that
// batches, a lone announce goes to it at once, alone; announces that
// arrive while every batch is in flight wait and go together, in batches
// of at most the bound, each answered to its own request, a refusal to
// its own.
func TestHTTPJoinsConcurrentAnnouncesIntoStoreBatches(t *testing.T) {
	const queued = 5
	fake := newFakeSwarms()
	fake.registered = map[InfoHash]bool{testHash: true}
	store := &batchingSwarms{fakeSwarms: fake, entered: make(chan struct{}), release: make(chan struct{})}
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: store, Logger: quietLogger()})
	require.NoError(t, err)
	require.NotNil(t, srv.batch, "a batching store gets batches")
	srv.batch = newHTTPBatcher(store, 1, 3) // before Start: the handlers read it
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	base := "http://" + srv.Addr()

	first := make(chan map[string]any, 1)
	go func() { first <- get(t, base+"/announce?"+announceQuery(nil)) }()
	<-store.entered // the only leader is inside the store with the first announce

	var wg sync.WaitGroup
	answers := make([]map[string]any, queued)
	for i := range queued {
		wg.Go(func() {
			answers[i] = get(t, base+"/announce?"+announceQuery(func(q *wire.AnnounceQuery) {
				q.PeerID[0] = byte(i + 1)
				if i == 2 {
					q.InfoHash = testHash2 // not registered: refused
				}
			}))
		})
	}
	require.Eventually(t, func() bool { return srv.batch.batches.Waiting() == queued },
		10*time.Second, time.Millisecond, "the announces queue behind the busy leader")
	close(store.release)
	wg.Wait()

	require.NotContains(t, <-first, "failure reason")
	for i, answer := range answers {
		if i == 2 {
			require.Equal(t, "unregistered torrent", answer["failure reason"])
			continue
		}
		require.NotContains(t, answer, "failure reason", "announce %d", i)
	}
	store.mu.Lock()
	require.Equal(t, []int{1, 3, 2}, store.batches, "the first alone, then the queued ones in batches of at most 3")
	store.mu.Unlock()
	require.Equal(t, 1+queued-1, fake.swarmSize(testHash), "every announce but the refused one joined, once")
	require.Equal(t, uint64(queued), srv.Stats().Announces)
}
