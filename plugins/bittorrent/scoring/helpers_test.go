package scoring_test

import (
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
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestMain runs every test on a real redis-server and a real 3-node Redis
// Cluster (internal/redistest).
func TestMain(m *testing.M) { redistest.RunMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a swarm store and a scorer on one backend, sharing a fake
// clock.
type fixture struct {
	t      testing.TB
	b      redistest.Backend
	clock  *swarm.FakeClock
	store  *swarm.Store
	scorer *scoring.Scorer
}

// newFixture builds a fixture; settings is scoring's JSON settings ("" for
// the defaults).
func newFixture(t testing.TB, b redistest.Backend, private bool, settings string) *fixture {
	t.Helper()
	clock := swarm.NewFakeClock(epoch)
	store, err := swarm.New(b.Client, swarm.Config{Private: private, Clock: clock, Logger: quiet, AnnouncePipelines: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Stop() })
	_, policy, err := scoring.ParseSettings([]byte(settings), private)
	require.NoError(t, err)
	// The tests' trackers are on loopback, which an operator must allow.
	policy.Targets.AllowPrivate = true
	return &fixture{t: t, b: b, clock: clock, store: store, scorer: scoring.New(b.Client, policy, clock, quiet)}
}

func infoHash(name string) bittorrent.InfoHash { return sha1.Sum([]byte(name)) }

// announce puts n peers with distinct IPs (10.<from+i>) in the swarm.
func (f *fixture) announce(hash bittorrent.InfoHash, from, n int) {
	f.t.Helper()
	for i := from; i < from+n; i++ {
		var id bittorrent.PeerID
		copy(id[:], fmt.Sprintf("-GO0001-%012d", i))
		_, err := f.store.Announce(f.t.Context(), &bittorrent.AnnounceRequest{
			InfoHash: hash, PeerID: id, Left: 1,
			Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 6881),
		})
		require.NoError(f.t, err)
	}
}

// tracked announces one peer so the torrent is known, tracks it and
// checks it starts at 1.0.
func (f *fixture) tracked(name string) bittorrent.InfoHash {
	f.t.Helper()
	hash := infoHash(name)
	f.announce(hash, 1_000_000, 1)
	ok, err := f.scorer.Track(f.t.Context(), hash)
	require.NoError(f.t, err)
	require.True(f.t, ok)
	rec := f.record(hash)
	require.Equal(f.t, "active", rec.State)
	require.Equal(f.t, 1.0, rec.Score)
	return hash
}

func (f *fixture) record(hash bittorrent.InfoHash) scoring.Record {
	f.t.Helper()
	rec, err := f.scorer.Record(f.t.Context(), hash)
	require.NoError(f.t, err)
	return rec
}

// apply applies a result for the torrent's round.
func (f *fixture) apply(hash bittorrent.InfoHash, round int64, r scoring.Result) scoring.Outcome {
	f.t.Helper()
	if r.Max == 0 {
		r.Max = int64(f.scorer.Policy().MaxPeers)
	}
	out, err := f.scorer.Apply(f.t.Context(), f.item(hash, round), r)
	require.NoError(f.t, err)
	return out
}

// item names a torrent's n-th round: a record's rounds count from its
// RoundBase (score_track.lua), 0 when it has no record.
func (f *fixture) item(hash bittorrent.InfoHash, n int64) string {
	f.t.Helper()
	return scoring.ItemName(hash, f.record(hash).RoundBase+n)
}
