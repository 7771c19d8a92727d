package reaper_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

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
}

func newFixture(t *testing.T, b redistest.Backend, policy reaper.Policy) *fixture {
	t.Helper()
	clock := swarm.NewFakeClock(start)
	store, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Stop() })
	ctx := context.Background()
	require.NoError(t, store.AddUser(ctx, "passkey", "seeder"))
	require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
	r := reaper.New(b.Client, reaper.Config{Policy: policy, Now: clock.Now, Unregister: store.UnregisterTorrent, Logger: quiet})
	return &fixture{t: t, ctx: ctx, clock: clock, store: store, reaper: r}
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
	req := &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer, Passkey: "passkey",
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
