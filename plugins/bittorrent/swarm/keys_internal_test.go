package swarm

import (
	"crypto/sha1"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

func TestTimeoutKeyRoundTrip(t *testing.T) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("x")))
	var peer bittorrent.PeerID
	copy(peer[:], "-TR3000-{}:\x00\xffabcdefgh")
	for _, user := range []string{"", "alice", "u-1_2"} {
		h, p, u, ok := parseTimeoutKey(TimeoutKey(hash, peer, user))
		require.True(t, ok)
		require.Equal(t, hash, h)
		require.Equal(t, peer, p)
		require.Equal(t, user, u)
	}
	for _, key := range []string{
		"", "hoard:bt:", TorrentKey(hash), PeerKey(hash, peer),
		TimeoutKey(hash, peer, "alice") + ":extra",
		TimeoutKey(hash, peer, "") + "0",
		"hoard:{proj}:timeout:0123",
	} {
		_, _, _, ok := parseTimeoutKey(key)
		require.False(t, ok, key)
	}
}

func TestEveryTorrentKeySharesTheHashTag(t *testing.T) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("y")))
	var peer bittorrent.PeerID
	tag := "{" + hexHash(hash) + "}"
	keys := append(announceKeys(hash, peer, "bob"), expireKeys(hash, []string{string(peer[:]) + "bob"})...)
	for _, key := range keys {
		require.Contains(t, key, tag)
		got, ok := hashFromKey(key)
		require.True(t, ok)
		require.Equal(t, hash, got)
	}
}

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
