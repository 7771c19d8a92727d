package ipmetrics_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

// TestRecorderRegistersLocatedIPs: announces observed from many
// goroutines are located and registered off the caller's path; Stop
// registers what is still queued.
func TestRecorderRegistersLocatedIPs(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		rec := ipmetrics.NewRecorder(ipmetrics.RecorderConfig{Store: f.store, Locator: openTestGeo(t), Logger: quiet, Batch: 7})
		require.NoError(t, rec.Start(t.Context()))
		h1, h2 := infoHash("one"), infoHash("two")
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					rec.Observe(addr("81.2.69.1"), h1)
					rec.Observe(addr("81.2.69.2"), h1)
					rec.Observe(addr("2001:db8:1::1"), h2)
					rec.Observe(addr("8.8.8.8"), h2) // no record: unknown
					rec.Observe(addr("::ffff:81.2.69.1"), h2)
				}
			})
		}
		wg.Wait()
		require.NoError(t, rec.Stop())
		require.NoError(t, rec.Stop(), "Stop twice is safe")

		all := f.counters(nil, "")
		require.Equal(t, int64(4), all["users"])
		require.Equal(t, int64(2), all["countries.GB.users"])
		require.Equal(t, int64(1), all["countries.DE.cities.Berlin.users"])
		require.Equal(t, int64(1), all["countries.unknown.users"])
		require.Equal(t, int64(1), all["countries.unknown.cities.unknown.users"])
		on1, on2 := f.counters(&h1, "2026-01"), f.counters(&h2, "")
		require.Equal(t, int64(2), on1["users"])
		require.Equal(t, int64(3), on2["users"])
		require.Equal(t, int64(1), on2["countries.GB.postcodes.SW1A.users"])

		s := rec.Stats()
		require.Equal(t, uint64(8*50*5), s.Observed)
		require.Zero(t, s.Dropped)
		require.Zero(t, s.Failed)
		require.Equal(t, uint64(5), s.Registered, "one registration per distinct pair: the cache skipped the rest")
		require.Equal(t, s.Observed-5, s.Skipped)
		require.Equal(t, uint64(4*4+5*4), s.Counted)
	})
}

// TestRecorderNeverBlocks: with the batcher not running, Observe past the
// queue's bound drops and counts instead of waiting.
func TestRecorderNeverBlocks(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		rec := ipmetrics.NewRecorder(ipmetrics.RecorderConfig{Store: f.store, Logger: quiet, Queue: 10})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range 100 {
				rec.Observe(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), bittorrent.InfoHash{})
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Observe blocked on a full queue")
		}
		s := rec.Stats()
		require.Equal(t, uint64(10), s.Observed)
		require.Equal(t, uint64(90), s.Dropped)
		require.Equal(t, 10, s.Queued)
		require.NoError(t, rec.Stop(), "Stop without Start")
	})
}

// TestRecorderCacheExpires: a pair the cache skipped registers again once
// the cache's ttl passed (and counts only when its marker expired too).
func TestRecorderCacheExpires(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		rec := ipmetrics.NewRecorder(ipmetrics.RecorderConfig{Store: f.store, Logger: quiet, CacheTTL: time.Hour})
		require.NoError(t, rec.Start(t.Context()))
		h := infoHash("ttl")
		ip := addr("10.9.9.9")
		step := func() ipmetrics.RecorderStats {
			rec.Observe(ip, h)
			require.Eventually(t, func() bool { s := rec.Stats(); return s.Queued == 0 && s.Registered+s.Skipped == s.Observed },
				10*time.Second, time.Millisecond)
			return rec.Stats()
		}
		require.Equal(t, uint64(1), step().Registered)
		require.Equal(t, uint64(1), step().Skipped)
		f.clock.Advance(time.Hour)
		s := step()
		require.Equal(t, uint64(2), s.Registered, "the cache's entry is stale: registered again")
		require.Equal(t, uint64(8), s.Counted, "but the markers are live: nothing counted twice")
		f.clock.Advance(30 * 24 * time.Hour)
		require.Equal(t, uint64(16), step().Counted, "a new window counts again")
		require.NoError(t, rec.Stop())
	})
}

// TestRecorderCacheOff: with no cache every observation runs the
// scripts, which still count each IP once.
func TestRecorderCacheOff(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		rec := ipmetrics.NewRecorder(ipmetrics.RecorderConfig{Store: f.store, Logger: quiet, CacheSize: -1})
		require.NoError(t, rec.Start(t.Context()))
		for range 20 {
			rec.Observe(addr("10.0.0.1"), infoHash("x"))
		}
		require.NoError(t, rec.Stop())
		s := rec.Stats()
		require.Zero(t, s.Skipped)
		require.Equal(t, uint64(20), s.Registered)
		require.Equal(t, uint64(8), s.Counted)
		require.Equal(t, int64(1), f.counters(nil, "")["users"])
	})
}

// TestRecorderRedisDown: registrations that fail are counted, logged and
// forgotten by the cache, so the IP's next announce tries again.
func TestRecorderRedisDown(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer down.Close()
	rec := ipmetrics.NewRecorder(ipmetrics.RecorderConfig{Store: ipmetrics.NewStore(down, nil, 0), Logger: quiet})
	require.NoError(t, rec.Start(t.Context()))
	for want := uint64(1); want <= 2; want++ {
		rec.Observe(addr("10.4.0.1"), infoHash("down"))
		require.Eventually(t, func() bool { return rec.Stats().Failed == want }, 10*time.Second, time.Millisecond)
	}
	require.NoError(t, rec.Stop())
	s := rec.Stats()
	require.Zero(t, s.Skipped, "a failed pair is not remembered as registered")
	require.Zero(t, s.Registered)
}
