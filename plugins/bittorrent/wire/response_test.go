package wire

import (
	"net/netip"
	"testing"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"
)

var testPeers = Peers{
	{ID: [20]byte{'a'}, Addr: netip.MustParseAddrPort("10.0.0.1:6881")},
	{ID: [20]byte{'b'}, Addr: netip.MustParseAddrPort("[2001:db8::2]:51413")},
	{ID: [20]byte{'c'}, Addr: netip.MustParseAddrPort("[::ffff:192.168.1.3]:1")},
	{ID: [20]byte{'d'}, Addr: netip.AddrPort{}}, // skipped: no address
}

var testReply = AnnounceReply{Interval: 1800, MinInterval: 900, Complete: 5, Incomplete: 7, Downloaded: 11}

func decodeDict(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var out map[string]any
	// The decoder also rejects unsorted dictionary keys.
	require.NoError(t, bencode.Unmarshal(b, &out), "%q", b)
	return out
}

func TestAppendHTTPAnnounceCompact(t *testing.T) {
	b := AppendHTTPAnnounce(nil, &testReply, testPeers, true, false)
	got := decodeDict(t, b)
	require.Equal(t, map[string]any{
		"complete":     int64(5),
		"incomplete":   int64(7),
		"downloaded":   int64(11),
		"interval":     int64(1800),
		"min interval": int64(900),
		"peers":        "\x0a\x00\x00\x01\x1a\xe1" + "\xc0\xa8\x01\x03\x00\x01",
		"peers6":       "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xc8\xd5",
	}, got)
}

func TestAppendHTTPAnnounceCompactNoV6(t *testing.T) {
	got := decodeDict(t, AppendHTTPAnnounce(nil, &testReply, Peers{}, true, false))
	require.Equal(t, "", got["peers"], "peers is present even when empty")
	require.NotContains(t, got, "peers6")
}

func TestAppendHTTPAnnounceDictPeers(t *testing.T) {
	got := decodeDict(t, AppendHTTPAnnounce(nil, &testReply, testPeers, false, false))
	require.Equal(t, []any{
		map[string]any{"ip": "10.0.0.1", "peer id": "a" + string(make([]byte, 19)), "port": int64(6881)},
		map[string]any{"ip": "2001:db8::2", "peer id": "b" + string(make([]byte, 19)), "port": int64(51413)},
		map[string]any{"ip": "192.168.1.3", "peer id": "c" + string(make([]byte, 19)), "port": int64(1)},
	}, got["peers"])
	require.NotContains(t, got, "peers6")

	got = decodeDict(t, AppendHTTPAnnounce(nil, &testReply, testPeers, false, true))
	require.Equal(t, map[string]any{"ip": "10.0.0.1", "port": int64(6881)}, got["peers"].([]any)[0])
}

func TestAppendHTTPScrape(t *testing.T) {
	hashes := SortUniqueHashes([][20]byte{{2}, {1}, {2}})
	b := AppendHTTPScrape(nil, hashes, []ScrapeCounts{{1, 2, 3}, {4, 5, 6}})
	got := decodeDict(t, b)
	require.Equal(t, map[string]any{"files": map[string]any{
		string(hashes[0][:]): map[string]any{"complete": int64(1), "incomplete": int64(2), "downloaded": int64(3)},
		string(hashes[1][:]): map[string]any{"complete": int64(4), "incomplete": int64(5), "downloaded": int64(6)},
	}}, got)

	require.Equal(t, "d5:filesdee", string(AppendHTTPScrape(nil, nil, nil)))
}

func TestAppendHTTPAnnounceAllocations(t *testing.T) {
	peers := make(Peers, 50)
	for i := range peers {
		peers[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 6881)
	}
	buf := make([]byte, 0, 4096)
	for _, compact := range []bool{true, false} {
		allocs := testing.AllocsPerRun(100, func() {
			buf = AppendHTTPAnnounce(buf[:0], &testReply, peers, compact, false)
		})
		require.Zero(t, allocs, "compact=%v", compact)
	}
}

func BenchmarkAppendHTTPAnnounce(b *testing.B) {
	peers := make(Peers, 50)
	for i := range peers {
		peers[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 6881)
	}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendHTTPAnnounce(buf[:0], &testReply, peers, true, false)
	}
}

func BenchmarkParseAnnounceQuery(b *testing.B) {
	raw := "info_hash=" + hash20Escaped + "&peer_id=-qB4520-abcdefghijkl&port=6881&uploaded=10" +
		"&downloaded=20&left=30&event=started&compact=1&numwant=80&key=DEADBEEF"
	var q AnnounceQuery
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseAnnounceQuery(raw, &q); err != nil {
			b.Fatal(err)
		}
	}
}
