package wire

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hash20 is a 20-byte value full of bytes that need escaping.
var hash20 = [20]byte{0x00, 0x12, 0x34, '%', '&', '=', '+', ' ', 0xff, 0xfe, 'a', 'Z', '~', '.', '-', '_', 0x80, 0x7f, '/', '?'}

const hash20Escaped = "%00%124%25%26%3D%2B%20%FF%FEaZ~.-_%80%7F%2F%3F"

func TestParseAnnounceQueryFull(t *testing.T) {
	raw := "info_hash=" + hash20Escaped +
		"&peer_id=-qB4520-abcdefghijkl&port=6881&uploaded=10&downloaded=20&left=30" +
		"&event=started&compact=0&no_peer_id=1&numwant=80&key=DEADBEEF&passkey=pk_1.x~y-z" +
		"&ip=%3A%3Affff%3A10.0.0.1&supportcrypto=1&corrupt=0"
	var q AnnounceQuery
	require.NoError(t, ParseAnnounceQuery(raw, &q))
	require.Equal(t, AnnounceQuery{
		InfoHash:   hash20,
		PeerID:     [20]byte([]byte("-qB4520-abcdefghijkl")),
		Port:       6881,
		Uploaded:   10,
		Downloaded: 20,
		Left:       30,
		Event:      EventStarted,
		Compact:    false,
		NoPeerID:   true,
		NumWant:    80,
		Key:        "DEADBEEF",
		Passkey:    "pk_1.x~y-z",
		IP:         netip.MustParseAddr("10.0.0.1"),
	}, q)
}

func TestParseAnnounceQueryDefaults(t *testing.T) {
	raw := "info_hash=" + hash20Escaped + "&peer_id=" + hash20Escaped + "&port=1&left=0"
	var q AnnounceQuery
	require.NoError(t, ParseAnnounceQuery(raw, &q))
	require.True(t, q.Compact, "compact is the default")
	require.Equal(t, -1, q.NumWant)
	require.Equal(t, EventNone, q.Event)
	require.Zero(t, q.Uploaded)
	require.Zero(t, q.Downloaded)
	require.False(t, q.IP.IsValid())
	require.Empty(t, q.Passkey)
}

func TestParseAnnounceQueryFirstValueWins(t *testing.T) {
	raw := "info_hash=" + hash20Escaped + "&peer_id=" + hash20Escaped +
		"&port=1&port=2&left=5&left=x&event=stopped&event=bogus&info_hash=short"
	var q AnnounceQuery
	require.NoError(t, ParseAnnounceQuery(raw, &q))
	require.Equal(t, uint16(1), q.Port)
	require.Equal(t, uint64(5), q.Left)
	require.Equal(t, EventStopped, q.Event)
	require.Equal(t, hash20, q.InfoHash)
}

func TestParseAnnounceQueryErrors(t *testing.T) {
	ok := "info_hash=" + hash20Escaped + "&peer_id=" + hash20Escaped + "&port=6881&left=0"
	require.NoError(t, ParseAnnounceQuery(ok, new(AnnounceQuery)))
	replace := func(name, value string) string {
		var parts []string
		for _, p := range strings.Split(ok, "&") {
			if strings.HasPrefix(p, name+"=") {
				if value == "\x00drop" {
					continue
				}
				p = name + "=" + value
			}
			parts = append(parts, p)
		}
		if !strings.Contains(ok, name+"=") {
			parts = append(parts, name+"="+value)
		}
		return strings.Join(parts, "&")
	}
	cases := []struct {
		name string
		raw  string
		want error
	}{
		{"no info_hash", replace("info_hash", "\x00drop"), ErrMissingInfoHash},
		{"short info_hash", replace("info_hash", "abc"), ErrBadInfoHash},
		{"long info_hash", replace("info_hash", hash20Escaped+"x"), ErrBadInfoHash},
		{"info_hash 40 hex chars", replace("info_hash", strings.Repeat("ab", 20)), ErrBadInfoHash},
		{"bad escape", replace("info_hash", "%zz"+hash20Escaped[3:]), ErrMalformedQuery},
		{"cut escape", replace("info_hash", hash20Escaped[:len(hash20Escaped)-2]), ErrMalformedQuery},
		{"no peer_id", replace("peer_id", "\x00drop"), ErrMissingPeerID},
		{"short peer_id", replace("peer_id", "-qB4520-"), ErrBadPeerID},
		{"no port", replace("port", "\x00drop"), ErrMissingPort},
		{"port too big", replace("port", "65536"), ErrBadPort},
		{"negative port", replace("port", "-1"), ErrBadPort},
		{"empty port", replace("port", ""), ErrBadPort},
		{"no left", replace("left", "\x00drop"), ErrMissingLeft},
		{"negative left", replace("left", "-1"), ErrBadLeft},
		{"left overflow", replace("left", "18446744073709551616"), ErrBadLeft},
		{"hex left", replace("left", "0x10"), ErrBadLeft},
		{"bad uploaded", replace("uploaded", "1.5"), ErrBadUploaded},
		{"bad downloaded", replace("downloaded", "ten"), ErrBadDownloaded},
		{"bad numwant", replace("numwant", "lots"), ErrBadNumWant},
		{"bad event", replace("event", "finished"), ErrBadEvent},
		{"long key", replace("key", strings.Repeat("k", MaxKeyLen+1)), ErrBadKey},
		{"passkey with a brace", replace("passkey", "ab%7Bcd"), ErrBadPasskey},
		{"passkey with a slash", replace("passkey", "ab/cd"), ErrBadPasskey},
		{"empty passkey", replace("passkey", ""), ErrBadPasskey},
		{"long passkey", replace("passkey", strings.Repeat("p", MaxPasskeyLen+1)), ErrBadPasskey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, ParseAnnounceQuery(tc.raw, new(AnnounceQuery)), tc.want)
		})
	}
}

func TestParseAnnounceQueryLenientFields(t *testing.T) {
	base := "info_hash=" + hash20Escaped + "&peer_id=" + hash20Escaped + "&port=6881&left=0"
	var q AnnounceQuery
	require.NoError(t, ParseAnnounceQuery(base+"&numwant=-5&ip=not-an-ip&event=paused&event=started", &q))
	require.Equal(t, -1, q.NumWant, "a negative numwant asks for the default")
	require.False(t, q.IP.IsValid(), "an unparsable ip parameter is ignored")
	require.Equal(t, EventNone, q.Event, "BEP 21 paused is a regular announce")

	require.NoError(t, ParseAnnounceQuery(base+"&numwant=99999999999&event=empty", &q))
	require.Equal(t, 1<<31-1, q.NumWant, "a huge numwant is clamped, the listener caps it")

	require.NoError(t, ParseAnnounceQuery(base+"&compact&no_peer_id=0", &q))
	require.True(t, q.Compact)
	require.False(t, q.NoPeerID)
}

func TestAnnounceQueryRoundTrip(t *testing.T) {
	in := AnnounceQuery{
		InfoHash: hash20, PeerID: [20]byte(hash20[:]), Port: 65535,
		Uploaded: 1 << 63, Downloaded: 7, Left: 0, Event: EventCompleted,
		Compact: true, NumWant: 0, Key: "a b&c", Passkey: "secret-pk",
		IP: netip.MustParseAddr("2001:db8::1"),
	}
	raw := AppendAnnounceQuery(nil, &in)
	var out AnnounceQuery
	require.NoError(t, ParseAnnounceQuery(string(raw), &out))
	require.Equal(t, in, out)
}

func TestParseScrapeQuery(t *testing.T) {
	other := [20]byte{1, 2, 3}
	raw := "info_hash=" + hash20Escaped + "&passkey=pk1&info_hash=" + string(AppendQueryEscape(nil, string(other[:]))) +
		"&info_hash=" + hash20Escaped + "&passkey=ignored"
	hashes, pk, err := ParseScrapeQuery(raw, nil, 10)
	require.NoError(t, err)
	require.Equal(t, "pk1", pk)
	require.Equal(t, [][20]byte{hash20, other, hash20}, hashes)

	hashes, _, err = ParseScrapeQuery(raw, hashes[:0], 2)
	require.NoError(t, err)
	require.Equal(t, [][20]byte{hash20, other}, hashes, "only the first limit hashes are kept")

	hashes, pk, err = ParseScrapeQuery("", nil, 10)
	require.NoError(t, err)
	require.Empty(t, hashes)
	require.Empty(t, pk)

	_, _, err = ParseScrapeQuery("info_hash=abc", nil, 10)
	require.ErrorIs(t, err, ErrBadInfoHash)
	_, _, err = ParseScrapeQuery("passkey=%7B", nil, 10)
	require.ErrorIs(t, err, ErrBadPasskey)
}

func TestSortUniqueHashes(t *testing.T) {
	a, b, c := [20]byte{1}, [20]byte{2}, [20]byte{0xff}
	require.Equal(t, [][20]byte{a, b, c}, SortUniqueHashes([][20]byte{c, a, b, a, c}))
}

func TestQueryValue(t *testing.T) {
	v, found, err := QueryValue("a=1&passkey=x%2Dy&passkey=z", "passkey")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "x-y", v)
	_, found, err = QueryValue("a=1", "passkey")
	require.NoError(t, err)
	require.False(t, found)
	_, _, err = QueryValue("passkey=%G1", "passkey")
	require.ErrorIs(t, err, ErrMalformedQuery)
}

func TestParseAnnounceQueryAllocations(t *testing.T) {
	raw := "info_hash=" + hash20Escaped + "&peer_id=-qB4520-abcdefghijkl&port=6881&uploaded=10" +
		"&downloaded=20&left=30&event=started&compact=1&numwant=80&key=DEADBEEF&passkey=abc"
	var q AnnounceQuery
	allocs := testing.AllocsPerRun(100, func() {
		if err := ParseAnnounceQuery(raw, &q); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs)
}

// FuzzParseAnnounceQuery checks the parser never panics, and that whatever
// it accepts survives a trip through the client-side writer unchanged.
func FuzzParseAnnounceQuery(f *testing.F) {
	f.Add("info_hash=" + hash20Escaped + "&peer_id=" + hash20Escaped + "&port=6881&left=0&event=started&numwant=5&key=k&passkey=p")
	f.Add("info_hash=%&peer_id=&port=&left=")
	f.Add("info_hash=aaaaaaaaaaaaaaaaaaaa&peer_id=bbbbbbbbbbbbbbbbbbbb&port=1&left=1&ip=::1&compact=0&no_peer_id=1")
	f.Add("&&=&info_hash==%00")
	f.Fuzz(func(t *testing.T, raw string) {
		var q AnnounceQuery
		if err := ParseAnnounceQuery(raw, &q); err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		again := AppendAnnounceQuery(nil, &q)
		var q2 AnnounceQuery
		require.NoError(t, ParseAnnounceQuery(string(again), &q2), "%q", again)
		require.Equal(t, q, q2)
	})
}

// FuzzParseScrapeQuery checks the scrape parser never panics, keeps at
// most limit hashes (exactly the first info_hash parameters, up to limit),
// returns the first passkey parameter only when it is well-formed, and
// that what it accepts survives a trip through the client-side encoding.
func FuzzParseScrapeQuery(f *testing.F) {
	f.Add("info_hash="+hash20Escaped+"&passkey=pk1&info_hash=aaaaaaaaaaaaaaaaaaaa&passkey=%7B", uint8(10))
	f.Add("info_hash="+hash20Escaped+"&info_hash=short", uint8(1))
	f.Add("passkey=%7B&info_hash=%", uint8(0))
	f.Add("&&=&info_hash==%00&passkey", uint8(3))
	f.Fuzz(func(t *testing.T, raw string, limit uint8) {
		hashes, passkey, err := ParseScrapeQuery(raw, nil, int(limit))
		require.LessOrEqual(t, len(hashes), int(limit))
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		n := 0
		for pair := range strings.SplitSeq(raw, "&") {
			if name, _, _ := strings.Cut(pair, "="); name == "info_hash" {
				n++
			}
		}
		require.Len(t, hashes, min(n, int(limit)))

		first, found, qerr := QueryValue(raw, "passkey")
		require.NoError(t, qerr)
		if found {
			require.True(t, ValidPasskey(passkey), "%q", passkey)
			require.Equal(t, first, passkey)
		} else {
			require.Empty(t, passkey)
		}

		var again []byte
		for _, h := range hashes {
			again = append(again, "info_hash="...)
			again = AppendQueryEscape(again, string(h[:]))
			again = append(again, '&')
		}
		if passkey != "" {
			again = append(again, "passkey="...)
			again = AppendQueryEscape(again, passkey)
		}
		hashes2, passkey2, err := ParseScrapeQuery(string(again), nil, int(limit))
		require.NoError(t, err, "%q", again)
		require.Equal(t, hashes, hashes2)
		require.Equal(t, passkey, passkey2)
	})
}
