package swarm

import (
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// addressSeen answers per (user, counted address): sent lately only
// within the quarter window after a send, never for a clock gone back,
// and not after a failed send was forgotten.
func TestAddressSeenSentLately(t *testing.T) {
	var seen addressSeen
	const within = 1000
	v4 := netip.MustParseAddr("192.0.2.9")
	pair := addressPairOf("alice", v4)
	require.False(t, seen.sentLately(pair, 5000, within), "never sent")
	require.True(t, seen.sentLately(pair, 5999, within))
	require.False(t, seen.sentLately(pair, 4999, within), "a clock gone back sends again")
	require.True(t, seen.sentLately(pair, 5000, within), "and the send it made counts")
	require.False(t, seen.sentLately(pair, 6000, within), "a quarter window later")

	require.Equal(t, pair, addressPairOf("alice", netip.MustParseAddr("::ffff:192.0.2.9")), "a mapped IPv4 address is the address")
	require.Equal(t, addressPairOf("alice", netip.MustParseAddr("2001:db8::1")),
		addressPairOf("alice", netip.MustParseAddr("2001:db8::ffff:1")), "one IPv6 /64")
	require.False(t, seen.sentLately(addressPairOf("alice", netip.MustParseAddr("2001:db8:0:1::1")), 6000, within),
		"another /64 is another address")
	require.False(t, seen.sentLately(addressPairOf("bob", v4), 6000, within), "another user's pair is its own")

	seen.forget(pair)
	require.False(t, seen.sentLately(pair, 6001, within), "a forgotten send is sent again")
}

// A pair is its user and its counted address: IPv4 and IPv6 never meet
// (an IPv6 /64 whose 64 bits are an IPv4 address's, mapped, included),
// and the pairs of one user's addresses and of one address's users are
// each their own.
func TestAddressPairs(t *testing.T) {
	pairs := map[uint64]string{}
	for _, user := range []string{"alice", "bob", ""} {
		for _, addr := range []string{"192.0.2.9", "192.0.2.10", "0.0.0.0", "::", "0:0:0:1::",
			"0:ffff:c000:209::", "0:0:ffff:c000:209::", "2001:db8::", "2001:db8:0:1::", "ff02::1"} {
			p := addressPairOf(user, netip.MustParseAddr(addr)).key()
			require.NotContains(t, pairs, p, "%s %s", user, addr)
			pairs[p] = user + " " + addr
		}
	}
}

// A shard full of pairs is forgotten at once, so the whole stays within
// maxAddressesCached.
func TestAddressSeenBounded(t *testing.T) {
	var seen addressSeen
	first := addressPairOf("alice", netip.AddrFrom4([4]byte{10, 0, 0, 0}))
	require.False(t, seen.sentLately(first, 0, 1000))
	sh := seen.shard(first)
	for i := 1; len(sh.sent) < maxAddressesCached/addressShards; i++ {
		seen.sentLately(addressPairOf("alice", netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})), 0, 1000)
	}
	require.True(t, seen.sentLately(first, 1, 1000), "still remembered while the shard is at its bound")
	require.False(t, seen.sentLately(addressPairOf("alice", netip.AddrFrom4([4]byte{11, 0, 0, 0})), 1, 1000))
	total := 0
	for i := range seen.shards {
		total += len(seen.shards[i].sent)
	}
	require.LessOrEqual(t, total, maxAddressesCached)
	require.Len(t, sh.sent, 1, "the full shard started afresh")
	require.False(t, seen.sentLately(first, 2, 1000), "a forgotten pair is sent again")
}

// BenchmarkAddressSeen is the per-announce check with accounting on, all
// pairs remembered: 5,000 users on one address (hoard-bench's
// announce-private), from every P at once.
func BenchmarkAddressSeen(b *testing.B) {
	users := make([]string, 5000)
	for i := range users {
		users[i] = strconv.Itoa(i * 7919)
	}
	addr := netip.MustParseAddr("127.0.0.1")
	var seen addressSeen
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 1237
		for pb.Next() {
			i++
			seen.sentLately(addressPairOf(users[i%len(users)], addr), 1000, 1<<40)
		}
	})
}
