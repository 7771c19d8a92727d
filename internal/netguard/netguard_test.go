package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/netguard"
)

func TestCheckRefusesSpecialRanges(t *testing.T) {
	var p netguard.Policy
	for _, a := range []string{
		"127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "169.254.169.254", "fe80::1",
		"10.0.0.1", "172.16.5.4", "172.31.255.255", "192.168.1.1", "fc00::1", "fd12:3456::1",
		"100.64.0.1", "100.127.255.254", "0.0.0.0", "::", "224.0.0.1", "239.1.2.3", "ff02::1",
		"255.255.255.255", "::ffff:169.254.169.254",
	} {
		err := p.Check(netip.MustParseAddr(a))
		require.ErrorIs(t, err, netguard.ErrRefused, a)
		require.Contains(t, err.Error(), "allow_private_targets", a)
	}
	for _, a := range []string{"1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2001:4860:4860::8888", "9.255.255.255"} {
		require.NoError(t, p.Check(netip.MustParseAddr(a)), a)
	}
}

func TestAllowances(t *testing.T) {
	require.NoError(t, netguard.Policy{AllowPrivate: true}.Check(netip.MustParseAddr("127.0.0.1")))
	allow, err := netguard.ParseAllow([]string{"10.1.0.0/16", "192.168.7.7", "::1"})
	require.NoError(t, err)
	p := netguard.Policy{Allow: allow}
	require.NoError(t, p.Check(netip.MustParseAddr("10.1.200.3")))
	require.NoError(t, p.Check(netip.MustParseAddr("192.168.7.7")))
	require.NoError(t, p.Check(netip.MustParseAddr("::1")))
	require.ErrorIs(t, p.Check(netip.MustParseAddr("10.2.0.1")), netguard.ErrRefused)
	require.ErrorIs(t, p.Check(netip.MustParseAddr("192.168.7.8")), netguard.ErrRefused)
	require.ErrorIs(t, p.Check(netip.MustParseAddr("127.0.0.1")), netguard.ErrRefused)
	require.NoError(t, p.CheckHost("localhost"), "::1 is allowed, and localhost may be it")

	for _, bad := range []string{"10.0.0.0/33", "nope", "", "fe80::1%eth0"} {
		_, err := netguard.ParseAllow([]string{"1.2.3.4", bad})
		require.ErrorContains(t, err, "allowed target 1", bad)
	}
}

func TestCheckHost(t *testing.T) {
	var p netguard.Policy
	for _, h := range []string{"127.0.0.1", "[::1]", "::1", "169.254.169.254", "localhost", "LocalHost.", "api.localhost", "10.9.8.7"} {
		require.ErrorIs(t, p.CheckHost(h), netguard.ErrRefused, h)
	}
	// A name is checked when dialled, on what it resolves to then.
	for _, h := range []string{"tracker.example", "1.1.1.1", "[2001:db8::1]"} {
		require.NoError(t, p.CheckHost(h), h)
	}
}

// TestDialerRefusesAtConnectTime: the hook sees the resolved address, so
// a name is refused when it resolves to loopback ("localhost" here, as a
// rebinding name would), and nothing is connected.
func TestDialerRefusesAtConnectTime(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- struct{}{}
			_ = c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p netguard.Policy
	for _, target := range []string{l.Addr().String(), net.JoinHostPort("localhost", strconv.Itoa(port))} {
		_, err := p.Dialer(time.Second).DialContext(ctx, "tcp", target)
		require.Error(t, err, target)
		require.True(t, errors.Is(err, netguard.ErrRefused), "%s: %v", target, err)
	}
	select {
	case <-accepted:
		t.Fatal("a refused dial reached the listener")
	default:
	}
	conn, err := netguard.Policy{AllowPrivate: true}.Dialer(time.Second).DialContext(ctx, "tcp", l.Addr().String())
	require.NoError(t, err)
	_ = conn.Close()
}
