package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(killHelperEnv); url != "" {
		runKillHelper(url) // the subprocess of TestKill9MidCleanup; never returns
	}
	redistest.RunMain(m)
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// window is the protection window of the tests: the store's defaults
// (30m interval, 1h peer timeout and repair) allow anything above 1h.
const window = 2 * time.Hour

// fixture is a swarm store and a cleaner on one backend, sharing a fake
// clock.
type fixture struct {
	t       *testing.T
	b       redistest.Backend
	store   *swarm.Store
	cleaner *orphans.Cleaner
	clock   *swarm.FakeClock
}

func newFixture(t *testing.T, b redistest.Backend, private bool) *fixture {
	t.Helper()
	clock := swarm.NewFakeClock(epoch)
	store, err := swarm.New(b.Client, swarm.Config{Private: private, Clock: clock, Logger: quietLogger})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Stop() })
	f := &fixture{t: t, b: b, store: store, clock: clock}
	f.cleaner = f.newCleaner(fixturePolicy)
	if private {
		ctx := context.Background()
		require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
		for _, u := range []string{"alice", "bob"} {
			require.NoError(t, store.AddUser(ctx, pkPrefix+u, u))
		}
	}
	return f
}

// fixturePolicy is the fixture's cleaner's.
var fixturePolicy = orphans.Policy{Window: window, ScanCount: 100, MaxKeysPerTick: 1000}

func (f *fixture) newCleaner(p orphans.Policy) *orphans.Cleaner {
	f.t.Helper()
	return f.newCleanerOn(f.b.Client, p)
}

// newCleanerOn is a cleaner of this fixture's store and clock on client.
func (f *fixture) newCleanerOn(client redis.UniversalClient, p orphans.Policy) *orphans.Cleaner {
	f.t.Helper()
	c, err := orphans.New(client, orphans.Config{Store: f.store.Config(), Policy: p, Now: f.clock.Now, Logger: quietLogger})
	require.NoError(f.t, err)
	return c
}

func infoHash(name string) bittorrent.InfoHash { return sha1.Sum([]byte(name)) }

func peerID(n int) bittorrent.PeerID {
	var id bittorrent.PeerID
	copy(id[:], fmt.Sprintf("-TR%017d", n))
	return id
}

// announce sends one announce of peer n; passkey "" in open mode.
func (f *fixture) announce(hash bittorrent.InfoHash, n int, passkey string, left, uploaded uint64, ev bittorrent.Event) error {
	_, err := f.store.Announce(context.Background(), &bittorrent.AnnounceRequest{
		InfoHash: hash, PeerID: peerID(n), Passkey: passkey, Event: ev, NumWant: 5,
		Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(n >> 8), byte(n)}), 6881),
		Left: left, Uploaded: uploaded,
	})
	return err
}

func (f *fixture) pass() orphans.Report {
	f.t.Helper()
	r, err := f.cleaner.Pass(context.Background())
	require.NoError(f.t, err)
	return r
}

// torrentKeys lists every key under the torrent's hash tag.
func (f *fixture) torrentKeys(hash bittorrent.InfoHash) []string {
	f.t.Helper()
	return f.scan(btstore.TorrentPattern(hash))
}

// scan lists the keys matching pattern on every master.
func (f *fixture) scan(pattern string) []string {
	f.t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	collect := func(node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if cluster, ok := f.b.Client.(*redis.ClusterClient); ok {
		require.NoError(f.t, cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error { return collect(m) }))
	} else {
		require.NoError(f.t, collect(f.b.Client))
	}
	sort.Strings(out)
	return out
}

func (f *fixture) user(id string) swarm.UserSummary {
	f.t.Helper()
	require.NoError(f.t, f.store.Flush(context.Background()))
	u, err := f.store.User(context.Background(), id)
	require.NoError(f.t, err)
	return u
}

// cleaners runs cleanup over and over beside a race test: full passes of
// the fixture's cleaner in one goroutine and another frontend's bounded
// ticks in a second, until halt. Other goroutines of the test may join
// (go) and report errors the same way.
type cleaners struct {
	passes, ticks atomic.Int64
	stop          chan struct{}
	wg            sync.WaitGroup
	errs          chan error
}

func runCleaners(f *fixture) *cleaners {
	c := &cleaners{stop: make(chan struct{}), errs: make(chan error, 64)}
	ctx := context.Background()
	other := f.newCleaner(orphans.Policy{Window: window, ScanCount: 20, MaxKeysPerTick: 50})
	c.loop(func() error { _, err := f.cleaner.Pass(ctx); c.passes.Add(1); return err })
	c.loop(func() error { _, err := other.Tick(ctx); c.ticks.Add(1); return err })
	return c
}

// loop runs step until halt or its first error.
func (c *cleaners) loop(step func() error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			if err := step(); err != nil {
				c.report(err)
				return
			}
		}
	}()
}

// report keeps an error for halt (the first 64).
func (c *cleaners) report(err error) {
	select {
	case c.errs <- err:
	default:
	}
}

// halt stops every loop and fails the test on any error reported.
func (c *cleaners) halt(t *testing.T) {
	t.Helper()
	close(c.stop)
	c.wg.Wait()
	close(c.errs)
	for err := range c.errs {
		require.NoError(t, err)
	}
	require.Positive(t, c.passes.Load(), "no full pass ran")
}

// pkPrefix starts every test passkey ("pkalice"), so passkeys have the
// length swarm.MinPasskeyLen asks for.
const pkPrefix = "pk0123456789abcdef0123456789abcdef"
