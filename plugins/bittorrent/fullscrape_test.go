package bittorrent

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"
)

// countingSource lists n torrents and counts its walks; while gate is
// set, each walk waits for it.
type countingSource struct {
	n     int
	walks atomic.Int64
	gate  chan struct{}
}

func (s *countingSource) FullScrape(ctx context.Context, each func(InfoHash, ScrapeEntry) error) error {
	s.walks.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	for i := range s.n {
		var h InfoHash
		h[0], h[1] = byte(i>>8), byte(i)
		if err := each(h, ScrapeEntry{Complete: int64(i), Incomplete: 1, Downloaded: 2}); err != nil {
			return err
		}
	}
	return nil
}

func TestFullScrapeBuildsOncePerEveryAndSharesTheBuild(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	src := &countingSource{n: 1000, gate: make(chan struct{})}
	f := newFullScrape(FullScrapeConfig{Source: src, Every: time.Minute, Now: clock})

	// Eight requests while the first build runs: one walk serves them all.
	var wg sync.WaitGroup
	bodies := make([][]byte, 8)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := f.get(context.Background())
			require.NoError(t, err)
			bodies[i] = body
		}()
	}
	require.Eventually(t, func() bool { return src.walks.Load() == 1 }, 5*time.Second, time.Millisecond)
	close(src.gate)
	wg.Wait()
	require.Equal(t, int64(1), src.walks.Load())
	for _, b := range bodies[1:] {
		require.Equal(t, bodies[0], b)
	}
	zr, err := gzip.NewReader(bytes.NewReader(bodies[0]))
	require.NoError(t, err)
	plain, err := io.ReadAll(zr)
	require.NoError(t, err)
	var decoded struct {
		Files map[string]struct {
			Complete   int64 `bencode:"complete"`
			Incomplete int64 `bencode:"incomplete"`
			Downloaded int64 `bencode:"downloaded"`
		} `bencode:"files"`
	}
	require.NoError(t, bencode.Unmarshal(plain, &decoded))
	require.Len(t, decoded.Files, 1000)
	require.Less(t, len(bodies[0]), len(plain), "gzipped")

	advance(59 * time.Second)
	_, err = f.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(1), src.walks.Load(), "still fresh")
	advance(time.Second)
	_, err = f.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(2), src.walks.Load(), "built again after Every")
}

func TestFullScrapePerAddressIsBounded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := newFullScrape(FullScrapeConfig{Source: &countingSource{}, PerAddress: time.Minute, MaxAddresses: 2, Now: func() time.Time { return now }})
	a, b, c := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("192.0.2.3")
	require.True(t, f.allow(a))
	require.False(t, f.allow(a))
	require.True(t, f.allow(b))
	require.False(t, f.allow(netip.MustParseAddr("2001:db8::2")), "one IPv6 /64 is one address")
	require.False(t, f.allow(c), "two addresses remembered, both recent: a third waits")
	require.Len(t, f.last, 2)
	now = now.Add(time.Minute)
	require.True(t, f.allow(c), "old entries make room")
	require.LessOrEqual(t, len(f.last), 2)
	require.True(t, f.allow(a))
}
