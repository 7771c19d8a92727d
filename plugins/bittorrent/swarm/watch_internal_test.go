package swarm

import (
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ledgerOf reads both forms of an entry: the previous announce's time
// (s56 on: elapsed is the difference, 0 when unknown or when the clock
// went back) and the elapsed ms itself (entries written before), a
// credited figure left empty as the raw one; anything else is skipped
// rather than misread.
func TestLedgerOfReadsBothEntryForms(t *testing.T) {
	at := time.UnixMilli(1_767_225_600_000).UTC()
	entries := ledgerOf(map[string]string{
		"l0":    "1767225600000,4000,1000,,,,1767225598000", // prev known: 2 s
		"l1":    "1767225599000,500,0,1000,0,,",             // prev unknown, credited up x2
		"l2":    "1767225598000,300,200,,,1500",             // before s56: elapsed itself
		"l3":    "1767225597000,100,100,,,,1767225597500",   // prev after at: no elapsed
		"l4":    "1767225596000,1,1,,,,x",                   // bad prev
		"l5":    "1767225595000,1,1,,,7,1767225594000",      // seven figures, sixth not empty
		"l6":    "1767225594000,1,1,,,",                     // five figures
		"lx":    "1767225593000,1,1,,,,1767225592000",       // not a ledger field
		"peers": "1",
	})
	require.Len(t, entries, 4)
	require.Equal(t, LedgerEntry{At: at, Uploaded: 4000, Downloaded: 1000, UpCredited: 4000, DownCredited: 1000,
		Elapsed: 2 * time.Second, UploadRate: 2000, DownloadRate: 500}, entries[0])
	require.Equal(t, LedgerEntry{At: at.Add(-time.Second), Uploaded: 500, UpCredited: 1000}, entries[1])
	require.Equal(t, LedgerEntry{At: at.Add(-2 * time.Second), Uploaded: 300, Downloaded: 200, UpCredited: 300,
		DownCredited: 200, Elapsed: 1500 * time.Millisecond, UploadRate: 200, DownloadRate: 200 * 1000 / 1500.0}, entries[2])
	require.Equal(t, LedgerEntry{At: at.Add(-3 * time.Second), Uploaded: 100, Downloaded: 100, UpCredited: 100,
		DownCredited: 100}, entries[3])
}

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

// The table is bounded by construction (maxAddressesCached slots): a
// bucket full of other pairs forgets its oldest send, and only it; the
// others stay remembered.
func TestAddressSeenBounded(t *testing.T) {
	var seen addressSeen
	first := addressPairOf("alice", netip.AddrFrom4([4]byte{10, 0, 0, 0}))
	require.False(t, seen.sentLately(first, 0, 1000))
	require.Len(t, seen.slots, maxAddressesCached)
	// addressWays more pairs of first's bucket, each sent later.
	buckets := uint64(maxAddressesCached / addressWays)
	var others []addressPair
	for i := 1; len(others) < addressWays; i++ {
		p := addressPairOf("alice", netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		if p.key()%buckets == first.key()%buckets {
			others = append(others, p)
		}
	}
	for i, p := range others[:addressWays-1] {
		require.False(t, seen.sentLately(p, int64(1+i), 1000))
	}
	require.True(t, seen.sentLately(first, 10, 1000), "still remembered while the bucket has room")
	require.False(t, seen.sentLately(others[addressWays-1], 11, 1000), "a full bucket takes it")
	require.False(t, seen.sentLately(first, 12, 1000), "in the place of the oldest send: first's, sent again")
	for i, p := range others[1:] {
		require.True(t, seen.sentLately(p, 13, 1000), "pair %d stays remembered", i+1)
	}
	require.False(t, seen.sentLately(others[0], 14, 1000), "first's second send took the oldest then: others[0]")
}

// Many goroutines asking at once (run with -race): each pair's first
// answer is a send, and its second, at once after, finds it, but where
// four other pairs of its bucket came in between (a few in 8,000).
func TestAddressSeenConcurrent(t *testing.T) {
	var seen addressSeen
	var wg sync.WaitGroup
	var found atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				p := addressPairOf(strconv.Itoa(g), netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
				require.False(t, seen.sentLately(p, 5, 1000))
				if seen.sentLately(p, 6, 1000) {
					found.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, found.Load(), int64(7_990))
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
