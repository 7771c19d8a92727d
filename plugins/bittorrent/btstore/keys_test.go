package btstore

import (
	"crypto/sha1"
	"fmt"
	"strings"
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

func TestUserTorrentKeyRoundTrip(t *testing.T) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("x")))
	for _, user := range []string{"alice", "u-1_2", "7"} {
		h, u, ok := ParseUserTorrentKey(UserTorrentKey(hash, user), validUser)
		require.True(t, ok)
		require.Equal(t, hash, h)
		require.Equal(t, user, u)
	}
	for _, key := range []string{
		"", "hoard:bt:", TorrentKey(hash), UserTorrentKey(hash, ""), UserStatsKey("alice"),
		UserTorrentKey(hash, "bad{user}"), FeedRowsKey(hash), "hoard:{proj}:user:alice",
	} {
		_, _, ok := ParseUserTorrentKey(key, validUser)
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

// The names AnnounceKeys and RefreshKeys lay out in one string are the
// ones the per-name builders spell, in announce.lua's and refresh.lua's
// KEYS order.
func TestCallKeysMatchTheNameBuilders(t *testing.T) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("z")))
	a, b := bittorrent.PeerID([]byte("-AB1234-abcdefghijkl")), bittorrent.PeerID([]byte("-CD5678-\x00\xff\x10mnopqrstu"))
	k := KeysOf(hash)
	p := torrentPrefix(hash)
	open := []string{k.Torrent, k.Seeders, k.Leechers, k.Deadlines, k.Peer(a[:]), p + sufReaper, p + sufReaperClaims, p + sufOwners}
	require.Equal(t, open, AnnounceKeys(hash, a, ""))
	require.Equal(t, append(open, k.User("42"), p+sufSnatchers, p+sufUsers, p+sufDeleted),
		AnnounceKeys(hash, a, "42"))
	fixed := []string{k.Torrent, k.Seeders, k.Leechers, k.Deadlines, p + sufReaper, p + sufReaperClaims}
	require.Equal(t, append(append([]string{}, fixed...), k.Peer(a[:]), k.Peer(b[:])),
		RefreshKeys(hash, []bittorrent.PeerID{a, b}, nil))
	require.Equal(t, append(append([]string{}, fixed...), p+sufUsers, p+sufFeedRows, k.Peer(a[:]), k.User("7"), k.Peer(b[:]), k.User("a-much-longer-user-id")),
		RefreshKeys(hash, []bittorrent.PeerID{a, b}, []string{"7", "a-much-longer-user-id"}))
	require.Equal(t, fixed, RefreshKeys(hash, nil, nil))
	// More names than keyRun holds inline.
	many, users := make([]bittorrent.PeerID, 12), make([]string, 12)
	want := append(append([]string{}, fixed...), p+sufUsers, p+sufFeedRows)
	for i := range many {
		many[i][0], users[i] = byte(i), fmt.Sprint("user-", i)
		want = append(want, k.Peer(many[i][:]), k.User(users[i]))
	}
	require.Equal(t, want, RefreshKeys(hash, many, users))
}

func BenchmarkAnnounceKeys(b *testing.B) {
	hash := bittorrent.InfoHash(sha1.Sum([]byte("z")))
	peer := bittorrent.PeerID([]byte("-AB1234-abcdefghijkl"))
	b.ReportAllocs()
	for b.Loop() {
		if len(AnnounceKeys(hash, peer, "")) != 8 {
			b.Fatal("short")
		}
	}
}

// UserTorrentKey is the record's name as the torrent's keys name it, in
// one allocation (the flush names one per ledger write).
func TestUserTorrentKeyIsKeysOfsUserInOneString(t *testing.T) {
	hash := bittorrent.InfoHash{0xab, 0x01, 0xff}
	for _, user := range []string{"", "alice", strings.Repeat("u", 200)} {
		require.Equal(t, KeysOf(hash).User(user), UserTorrentKey(hash, user))
	}
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = UserTorrentKey(hash, "alice") }))
}
