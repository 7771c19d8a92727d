package bittorrent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"

	"github.com/hoardproject/hoard/internal/clock"
)

var guardEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestGuard(t *testing.T, cfg GuardConfig) (*Guard, *clock.Fake) {
	t.Helper()
	c := clock.NewFake(guardEpoch)
	cfg.Now = c.Now
	g, err := NewGuard(cfg)
	require.NoError(t, err)
	return g, c
}

func TestGuardAnnounceRate(t *testing.T) {
	g, c := newTestGuard(t, GuardConfig{AnnounceRate: 2, AnnounceBurst: 3})
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for range 3 {
		require.True(t, g.allowAnnounce(a))
	}
	require.False(t, g.allowAnnounce(a), "the burst is spent")
	require.True(t, g.allowAnnounce(b), "another address has its own bucket")

	c.Advance(500 * time.Millisecond) // 2/s: one token back
	require.True(t, g.allowAnnounce(a))
	require.False(t, g.allowAnnounce(a))

	c.Advance(time.Hour) // refills to the burst, no further
	for range 3 {
		require.True(t, g.allowAnnounce(a))
	}
	require.False(t, g.allowAnnounce(a))

	// An IPv6 /64 is one address; the next /64 is another. A mapped IPv4
	// address is its IPv4 address.
	v6 := netip.MustParseAddr("2001:db8:1:2::1")
	for i := range 3 {
		require.True(t, g.allowAnnounce(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, byte(i + 7)})))
	}
	require.False(t, g.allowAnnounce(v6), "another host of the same /64")
	require.True(t, g.allowAnnounce(netip.MustParseAddr("2001:db8:1:3::1")))
	require.False(t, g.allowAnnounce(netip.MustParseAddr("::ffff:192.0.2.1")))

	off, _ := newTestGuard(t, GuardConfig{AnnounceRate: -1, AnnounceBurst: 1})
	for range 100 {
		require.True(t, off.allowAnnounce(a), "a negative rate turns the limit off")
	}
}

func TestGuardPasskeyMisses(t *testing.T) {
	g, c := newTestGuard(t, GuardConfig{PasskeyMisses: 3, PasskeyMissWindow: 10 * time.Minute})
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")

	// The same unknown passkey again and again (a revoked one still in a
	// client) counts once.
	for range 50 {
		g.passkeyMiss(a, "revoked")
	}
	require.False(t, g.passkeyBlocked(a))
	g.passkeyMiss(a, "guess1")
	require.False(t, g.passkeyBlocked(a))
	g.passkeyMiss(a, "guess2")
	require.True(t, g.passkeyBlocked(a), "three different misses in the window")
	require.False(t, g.passkeyBlocked(b))

	c.Advance(9 * time.Minute)
	require.True(t, g.passkeyBlocked(a))
	c.Advance(time.Minute)
	require.False(t, g.passkeyBlocked(a), "the window is over")
	g.passkeyMiss(a, "guess3")
	require.False(t, g.passkeyBlocked(a), "a new window starts with one miss")

	off, _ := newTestGuard(t, GuardConfig{PasskeyMisses: -1})
	for i := range 100 {
		off.passkeyMiss(a, fmt.Sprint(i))
	}
	require.False(t, off.passkeyBlocked(a))
}

func TestGuardMemoryBounded(t *testing.T) {
	g, _ := newTestGuard(t, GuardConfig{MaxAddresses: 4096, AnnounceBurst: 1})
	for i := range 200_000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		g.allowAnnounce(ip)
		g.passkeyMiss(ip, "x")
	}
	require.LessOrEqual(t, g.tracked(), 4096)
	// An address in use is not forgotten by a flood of others: it is
	// moved to the current generation each time it is seen.
	g2, _ := newTestGuard(t, GuardConfig{MaxAddresses: 4096, AnnounceRate: 0.001, AnnounceBurst: 1})
	hot := netip.MustParseAddr("192.0.2.1")
	require.True(t, g2.allowAnnounce(hot))
	for i := range 200_000 {
		g2.allowAnnounce(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		if i%16 == 0 {
			require.False(t, g2.allowAnnounce(hot), "the hot address keeps its empty bucket")
		}
	}
}

func TestGuardConfig(t *testing.T) {
	g, err := NewGuard(GuardConfig{})
	require.NoError(t, err)
	cfg := g.Config()
	require.Equal(t, float64(DefaultAnnounceRate), cfg.AnnounceRate)
	require.Equal(t, DefaultAnnounceBurst, cfg.AnnounceBurst)
	require.Equal(t, DefaultPasskeyMisses, cfg.PasskeyMisses)
	require.Equal(t, DefaultPasskeyMissWindow, cfg.PasskeyMissWindow)
	for _, bad := range []GuardConfig{{AnnounceBurst: -1}, {PasskeyMissWindow: -time.Second}, {MaxAddresses: -1}} {
		_, err := NewGuard(bad)
		require.Error(t, err)
	}
}

// clientFrom is an HTTP client whose connections come from a loopback
// address other than 127.0.0.1, a second client address on one machine.
func clientFrom(t *testing.T, local string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func failureFrom(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, bencode.Unmarshal(raw, &body), "%q", raw)
	reason, ok := body["failure reason"].(string)
	if !ok {
		require.Contains(t, body, "interval", "neither a failure nor an announce reply: %v", body)
	}
	return reason
}

func TestHTTPGuard(t *testing.T) {
	fake := newFakeSwarms()
	fake.passkeys = map[string]bool{"good": true}
	g, _ := newTestGuard(t, GuardConfig{AnnounceRate: 1, AnnounceBurst: 5, PasskeyMisses: 2})
	srv, base := startHTTP(t, fake, func(c *HTTPConfig) { c.Guard = g; c.RequirePasskey = true })
	flooder, honest := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")
	url := func(pk string) string { return base + "/" + pk + "/announce?" + announceQuery(nil) }

	// Two different unknown passkeys, then the address is refused unread.
	require.Equal(t, "unknown passkey", failureFrom(t, flooder, url("guess1")))
	require.Equal(t, "unknown passkey", failureFrom(t, flooder, url("guess2")))
	before := fake.announceCount()
	require.Equal(t, errPasskeyMisses.Reason, failureFrom(t, flooder, url("guess3")))
	require.Equal(t, errPasskeyMisses.Reason, failureFrom(t, flooder, url("good")))
	require.Equal(t, before, fake.announceCount(), "refused without asking the store")
	scrape := base + "/guess4/scrape?info_hash=" + string(wire.AppendQueryEscape(nil, string(testHash[:])))
	require.Equal(t, errPasskeyMisses.Reason, failureFrom(t, flooder, scrape))

	// The burst of 5 is spent (4 above plus this one); the next is refused.
	require.Equal(t, errPasskeyMisses.Reason, failureFrom(t, flooder, url("guess5")))
	require.Equal(t, errRateLimited.Reason, failureFrom(t, flooder, url("good")))

	// Another address is served meanwhile.
	require.Empty(t, failureFrom(t, honest, url("good")))

	stats := srv.Stats()
	require.Equal(t, uint64(1), stats.RateLimited)
	require.Equal(t, uint64(4), stats.PasskeyBlocked)
	require.Equal(t, uint64(2), stats.PasskeyMisses)
	require.Equal(t, uint64(1), stats.Announces)
}

func TestUDPGuard(t *testing.T) {
	fake := newFakeSwarms()
	fake.passkeys = map[string]bool{"good": true}
	g, _ := newTestGuard(t, GuardConfig{AnnounceRate: 1, AnnounceBurst: 4, PasskeyMisses: 2})
	srv := startUDP(t, fake, func(c *UDPConfig) { c.Guard = g; c.RequirePasskey = true })
	flooder := dialUDPClient(t, "udp4", "127.0.0.1:0", srv.Addr4())
	honest := dialUDPClient(t, "udp4", "127.0.0.2:0", srv.Addr4())
	flooder.connect()
	honest.connect()
	announce := func(c *udpClient, pk string) wire.UDPResponse {
		return c.do(udpAnnounce("/"+pk+"/announce", nil))
	}
	require.Equal(t, "unknown passkey", announce(flooder, "guess1").Message)
	require.Equal(t, "unknown passkey", announce(flooder, "guess2").Message)
	before := fake.announceCount()
	resp := announce(flooder, "good")
	require.Equal(t, wire.ActionError, resp.Action)
	require.Equal(t, errPasskeyMisses.Reason, resp.Message)
	require.Equal(t, before, fake.announceCount())
	require.Equal(t, errPasskeyMisses.Reason, announce(flooder, "good").Message)
	require.Equal(t, errRateLimited.Reason, announce(flooder, "good").Message, "the burst of 4 is spent")

	resp = announce(honest, "good")
	require.Equal(t, wire.ActionAnnounce, resp.Action, resp.Message)

	stats := srv.Stats()
	require.Equal(t, uint64(1), stats.RateLimited)
	require.Equal(t, uint64(2), stats.PasskeyBlocked)
	require.Equal(t, uint64(2), stats.PasskeyMisses)
	require.Equal(t, uint64(1), stats.Announces)
}
