package swarm_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a store on one backend with a fake clock.
type fixture struct {
	t     *testing.T
	b     redistest.Backend
	store *swarm.Store
	clock *swarm.FakeClock
}

func newFixture(t *testing.T, b redistest.Backend, cfg swarm.Config) *fixture {
	t.Helper()
	clock := swarm.NewFakeClock(epoch)
	cfg.Clock = clock
	cfg.Logger = quietLogger
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Minute
	}
	store, err := swarm.New(b.Client, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Stop() })
	return &fixture{t: t, b: b, store: store, clock: clock}
}

func infoHash(name string) bittorrent.InfoHash { return sha1.Sum([]byte(name)) }

// peerID makes a 20-byte peer id with a client prefix.
func peerID(prefix string, n int) bittorrent.PeerID {
	var id bittorrent.PeerID
	copy(id[:], fmt.Sprintf("%s%0*d", prefix, len(id)-len(prefix), n))
	return id
}

func addr(n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}), uint16(6881+n))
}

type announceOpt func(*bittorrent.AnnounceRequest)

func seeding(r *bittorrent.AnnounceRequest) { r.Left = 0 }
func event(e bittorrent.Event) announceOpt {
	return func(r *bittorrent.AnnounceRequest) { r.Event = e }
}
func passkey(p string) announceOpt { return func(r *bittorrent.AnnounceRequest) { r.Passkey = pk(p) } }
func numWant(n int) announceOpt    { return func(r *bittorrent.AnnounceRequest) { r.NumWant = n } }

// pk pads a short test name ("passkeyA") to a passkey of the length
// swarm.MinPasskeyLen asks for, so tests read by name.
func pk(name string) string {
	return name + strings.Repeat("0", max(0, swarm.MinPasskeyLen-len(name)))
}
func transfer(up, down uint64) announceOpt {
	return func(r *bittorrent.AnnounceRequest) { r.Uploaded, r.Downloaded = up, down }
}

func request(hash bittorrent.InfoHash, peer bittorrent.PeerID, n int, opts ...announceOpt) *bittorrent.AnnounceRequest {
	req := &bittorrent.AnnounceRequest{
		InfoHash: hash, PeerID: peer, Addr: addr(n), Left: 1000, NumWant: 50,
	}
	for _, opt := range opts {
		opt(req)
	}
	return req
}

func (f *fixture) announce(hash bittorrent.InfoHash, peer bittorrent.PeerID, n int, opts ...announceOpt) *bittorrent.AnnounceResponse {
	f.t.Helper()
	resp, err := f.store.Announce(context.Background(), request(hash, peer, n, opts...))
	require.NoError(f.t, err)
	return resp
}

// refuse announces and returns the refusal's reason.
func (f *fixture) refuse(hash bittorrent.InfoHash, peer bittorrent.PeerID, n int, opts ...announceOpt) string {
	f.t.Helper()
	_, err := f.store.Announce(context.Background(), request(hash, peer, n, opts...))
	var clientErr *bittorrent.ClientError
	require.ErrorAs(f.t, err, &clientErr)
	return clientErr.Reason
}

func (f *fixture) torrent(hash bittorrent.InfoHash) swarm.TorrentInfo {
	f.t.Helper()
	info, err := f.store.Torrent(context.Background(), hash)
	require.NoError(f.t, err)
	return info
}

func (f *fixture) flush() {
	f.t.Helper()
	require.NoError(f.t, f.store.Flush(context.Background()))
}

func (f *fixture) stats() swarm.Stats {
	f.t.Helper()
	f.flush()
	stats, err := f.store.Stats(context.Background())
	require.NoError(f.t, err)
	return stats
}

func (f *fixture) user(id string) swarm.UserSummary {
	f.t.Helper()
	f.flush()
	u, err := f.store.User(context.Background(), id)
	require.NoError(f.t, err)
	return u
}

// private sets up a private store with one registered torrent, one user
// and a whitelisted client prefix "-TR".
func privateFixture(t *testing.T, b redistest.Backend, cfg swarm.Config) (*fixture, bittorrent.InfoHash) {
	t.Helper()
	cfg.Private = true
	f := newFixture(t, b, cfg)
	ctx := context.Background()
	hash := infoHash("private")
	require.NoError(t, f.store.RegisterTorrent(ctx, hash, "t1"))
	require.NoError(t, f.store.AddUser(ctx, pk("passkeyA"), "alice"))
	require.NoError(t, f.store.AddUser(ctx, pk("passkeyB"), "bob"))
	require.NoError(t, f.store.AddClient(ctx, "-TR", "Transmission"))
	return f, hash
}

func peerIDs(peers []bittorrent.Peer) []bittorrent.PeerID {
	out := make([]bittorrent.PeerID, len(peers))
	for i, p := range peers {
		out[i] = p.ID
	}
	return out
}
