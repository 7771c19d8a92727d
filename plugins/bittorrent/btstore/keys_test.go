package btstore

import (
	"crypto/sha1"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// validUser stands in for the swarm's user-id rule: letters, digits,
// '-' and '_'.
func validUser(id string) bool {
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return id != ""
}

func TestTimeoutKeyRoundTrip(t *testing.T) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("x")))
	var peer bittorrent.PeerID
	copy(peer[:], "-TR3000-{}:\x00\xffabcdefgh")
	for _, user := range []string{"", "alice", "u-1_2"} {
		h, p, u, ok := ParseTimeoutKey(TimeoutKey(hash, peer, user), validUser)
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
		_, _, _, ok := ParseTimeoutKey(key, validUser)
		require.False(t, ok, key)
	}
}

func TestEveryTorrentKeySharesTheHashTag(t *testing.T) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("y")))
	var peer bittorrent.PeerID
	tag := "{" + HexInfoHash(hash) + "}"
	keys := append(AnnounceKeys(hash, peer, "bob"), ExpireKeys(hash, []string{string(peer[:]) + "bob"})...)
	keys = append(keys, AnnounceKeys(hash, peer, "")...)
	keys = append(keys, RefreshKeys(hash, []bittorrent.PeerID{peer, peer}, []string{"bob", ""})...)
	for _, key := range keys {
		require.Contains(t, key, tag)
		got, ok := HashFromKey(key)
		require.True(t, ok)
		require.Equal(t, hash, got)
	}
}
