package swarm

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompactAddr(t *testing.T) {
	for _, in := range []string{"1.2.3.4:6881", "[2001:db8::5]:65535", "[::ffff:10.1.2.3]:1"} {
		ap := netip.MustParseAddrPort(in)
		out, ok := parseCompactAddr(string(compactAddr(ap)))
		require.True(t, ok)
		require.Equal(t, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), out)
	}
	require.Len(t, compactAddr(netip.MustParseAddrPort("1.2.3.4:1")), 6)
	_, ok := parseCompactAddr("12345")
	require.False(t, ok)
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "A-z_0", "0123456789012345678901234567890123456789012345678901234567890123"} {
		require.True(t, validName(ok), ok)
	}
	for _, bad := range []string{"", "a:b", "{a}", "a b", "é", "01234567890123456789012345678901234567890123456789012345678901234"} {
		require.False(t, validName(bad), bad)
	}
}
