package swarm_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// roundTrips counts what a client sends: single commands and pipelines,
// not the handshake of new connections.
type roundTrips struct {
	commands  atomic.Int64
	pipelines atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" { // a new connection's handshake
			r.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "client" { // a new connection's CLIENT SETINFO
			r.pipelines.Add(1)
		}
		return next(ctx, cmds)
	}
}

func (r *roundTrips) total() int64 { return r.commands.Load() + r.pipelines.Load() }

// countingClient opens a second client to the backend with a counting
// hook, so other tests' traffic is not counted.
func countingClient(t testing.TB, b redistest.Backend) (redis.UniversalClient, *roundTrips) {
	t.Helper()
	var client redis.UniversalClient
	switch c := b.Client.(type) {
	case *redis.Client:
		client = redis.NewClient(c.Options())
	case *redis.ClusterClient:
		client = redis.NewClusterClient(c.Options())
	default:
		t.Fatalf("unexpected client %T", b.Client)
	}
	t.Cleanup(func() { _ = client.Close() })
	counter := &roundTrips{}
	client.AddHook(counter)
	return client, counter
}

func TestAnnounceIsOneRoundTrip(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		client, counter := countingClient(t, b)
		ctx := context.Background()
		admin, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quietLogger})
		require.NoError(t, err)
		hash := infoHash("one-round-trip")
		require.NoError(t, admin.RegisterTorrent(ctx, hash, "t1"))
		require.NoError(t, admin.AddUser(ctx, pk("passkeyA"), "alice"))
		require.NoError(t, admin.AddClient(ctx, "-TR", "Transmission"))

		clock := swarm.NewFakeClock(epoch)
		store, err := swarm.New(client, swarm.Config{Private: true, Clock: clock, Logger: quietLogger})
		require.NoError(t, err)
		// Warm up: the passkey and whitelist loads, the new swarm's due
		// index entry, the script load.
		_, err = store.Announce(ctx, request(hash, peerID("-TR", 1), 1, passkey("passkeyA"), seeding))
		require.NoError(t, err)
		_, err = store.Announce(ctx, request(hash, peerID("-TR", 2), 2, passkey("passkeyA")))
		require.NoError(t, err)

		before := counter.total()
		for i := range 10 {
			resp, err := store.Announce(ctx, request(hash, peerID("-TR", 2), 2, passkey("passkeyA"),
				func(r *bittorrent.AnnounceRequest) { r.Downloaded = uint64(i) }))
			require.NoError(t, err)
			require.Len(t, resp.Peers, 1)
		}
		require.Equal(t, int64(10), counter.total()-before, "one round trip per announce")

		// Scrape of many torrents is one pipeline.
		before = counter.total()
		_, err = store.Scrape(ctx, pk("passkeyA"), []bittorrent.InfoHash{hash, infoHash("a"), infoHash("b")})
		require.NoError(t, err)
		require.Equal(t, int64(1), counter.total()-before)
	})
}
