package leaderboard_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/leaderboard"
)

// TestViewerCapKeepsRoomForTheRest: the total cap leaves a quarter of the
// descriptor limit, and at least half of it up to 1,024, to the rest of
// the process, and never goes negative.
func TestViewerCapKeepsRoomForTheRest(t *testing.T) {
	for _, c := range []struct {
		nofile uint64
		want   int
	}{
		{0, 0}, {64, 0}, {128, 0}, {200, 72}, {256, 128}, {1024, 512}, {2048, 1024},
		{4096, 3072}, {20000, 15000}, {1 << 20, 786432}, {^uint64(0), 1<<31 - 1},
	} {
		require.Equal(t, c.want, leaderboard.ViewerCap(c.nofile), "nofile %d", c.nofile)
	}
	// More descriptors never mean fewer viewers.
	for nofile := uint64(1); nofile < 10000; nofile++ {
		require.GreaterOrEqual(t, leaderboard.ViewerCap(nofile), leaderboard.ViewerCap(nofile-1), "nofile %d", nofile)
	}
}

// TestExplicitMaxViewersIsLoweredToTheLimit: 0 derives the cap, a value
// that fits is kept, one above the derived cap is lowered and reported.
func TestExplicitMaxViewersIsLoweredToTheLimit(t *testing.T) {
	total, lowered := leaderboard.MaxViewersFor(0, 256)
	require.Equal(t, 128, total)
	require.False(t, lowered)
	total, lowered = leaderboard.MaxViewersFor(100, 256)
	require.Equal(t, 100, total)
	require.False(t, lowered)
	total, lowered = leaderboard.MaxViewersFor(20000, 20000)
	require.Equal(t, 15000, total)
	require.True(t, lowered)
}

func TestAddressKeyGroupsIPv6By64(t *testing.T) {
	for client, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"2001:db8:1:2:aaaa::1": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::9": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
		"fe80::1%eth0":         "fe80::/64",
		"not an address":       "not an address",
		"":                     "",
	} {
		require.Equal(t, want, leaderboard.AddressKey(client), client)
	}
}

// dialAs opens a viewer claiming client's address; it returns the
// handshake status.
func dialAs(t *testing.T, url, client string) (*websocket.Conn, int) {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"X-Test-Client": {client}})
	if err != nil {
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { conn.Close() })
	return conn, resp.StatusCode
}

// TestOneAddressCannotTakeEveryViewerSlot: the 51st viewer from one
// address is refused with 429 before the upgrade (an IPv6 /64 counts as
// one address), another address is still admitted, and a slot given back
// is free again.
func TestOneAddressCannotTakeEveryViewerSlot(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub, url := frontend(t, b, &fakeSource{}, leaderboard.Config{MaxViewers: 1000})
		var first *websocket.Conn
		for i := range leaderboard.DefaultMaxViewersPerAddress {
			conn, status := dialAs(t, url, "192.0.2.7")
			require.Equal(t, http.StatusSwitchingProtocols, status, "viewer %d", i+1)
			if i == 0 {
				first = conn
			}
		}
		_, status := dialAs(t, url, "192.0.2.7")
		require.Equal(t, http.StatusTooManyRequests, status, "the 51st from one address")
		_, status = dialAs(t, url, "::ffff:192.0.2.7")
		require.Equal(t, http.StatusTooManyRequests, status, "the same address, IPv4-mapped")
		conn, status := dialAs(t, url, "192.0.2.8")
		require.Equal(t, http.StatusSwitchingProtocols, status, "another address")
		require.Equal(t, "snapshot", read(t, conn, 5*time.Second).Type)
		require.Equal(t, leaderboard.DefaultMaxViewersPerAddress+1, hub.Viewers())

		// Closing one gives its slot back.
		require.NoError(t, first.Close())
		require.Eventually(t, func() bool { return hub.Viewers() == leaderboard.DefaultMaxViewersPerAddress }, 5*time.Second, 10*time.Millisecond)
		_, status = dialAs(t, url, "192.0.2.7")
		require.Equal(t, http.StatusSwitchingProtocols, status, "a freed slot")

		// Addresses of one IPv6 /64 share a cap; the next /64 has its own.
		hub, url = frontend(t, b, &fakeSource{}, leaderboard.Config{MaxViewersPerAddress: 2})
		for _, client := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::2"} {
			_, status = dialAs(t, url, client)
			require.Equal(t, http.StatusSwitchingProtocols, status, client)
		}
		_, status = dialAs(t, url, "2001:db8:1:2::3")
		require.Equal(t, http.StatusTooManyRequests, status, "a third from the same /64")
		_, status = dialAs(t, url, "2001:db8:1:3::1")
		require.Equal(t, http.StatusSwitchingProtocols, status, "the next /64")
		require.Equal(t, 3, hub.Viewers())
	})
}

// TestTotalCapHoldsAcrossAddresses: with every slot taken, a new address
// is refused with 503, not 429.
func TestTotalCapHoldsAcrossAddresses(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub, url := frontend(t, b, &fakeSource{}, leaderboard.Config{MaxViewers: 3, MaxViewersPerAddress: 2})
		for _, client := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.2"} {
			_, status := dialAs(t, url, client)
			require.Equal(t, http.StatusSwitchingProtocols, status, client)
		}
		_, status := dialAs(t, url, "192.0.2.3")
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Equal(t, 3, hub.Viewers())
	})
}

func TestFormatCountGroupsThousands(t *testing.T) {
	for in, want := range map[any]string{
		int64(0): "0", int64(999): "999", int64(1000): "1,000", int64(1234567): "1,234,567",
		int64(-4200): "-4,200", 3456.0: "3,456", 12.6: "13", 7: "7", "x": "x",
	} {
		require.Equal(t, want, leaderboard.FormatCount(in), "%v", in)
	}
}
