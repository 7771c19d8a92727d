package ipmetrics_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

var london = ipmetrics.Location{Country: "GB", City: "London", Postcode: "SW1A"}

// TestRegisterCountsEachMetricOncePerWindow: the first registration
// counts the IP in all four metrics, globally and on the torrent, in the
// totals and in the month; a repeat within the window counts nothing.
func TestRegisterCountsEachMetricOncePerWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("a")
		require.Equal(t, 8, f.register(addr("81.2.69.1"), h, london))
		f.clock.Advance(10 * 24 * time.Hour)
		require.Equal(t, 0, f.register(addr("81.2.69.1"), h, london))
		want := map[string]int64{
			"users":                             1,
			"countries.GB.users":                1,
			"countries.GB.cities.London.users":  1,
			"countries.GB.postcodes.SW1A.users": 1,
		}
		require.Equal(t, want, f.counters(nil, ""))
		require.Equal(t, want, f.counters(nil, "2026-01"))
		require.Equal(t, want, f.counters(&h, ""))
		require.Equal(t, want, f.counters(&h, "2026-01"))
		require.Empty(t, f.counters(nil, "2026-02"))

		// The same IP on another torrent: new on that torrent only.
		other := infoHash("b")
		require.Equal(t, 4, f.register(addr("81.2.69.1"), other, london))
		require.Equal(t, int64(1), f.counters(nil, "")["users"])
		require.Equal(t, int64(1), f.counters(&other, "")["users"])
	})
}

// TestConcurrentRegistrationsOfOneIPCountOnce is btstat's bug: GET then
// SETEX from many goroutines counted one IP many times. 64 goroutines
// register the same IP on the same torrent at once, each through its own
// Store (as separate frontends would).
func TestConcurrentRegistrationsOfOneIPCountOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("hot")
		const goroutines = 64
		var wg sync.WaitGroup
		added := make([]int, goroutines)
		start := make(chan struct{})
		for i := range goroutines {
			wg.Go(func() {
				store := ipmetrics.NewStore(b.Client, f.clock, 0)
				<-start
				for range 5 {
					n, err := store.Register(t.Context(), []ipmetrics.Registration{
						{IP: addr("2001:db8:1::7"), Hash: h, Loc: london, Global: true, Torrent: true}})
					require.NoError(t, err)
					added[i] += n
				}
			})
		}
		close(start)
		wg.Wait()
		sum := 0
		for _, n := range added {
			sum += n
		}
		require.Equal(t, 8, sum, "every metric counted the IP exactly once across all goroutines")
		require.Equal(t, int64(1), f.counters(nil, "")["users"])
		require.Equal(t, int64(1), f.counters(&h, "")["countries.GB.cities.London.users"])
	})
}

// TestWindowAndMonthRollover: the rolling 30-day window against calendar
// months. Seen on Jan 20 and again Feb 5 (16 days later): counted in
// January only. Seen again Feb 19 12:00, exactly 30 days after: the marker
// has expired, so it counts in February (and the all-time total is 2).
func TestWindowAndMonthRollover(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("roll")
		ip := addr("89.160.20.5")
		require.Equal(t, 8, f.register(ip, h, london))
		f.clock.Advance(16 * 24 * time.Hour) // Feb 5
		require.Equal(t, 0, f.register(ip, h, london))
		require.Empty(t, f.counters(nil, "2026-02"), "within the window: not counted in February")
		f.clock.Advance(14*24*time.Hour - time.Second) // one second before 30 days
		require.Equal(t, 0, f.register(ip, h, london))
		f.clock.Advance(time.Second) // Feb 19 12:00:00, exactly 30 days
		require.Equal(t, 8, f.register(ip, h, london))
		require.Equal(t, int64(1), f.counters(nil, "2026-01")["users"])
		require.Equal(t, int64(1), f.counters(nil, "2026-02")["users"])
		require.Equal(t, int64(2), f.counters(nil, "")["users"], "all time counts registrations, one per window")
		require.Equal(t, int64(1), f.counters(&h, "2026-02")["countries.GB.postcodes.SW1A.users"])

		months, err := f.store.UsersByMonth(t.Context(), nil, ipmetrics.LastMonths(f.clock.Now(), 3))
		require.NoError(t, err)
		require.Equal(t, []ipmetrics.MonthCount{{Month: "2025-12"}, {Month: "2026-01", Users: 1}, {Month: "2026-02", Users: 1}}, months)
	})
}

// TestIPv6AndMappedIPv4: an IPv6 address is its own IP; an IPv4-mapped
// IPv6 address is the same IP as its IPv4 form.
func TestIPv6AndMappedIPv4(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("six")
		require.Equal(t, 8, f.register(addr("2001:db8:1::1"), h, london))
		require.Equal(t, 8, f.register(addr("2001:db8:1::2"), h, london))
		require.Equal(t, 8, f.register(addr("192.0.2.1"), h, london))
		require.Equal(t, 0, f.register(addr("::ffff:192.0.2.1"), h, london))
		require.Equal(t, int64(3), f.counters(nil, "")["users"])
		require.Equal(t, int64(3), f.counters(&h, "")["countries.GB.users"])
	})
}

// TestALocationChangeCountsTheNewPlace: when the database moves an IP to
// another city within the window, the new city counts it (it never had
// it), users and the country do not.
func TestALocationChangeCountsTheNewPlace(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("move")
		ip := addr("81.2.69.9")
		f.register(ip, h, london)
		require.Equal(t, 4, f.register(ip, h, ipmetrics.Location{Country: "GB", City: "Leeds", Postcode: "LS1"}))
		c := f.counters(nil, "")
		require.Equal(t, int64(1), c["users"])
		require.Equal(t, int64(1), c["countries.GB.users"])
		require.Equal(t, int64(1), c["countries.GB.cities.Leeds.users"])
		require.Equal(t, int64(1), c["countries.GB.cities.London.users"])
	})
}

// TestGlobalMetricsSpreadOverShards: many IPs land in every shard, and the
// global count is the sum.
func TestGlobalMetricsSpreadOverShards(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		var regs []ipmetrics.Registration
		for i := range 400 {
			regs = append(regs, ipmetrics.Registration{IP: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}),
				Hash: infoHash("s"), Loc: london, Global: true})
		}
		n, err := f.store.Register(t.Context(), regs)
		require.NoError(t, err)
		require.Equal(t, 400*4, n)
		used := 0
		for shard := range btstore.IPMShards {
			v, err := b.Client.HGet(t.Context(), btstore.IPMGlobalTotalKey(shard), "users").Int64()
			require.NoError(t, err, "shard %d has users", shard)
			require.Positive(t, v)
			used++
		}
		require.Equal(t, btstore.IPMShards, used)
		require.Equal(t, int64(400), f.counters(nil, "")["users"])
	})
}

// TestReportRanksPlaces reads a report with cities holding dots.
func TestReportRanksPlaces(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("r")
		stl := ipmetrics.Location{Country: "US", City: "St. Louis", Postcode: "63101"}
		for i := range 3 {
			f.register(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), h, stl)
		}
		f.register(addr("10.0.1.1"), h, london)
		r, err := f.store.Report(t.Context(), nil, "", 1)
		require.NoError(t, err)
		require.Equal(t, int64(4), r.Users)
		require.Equal(t, []ipmetrics.PlaceCount{{Country: "US", Users: 3}}, r.Countries)
		require.Equal(t, []ipmetrics.PlaceCount{{Country: "US", Name: "St. Louis", Users: 3}}, r.Cities)
		tr, err := f.store.Report(t.Context(), &h, "2026-01", 0)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%x", h[:]), tr.Torrent)
		require.Len(t, tr.Countries, 2)
		require.Len(t, tr.Postcodes, 2)

		_, err = f.store.Report(t.Context(), nil, "January", 0)
		require.ErrorContains(t, err, "YYYY-MM")
	})
}

// TestRegisterAfterScriptFlush: a node that lost its functions (restarted,
// FUNCTION FLUSH) answers "Function not found" inside the pipeline; the
// script is loaded and those registrations run again, once.
func TestRegisterAfterScriptFlush(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b)
		h := infoHash("flush")
		require.Equal(t, 8, f.register(addr("10.3.0.1"), h, london))
		flush := func(ctx context.Context, node *redis.Client) error {
			return errors.Join(node.ScriptFlush(ctx).Err(), node.FunctionFlush(ctx).Err())
		}
		if cluster, ok := b.Client.(*redis.ClusterClient); ok {
			require.NoError(t, cluster.ForEachMaster(t.Context(), flush))
		} else {
			require.NoError(t, flush(t.Context(), b.Client.(*redis.Client)))
		}
		var regs []ipmetrics.Registration
		for i := range 50 {
			regs = append(regs, ipmetrics.Registration{IP: netip.AddrFrom4([4]byte{10, 3, 1, byte(i)}), Hash: h, Loc: london,
				Global: true, Torrent: true})
		}
		n, err := f.store.Register(t.Context(), regs)
		require.NoError(t, err)
		require.Equal(t, 50*8, n)
		require.Equal(t, int64(51), f.counters(nil, "")["users"])
		require.Equal(t, int64(51), f.counters(&h, "")["users"])
	})
}
