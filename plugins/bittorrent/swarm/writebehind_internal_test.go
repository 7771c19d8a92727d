package swarm

import (
	"context"
	"crypto/sha1"
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// TestAViewReadTakenOverClosesOnlyItsOwnChannel: a view read still out
// after maxViewAge is taken over by a later one. The older read coming
// back first must neither wake the later read's followers (its view is
// not in yet) nor close the later read's channel, which its own leader
// closes after: that was a "close of nil channel" panic in CI, under load.
func TestAViewReadTakenOverClosesOnlyItsOwnChannel(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) { testViewReadTakenOver(t, b) })
}

func testViewReadTakenOver(t *testing.T, b redistest.Backend) {
	ctx := context.Background()
	clock := NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s, err := New(b.Client, Config{Clock: clock, Logger: slog.New(slog.DiscardHandler), Interval: 30 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	require.NotNil(t, s.writeBehind)

	hash := bittorrent.InfoHash(sha1.Sum([]byte("taken-over")))
	req := func(n byte, event bittorrent.Event) *bittorrent.AnnounceRequest {
		var id bittorrent.PeerID
		copy(id[:], "-AA000000000000000")
		id[19] = '0' + n
		return &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: id, Event: event, Left: 1000, NumWant: 50,
			Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, n}), 6881)}
	}
	for n := byte(1); n <= 3; n++ {
		_, err := s.Announce(ctx, req(n, bittorrent.EventStarted))
		require.NoError(t, err)
	}
	read := func(n byte) *viewRead {
		_, rd, ok := s.writeBehind.answerOrRead(ctx, req(n, bittorrent.EventNone), "", 50, s.nowMillis())
		require.True(t, ok)
		require.NotNil(t, rd, "the view is stale: peer %d reads it", n)
		return rd
	}
	failed := func() *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errors.New("read timed out"))
		return cmd
	}
	closed := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}

	clock.Advance(time.Second)
	older := read(1)
	require.False(t, older.follower)
	clock.Advance(maxViewAge + time.Millisecond) // the older read is still out
	later := read(2)
	require.False(t, later.follower, "a read older than maxViewAge is taken over")
	follower := read(3)
	require.True(t, follower.follower)
	require.True(t, follower.done == later.done, "peer 3 waits for the later read")

	_, ok := s.writeBehind.finishRead(older, failed(), 50, s.nowMillis())
	require.False(t, ok)
	require.True(t, closed(older.done))
	require.False(t, closed(later.done), "the older read does not wake the later one's followers")

	require.NotPanics(t, func() { s.writeBehind.finishRead(later, failed(), 50, s.nowMillis()) })
	require.True(t, closed(follower.done))
	v := s.writeBehind.views.of(hash, false)
	v.mu.Lock()
	defer v.mu.Unlock()
	require.Zero(t, v.readingAt, "no read is in flight")
	require.Nil(t, v.readDone)
}

// A due write's view read is installed only if this frontend changed
// nothing of the torrent since the call was made: its own event may have
// landed after the read, and the invalidated view must be read again.
func TestADueWritesViewIsNotInstalledOverAnInvalidation(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clock := NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		s, err := New(b.Client, Config{Clock: clock, Logger: slog.New(slog.DiscardHandler), Interval: 30 * time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		hash := bittorrent.InfoHash(sha1.Sum([]byte("due-invalidated")))
		var id bittorrent.PeerID
		copy(id[:], "-AA000000000000000-1")
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), 6881)
		_, err = s.Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: id, Event: bittorrent.EventStarted,
			Left: 1000, NumWant: 50, Addr: addr})
		require.NoError(t, err)
		w := s.writeBehind
		w.views.of(hash, true)

		for _, invalidated := range []bool{true, false} {
			clock.Advance(time.Second)
			now := s.nowMillis()
			view, gen := w.views.generation(hash)
			require.NotNil(t, view)
			if invalidated {
				w.views.invalidate(hash)
			}
			call := refreshCall{hash: hash, ids: []bittorrent.PeerID{id}, view: view, gen: gen,
				peers: []queuedRefresh{{addr: string(compactAddr(addr)), left: 1000, at: now, windowUp: 100, windowDown: 100}}}
			failed, err := w.write(ctx, []refreshCall{call}, now)
			require.NoError(t, err)
			require.Zero(t, failed)
			view.mu.Lock()
			at, leechers := view.at, view.leechers
			view.mu.Unlock()
			if invalidated {
				require.Zero(t, at, "not installed over the invalidation")
				require.Zero(t, w.drainReads.Load())
			} else {
				require.Equal(t, now, at)
				require.Equal(t, int64(1), leechers)
				require.Equal(t, int64(1), w.drainReads.Load())
			}
		}
	})
}
