package opentracker_test

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/opentracker"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

func TestStartAnnounceStop(t *testing.T) {
	tracked, untracked := [20]byte{1, 2, 3}, [20]byte{9, 9, 9}
	p, err := opentracker.Start(context.Background(), "", filepath.Join(t.TempDir(), "a", "b"), [][20]byte{tracked})
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	_, err = net.DialTimeout("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(p.Port)), time.Second)
	require.Error(t, err, "it listens on 127.0.0.1 only")

	require.NoError(t, p.Announce(tracked, netip.MustParseAddrPort("127.0.0.9:6881"), wire.EventStarted))
	require.ErrorContains(t, p.Announce(untracked, netip.MustParseAddrPort("127.0.0.9:6881"), wire.EventStarted),
		"does not track", "its whitelist holds only the hashes given")
	require.ErrorContains(t, p.Announce(tracked, netip.MustParseAddrPort("192.0.2.1:6881"), wire.EventStarted),
		"only loopback", "nothing is sent from another address")

	p.Stop()
	p.Stop() // safe twice
	err = p.Announce(tracked, netip.MustParseAddrPort("127.0.0.9:6881"), wire.EventStarted)
	require.Error(t, err, "stopped: no reply")
}

func TestStartWithoutTheBinarySaysWhatToInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := opentracker.Start(ctx, filepath.Join(t.TempDir(), "missing"), t.TempDir(), nil)
	require.ErrorContains(t, err, "apt-get install -y opentracker")
}
