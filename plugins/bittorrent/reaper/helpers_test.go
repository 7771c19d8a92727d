package reaper_test

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	t      *testing.T
	ctx    context.Context
	clock  *swarm.FakeClock
	store  *swarm.Store
	reaper *reaper.Reaper
	pub    *memPublisher
	rdb    redis.UniversalClient
	policy reaper.Policy
}

// memPublisher keeps the events it is given; fail, when set, refuses them.
type memPublisher struct {
	mu     sync.Mutex
	events []reaper.Event
	fail   error
}

func (p *memPublisher) Publish(_ context.Context, events []reaper.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.events = append(p.events, events...)
	return nil
}

// take returns the events published since the last take.
func (p *memPublisher) take() []reaper.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.events
	p.events = nil
	return out
}

// ofKind decodes the events of one kind into bodies of type T.
func ofKind[T any](t *testing.T, events []reaper.Event, kind string) (bodies []T, keys []string) {
	t.Helper()
	for _, ev := range events {
		if ev.Kind != kind {
			continue
		}
		var body T
		require.NoError(t, json.Unmarshal(ev.Body, &body))
		bodies = append(bodies, body)
		keys = append(keys, ev.Key)
	}
	return bodies, keys
}

func newFixture(t *testing.T, b redistest.Backend, policy reaper.Policy) *fixture {
	t.Helper()
	clock := swarm.NewFakeClock(start)
	store, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Stop() })
	ctx := context.Background()
	require.NoError(t, store.AddUser(ctx, seederPasskey, "seeder"))
	require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
	pub := &memPublisher{}
	r := reaper.New(b.Client, reaper.Config{Policy: policy, Now: clock.Now, Unregister: store.UnregisterTorrent, Logger: quiet,
		Publisher: pub})
	return &fixture{t: t, ctx: ctx, clock: clock, store: store, reaper: r, pub: pub, rdb: b.Client, policy: policy}
}

// announceAs announces for a user (their passkey is the user id with
// pkSuffix), from a peer of theirs, with left bytes left.
func (f *fixture) announceAs(hash bittorrent.InfoHash, user string, left int64, event bittorrent.Event) {
	f.t.Helper()
	require.NoError(f.t, f.store.AddUser(f.ctx, user+pkSuffix, user))
	var peer bittorrent.PeerID
	copy(peer[:], fmt.Sprintf("-TR0000-%-12.12s", user))
	req := &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer, Passkey: user + pkSuffix, Left: uint64(left),
		Addr: netip.MustParseAddrPort("10.0.0.2:6881"), Event: event}
	_, err := f.store.Announce(f.ctx, req)
	require.NoError(f.t, err)
}

// snatch has a user download the torrent whole and stop.
func (f *fixture) snatch(hash bittorrent.InfoHash, user string) {
	f.t.Helper()
	f.announceAs(hash, user, 100, bittorrent.EventStarted)
	f.announceAs(hash, user, 0, bittorrent.EventCompleted)
	f.announceAs(hash, user, 0, bittorrent.EventStopped)
}

// reseed has a user start seeding (and stay).
func (f *fixture) reseed(hash bittorrent.InfoHash, user string) {
	f.t.Helper()
	f.announceAs(hash, user, 0, bittorrent.EventStarted)
}

// stopSeeding has a user's seeder leave.
func (f *fixture) stopSeeding(hash bittorrent.InfoHash, user string) {
	f.t.Helper()
	f.announceAs(hash, user, 0, bittorrent.EventStopped)
}

// runAll is one run with its workers: tick, then process every item.
func (f *fixture) runAll() map[string]reaper.Outcome {
	f.t.Helper()
	out := map[string]reaper.Outcome{}
	for _, name := range f.tick() {
		o, err := f.reaper.Process(f.ctx, name)
		require.NoError(f.t, err)
		out[name] = o
	}
	return out
}

// dump is every key of the backend with its DUMP and TTL, to compare.
func dump(t *testing.T, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	read := func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, "*", 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				v, err := node.Dump(ctx, k).Result()
				if err != nil {
					return err
				}
				ttl, err := node.PTTL(ctx, k).Result()
				if err != nil {
					return err
				}
				out[k] = fmt.Sprintf("%x ttl=%v", v, ttl > 0)
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		require.NoError(t, cluster.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, master)
		}))
	} else {
		require.NoError(t, read(ctx, rdb))
	}
	return out
}

func hashOf(name string) bittorrent.InfoHash { return sha1.Sum([]byte(name)) }

func (f *fixture) register(name, uploader string) bittorrent.InfoHash {
	f.t.Helper()
	hash := hashOf(name)
	require.NoError(f.t, f.store.Register(f.ctx, hash, swarm.Registration{ID: fmt.Sprintf("id%x", hash[:4]), Uploader: uploader}))
	return hash
}

// seedAndLeave has a seeder come and go: last_action becomes now.
func (f *fixture) seedAndLeave(hash bittorrent.InfoHash) {
	f.t.Helper()
	var peer bittorrent.PeerID
	copy(peer[:], "-TR0000000000000seed")
	req := &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer, Passkey: seederPasskey,
		Addr: netip.MustParseAddrPort("10.0.0.1:6881"), Event: bittorrent.EventStarted}
	_, err := f.store.Announce(f.ctx, req)
	require.NoError(f.t, err)
	req.Event = bittorrent.EventStopped
	_, err = f.store.Announce(f.ctx, req)
	require.NoError(f.t, err)
}

func (f *fixture) names(items []reaper.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Name()
	}
	return out
}

func (f *fixture) plan() []string {
	f.t.Helper()
	items, err := f.reaper.Plan(f.ctx)
	require.NoError(f.t, err)
	return f.names(items)
}

func (f *fixture) tick() []string {
	f.t.Helper()
	names, err := f.reaper.Tick(f.ctx)
	require.NoError(f.t, err)
	return names
}

func (f *fixture) apply(name string) reaper.Outcome {
	f.t.Helper()
	out, err := f.reaper.Apply(f.ctx, name)
	require.NoError(f.t, err)
	return out
}

func (f *fixture) state(hash bittorrent.InfoHash) reaper.State {
	f.t.Helper()
	s, err := f.reaper.State(f.ctx, hash)
	require.NoError(f.t, err)
	return s
}

func item(step reaper.Step, hash bittorrent.InfoHash, epoch int64) string {
	return reaper.Item{Step: step, InfoHash: hash, Epoch: epoch}.Name()
}

// Test passkeys have the length swarm.MinPasskeyLen asks for: a user's
// is its id and pkSuffix, the seeder's is seederPasskey.
const (
	pkSuffix      = "-pk0123456789abcdef0123456789abcdef"
	seederPasskey = "passkey0123456789abcdef0123456789abcdef"
)
