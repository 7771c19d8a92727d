package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPortsAreBelowTheEphemeralRangeAndFree: every port handed out is below
// the kernel's ephemeral range (so no outgoing connection can take it before
// the child binds), never twice, and binds on the addresses children use.
func TestPortsAreBelowTheEphemeralRangeAndFree(t *testing.T) {
	low, high, err := EphemeralRange()
	require.NoError(t, err)
	require.Less(t, low, high)
	seen := map[int]bool{}
	for range 100 {
		port, err := Get(TCP | UDP)
		require.NoError(t, err)
		require.Less(t, port, low, "port %d is in the ephemeral range %d-%d", port, low, high)
		require.GreaterOrEqual(t, port, unprivFirst)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
		p := strconv.Itoa(port)
		for _, addr := range []string{"0.0.0.0:" + p, "127.0.0.1:" + p} {
			l, err := net.Listen("tcp4", addr)
			require.NoError(t, err)
			require.NoError(t, l.Close())
			c, err := net.ListenPacket("udp4", addr)
			require.NoError(t, err)
			require.NoError(t, c.Close())
		}
	}
}

// TestBindableRefusesAPortHeldOnOneAddress: a port some process holds only
// on 127.0.0.1 is still refused, since children bind the wildcard.
func TestBindableRefusesAPortHeldOnOneAddress(t *testing.T) {
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer tcp.Close()
	port := tcp.Addr().(*net.TCPAddr).Port
	require.Error(t, bindable(port, TCP))

	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer udp.Close()
	port = udp.LocalAddr().(*net.UDPAddr).Port
	require.NoError(t, bindable(port, TCP), "only UDP is held")
	require.Error(t, bindable(port, UDP))
	require.Error(t, bindable(port, TCP|UDP))
}

func TestBadProtocolsAreRefused(t *testing.T) {
	for _, protocols := range []int{0, 4, TCP | 8} {
		_, err := Get(protocols)
		require.ErrorContains(t, err, "protocols must be")
	}
}
