package bittorrent

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// gatedSwarms holds the first announce until release is closed, and makes
// every later one wait until `together` of them are in the store at once:
// a listener handling a batch's announces one after another never gets
// there.
type gatedSwarms struct {
	*fakeSwarms
	entered, release chan struct{}
	together         int

	mu       sync.Mutex
	first    bool
	inflight int
	reached  chan struct{}
}

func (g *gatedSwarms) Announce(ctx context.Context, req *AnnounceRequest) (*AnnounceResponse, error) {
	g.mu.Lock()
	if !g.first {
		g.first = true
		g.mu.Unlock()
		close(g.entered)
		<-g.release
		return g.fakeSwarms.Announce(ctx, req)
	}
	g.inflight++
	if g.inflight == g.together {
		close(g.reached)
	}
	g.mu.Unlock()
	// The bound only keeps a broken listener from hanging the test.
	select {
	case <-g.reached:
		return g.fakeSwarms.Announce(ctx, req)
	case <-time.After(10 * time.Second):
		return nil, errors.New("the batch's announces were not in the store together")
	}
}

// TestUDPBatchesReadsAndAnswersConcurrently: datagrams that queue while
// the reader is busy are taken in one read, and the batch's announces
// reach the store together, each answered to its own transaction id.
func TestUDPBatchesReadsAndAnswersConcurrently(t *testing.T) {
	const announces, connects = 4, 3
	gate := &gatedSwarms{fakeSwarms: newFakeSwarms(), entered: make(chan struct{}), release: make(chan struct{}),
		together: announces, reached: make(chan struct{})}
	// One reader, so every packet below goes through the same reads.
	srv := startUDP(t, gate, func(c *UDPConfig) { c.Workers = udpBatch; c.Addr6 = "" })
	c := dialUDPClient(t, "udp4", "", srv.Addr4())
	c.connect()

	send := c.sendNext
	blocker := send(udpAnnounce("", nil))
	<-gate.entered // the reader is inside the store with the first announce
	want := map[uint32]wire.Action{}
	for i := range announces {
		tx := send(udpAnnounce("", func(r *wire.UDPRequest) { r.PeerID[0] = byte(i + 1) }))
		want[tx] = wire.ActionAnnounce
	}
	for range connects {
		want[send(wire.UDPRequest{Action: wire.ActionConnect})] = wire.ActionConnect
	}
	close(gate.release)

	require.Equal(t, blocker, c.receive().TransactionID)
	for range len(want) {
		resp := c.receive()
		action, ok := want[resp.TransactionID]
		require.True(t, ok, "reply to an unknown or repeated transaction %d", resp.TransactionID)
		require.Equal(t, action, resp.Action, resp.Message)
		delete(want, resp.TransactionID)
	}
	require.Equal(t, 1+announces, gate.announceCount())
	require.Equal(t, uint64(1+1+announces+connects), srv.packets.Load())
	require.Equal(t, uint64(3), srv.reads.Load(), "the connect, the first announce, then the queued packets in one read")
	require.Equal(t, uint64(1+announces), srv.Stats().Announces)
}

// TestUDPOneDatagramPerCallWhereTheKernelHasNoBatches runs the path of the
// platforms without recvmmsg/sendmmsg (x/net's batch calls are not
// implemented on Windows): every read is one datagram, and IPv4 and IPv6
// clients get their connect, announce and scrape answered.
func TestUDPOneDatagramPerCallWhereTheKernelHasNoBatches(t *testing.T) {
	fake := newFakeSwarms()
	srv, err := NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0", Addr6: "[::1]:0", Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	srv.kernelBatches = false
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })

	for network, addr := range map[string]string{"udp4": srv.Addr4(), "udp6": srv.Addr6()} {
		c := dialUDPClient(t, network, "", addr)
		c.connect()
		resp := c.do(udpAnnounce("", func(r *wire.UDPRequest) { r.PeerID[0] = network[3] }))
		require.Equal(t, wire.ActionAnnounce, resp.Action, "%s: %s", network, resp.Message)
		resp = c.do(wire.UDPRequest{Action: wire.ActionScrape, InfoHashes: [][20]byte{testHash}})
		require.Equal(t, wire.ActionScrape, resp.Action, "%s: %s", network, resp.Message)
	}
	require.Equal(t, 2, fake.swarmSize(testHash))
	require.Equal(t, srv.reads.Load(), srv.packets.Load(), "one datagram per read")
	require.Equal(t, uint64(6), srv.packets.Load())

	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer conn.Close()
	require.IsType(t, singleConn{}, newBatchConn(conn, "udp4", false), "the standard library's calls")
	require.IsType(t, &ipv4.PacketConn{}, newBatchConn(conn, "udp4", true))
	require.IsType(t, &ipv6.PacketConn{}, newBatchConn(conn, "udp6", true))
}

// batchingSwarms answers announces only in batches, recording each
// batch's size; the first batch waits until release is closed.
type batchingSwarms struct {
	*fakeSwarms
	entered, release chan struct{}

	mu      sync.Mutex
	batches []int
}

func (b *batchingSwarms) Announce(context.Context, *AnnounceRequest) (*AnnounceResponse, error) {
	return nil, errors.New("a batching store's listener must call AnnounceBatch")
}

func (b *batchingSwarms) AnnounceBatch(ctx context.Context, reqs []*AnnounceRequest, results []AnnounceResult) {
	b.mu.Lock()
	b.batches = append(b.batches, len(reqs))
	first := len(b.batches) == 1
	b.mu.Unlock()
	if first {
		close(b.entered)
		<-b.release
	}
	for i, req := range reqs {
		results[i].Resp, results[i].Err = b.fakeSwarms.Announce(ctx, req)
	}
}

// TestUDPAnswersAReadsAnnouncesInOneStoreCall: with a store that batches,
// the announces of one read reach it in one AnnounceBatch call (one round
// trip to Redis), each answered to its own transaction id, a refusal to
// its own; connects and scrapes of the same read are answered beside it.
func TestUDPAnswersAReadsAnnouncesInOneStoreCall(t *testing.T) {
	const announces, connects = 5, 2
	fake := newFakeSwarms()
	other := InfoHash{9}
	fake.registered = map[InfoHash]bool{testHash: true}
	store := &batchingSwarms{fakeSwarms: fake, entered: make(chan struct{}), release: make(chan struct{})}
	srv := startUDP(t, store, func(c *UDPConfig) { c.Workers = udpBatch; c.Addr6 = "" })
	c := dialUDPClient(t, "udp4", "", srv.Addr4())
	c.connect()

	send := c.sendNext
	blocker := send(udpAnnounce("", nil))
	<-store.entered // the reader is inside the store with the first announce
	want := map[uint32]wire.Action{}
	var refused uint32
	for i := range announces {
		tx := send(udpAnnounce("", func(r *wire.UDPRequest) {
			r.PeerID[0] = byte(i + 1)
			if i == 2 {
				r.InfoHash = other
			}
		}))
		want[tx] = wire.ActionAnnounce
		if i == 2 {
			refused, want[tx] = tx, wire.ActionError
		}
	}
	want[send(wire.UDPRequest{Action: wire.ActionScrape, InfoHashes: [][20]byte{testHash}})] = wire.ActionScrape
	for range connects {
		want[send(wire.UDPRequest{Action: wire.ActionConnect})] = wire.ActionConnect
	}
	close(store.release)

	require.Equal(t, blocker, c.receive().TransactionID)
	for range len(want) {
		resp := c.receive()
		action, ok := want[resp.TransactionID]
		require.True(t, ok, "reply to an unknown or repeated transaction %d", resp.TransactionID)
		require.Equal(t, action, resp.Action, resp.Message)
		if resp.TransactionID == refused {
			require.Equal(t, "unregistered torrent", resp.Message)
		}
		delete(want, resp.TransactionID)
	}
	store.mu.Lock()
	require.Equal(t, []int{1, announces}, store.batches, "the first announce alone, then the queued ones in one call")
	store.mu.Unlock()
	require.Equal(t, 1+announces-1, fake.swarmSize(testHash))
	require.Equal(t, uint64(3), srv.reads.Load(), "the connect, the first announce, then the queued packets in one read")
	require.Equal(t, uint64(announces), srv.Stats().Announces, "every announce but the refused one")
}

// sendNext sends req under the client's next transaction ID (and its
// connection ID, but for a connect) and returns that ID.
func (c *udpClient) sendNext(req wire.UDPRequest) uint32 {
	c.tx++
	req.TransactionID = c.tx
	if req.Action != wire.ActionConnect {
		req.ConnectionID = c.connID
	}
	c.send(wire.AppendUDPRequest(nil, &req))
	return c.tx
}
