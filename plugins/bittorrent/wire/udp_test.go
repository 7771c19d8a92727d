package wire

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testAnnounceRequest() UDPRequest {
	return UDPRequest{
		ConnectionID: 0x0102030405060708, Action: ActionAnnounce, TransactionID: 0xdeadbeef,
		InfoHash: hash20, PeerID: [20]byte([]byte("-TR3000-123456789012")),
		Downloaded: 1, Left: 2, Uploaded: 3, Event: EventStopped,
		IPv4: [4]byte{1, 2, 3, 4}, Key: 99, NumWant: -1, Port: 51413,
	}
}

func TestUDPConnectRoundTrip(t *testing.T) {
	packet := AppendUDPRequest(nil, &UDPRequest{Action: ActionConnect, TransactionID: 7})
	require.Len(t, packet, 16)
	require.Equal(t, ProtocolID, binary.BigEndian.Uint64(packet))
	var r UDPRequest
	require.NoError(t, ParseUDPRequest(packet, &r))
	require.Equal(t, ActionConnect, r.Action)
	require.Equal(t, uint32(7), r.TransactionID)

	var resp UDPResponse
	require.NoError(t, ParseUDPResponse(AppendUDPConnect(nil, 7, 0xabc), &resp))
	require.Equal(t, UDPResponse{Action: ActionConnect, TransactionID: 7, ConnectionID: 0xabc, Scrape: resp.Scrape}, resp)
}

func TestUDPAnnounceRoundTrip(t *testing.T) {
	in := testAnnounceRequest()
	packet := AppendUDPRequest(nil, &in)
	require.Len(t, packet, UDPAnnounceLen)
	var out UDPRequest
	require.NoError(t, ParseUDPRequest(packet, &out))
	require.Nil(t, out.URLData)
	out.InfoHashes = nil
	require.Equal(t, in, out)
}

func TestUDPAnnounceURLData(t *testing.T) {
	in := testAnnounceRequest()
	in.URLData = []byte("/pk/announce")
	packet := AppendUDPRequest(nil, &in)
	require.Len(t, packet, UDPAnnounceLen+2+len("/pk/announce"))
	var out UDPRequest
	require.NoError(t, ParseUDPRequest(packet, &out))
	require.Equal(t, "/pk/announce", string(out.URLData))

	// Long URL data is split over several options and joined back; NOPs
	// and unknown options in between are skipped, end-of-options stops.
	long := "/announce?passkey=" + strings.Repeat("p", 100) + "&x=" + strings.Repeat("y", 300)
	in.URLData = []byte(long)
	packet = AppendUDPRequest(nil, &in)
	packet = append(packet[:UDPAnnounceLen+2+255], append([]byte{optNOP, 0x7f, 2, 'z', 'z'}, packet[UDPAnnounceLen+2+255:]...)...)
	packet = append(packet, optEndOfOptions, optURLData, 3, 'b', 'a', 'd')
	require.NoError(t, ParseUDPRequest(packet, &out))
	require.Equal(t, long, string(out.URLData))

	// The reused request must not keep the previous URL data.
	require.NoError(t, ParseUDPRequest(AppendUDPRequest(nil, &UDPRequest{Action: ActionAnnounce}), &out))
	require.Nil(t, out.URLData)

	// aria2 pads with two end-of-options bytes.
	in.URLData = nil
	require.NoError(t, ParseUDPRequest(append(AppendUDPRequest(nil, &in), 0, 0), &out))
	require.Nil(t, out.URLData)
}

func TestUDPScrapeRoundTrip(t *testing.T) {
	in := UDPRequest{ConnectionID: 5, Action: ActionScrape, TransactionID: 9, InfoHashes: [][20]byte{{1}, {2}, {1}}}
	var out UDPRequest
	require.NoError(t, ParseUDPRequest(AppendUDPRequest(nil, &in), &out))
	require.Equal(t, in.InfoHashes, out.InfoHashes, "order and duplicates are kept")

	var resp UDPResponse
	require.NoError(t, ParseUDPResponse(AppendUDPScrape(nil, 9, []ScrapeCounts{{1, 2, 3}, {4, 5, 6}}), &resp))
	require.Equal(t, ActionScrape, resp.Action)
	require.Equal(t, []ScrapeCounts{{1, 2, 3}, {4, 5, 6}}, resp.Scrape)
}

func TestUDPParseErrors(t *testing.T) {
	announce := testAnnounceRequest()
	good := AppendUDPRequest(nil, &announce)
	withEvent := func(e uint32) []byte {
		p := append([]byte(nil), good...)
		binary.BigEndian.PutUint32(p[80:], e)
		return p
	}
	header := func(action Action) []byte {
		return AppendUDPRequest(nil, &UDPRequest{ConnectionID: 1, Action: action, TransactionID: 3})
	}
	badConnect := header(ActionConnect)
	binary.BigEndian.PutUint64(badConnect, 1)
	cases := []struct {
		name   string
		packet []byte
		want   error
	}{
		{"empty", nil, ErrUDPTooShort},
		{"15 bytes", good[:15], ErrUDPTooShort},
		{"connect without magic", badConnect, ErrUDPBadProtocolID},
		{"announce cut", good[:97], ErrUDPTruncated},
		{"announce header only", good[:16], ErrUDPTruncated},
		{"bad event", withEvent(4), ErrUDPBadEvent},
		{"option without length", append(append([]byte(nil), good...), optURLData), ErrUDPBadOption},
		{"option cut", append(append([]byte(nil), good...), optURLData, 10, 'a'), ErrUDPBadOption},
		{"unknown action", header(ActionError), ErrUDPBadAction},
		{"action 4", header(4), ErrUDPBadAction},
		{"scrape without hashes", header(ActionScrape), ErrUDPNoInfoHash},
		{"scrape misaligned", append(header(ActionScrape), make([]byte, 21)...), ErrUDPScrapeMisaligned},
		{"scrape too many", append(header(ActionScrape), make([]byte, 20*(MaxUDPScrapeHashes+1))...), ErrUDPTooManyHashes},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r UDPRequest
			require.ErrorIs(t, ParseUDPRequest(tc.packet, &r), tc.want)
			if tc.want != ErrUDPTooShort {
				require.Equal(t, binary.BigEndian.Uint32(tc.packet[12:16]), r.TransactionID, "the error can be answered")
			}
		})
	}

	var long []byte
	for range 5 {
		long = append(long, optURLData, 255)
		long = append(long, make([]byte, 255)...)
	}
	var r UDPRequest
	require.ErrorIs(t, ParseUDPRequest(append(append([]byte(nil), good...), long...), &r), ErrUDPURLDataTooLong)
}

func TestAppendUDPAnnounce(t *testing.T) {
	var resp UDPResponse
	b := AppendUDPAnnounce(nil, 1, &testReply, testPeers, false)
	require.NoError(t, ParseUDPResponse(b, &resp))
	require.Equal(t, int32(1800), resp.Interval)
	require.Equal(t, int32(7), resp.Leechers)
	require.Equal(t, int32(5), resp.Seeders)
	peers, err := ParseCompactPeers(nil, resp.Peers, false)
	require.NoError(t, err)
	require.Equal(t, []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:6881"), netip.MustParseAddrPort("192.168.1.3:1"),
	}, peers, "an IPv4 socket gets only IPv4 peers")

	b = AppendUDPAnnounce(nil, 1, &testReply, testPeers, true)
	require.NoError(t, ParseUDPResponse(b, &resp))
	peers, err = ParseCompactPeers(nil, resp.Peers, true)
	require.NoError(t, err)
	require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::2]:51413")}, peers)

	many := make(Peers, 300)
	for i := range many {
		many[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 1)
	}
	b = AppendUDPAnnounce(nil, 1, &testReply, many, false)
	require.Len(t, b, 20+6*MaxUDPPeers4, "capped to one Ethernet frame")

	huge := AnnounceReply{Interval: 1 << 40, Complete: -3}
	require.NoError(t, ParseUDPResponse(AppendUDPAnnounce(nil, 1, &huge, Peers{}, false), &resp))
	require.Equal(t, int32(1<<31-1), resp.Interval)
	require.Equal(t, int32(0), resp.Seeders)
}

func TestAppendUDPError(t *testing.T) {
	var resp UDPResponse
	require.NoError(t, ParseUDPResponse(AppendUDPError(nil, 42, "unregistered torrent"), &resp))
	require.Equal(t, ActionError, resp.Action)
	require.Equal(t, uint32(42), resp.TransactionID)
	require.Equal(t, "unregistered torrent", resp.Message)
}

func TestParseUDPRequestAllocations(t *testing.T) {
	in := testAnnounceRequest()
	in.URLData = []byte("/0123456789abcdef0123456789abcdef/announce")
	packet := AppendUDPRequest(nil, &in)
	var r UDPRequest
	allocs := testing.AllocsPerRun(100, func() {
		if err := ParseUDPRequest(packet, &r); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs)
}

// FuzzParseUDPPacket checks the parser never panics on garbage, that
// everything it accepts re-encodes to a packet that parses the same, and
// that it never accepts a request it could not answer.
func FuzzParseUDPPacket(f *testing.F) {
	announce := testAnnounceRequest()
	f.Add(AppendUDPRequest(nil, &announce))
	announce.URLData = []byte("/pk/announce?passkey=pk")
	f.Add(AppendUDPRequest(nil, &announce))
	f.Add(AppendUDPRequest(nil, &UDPRequest{Action: ActionConnect}))
	f.Add(AppendUDPRequest(nil, &UDPRequest{Action: ActionScrape, InfoHashes: [][20]byte{{1}, {2}}}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 1, 2})
	f.Fuzz(func(t *testing.T, packet []byte) {
		var r UDPRequest
		err := ParseUDPRequest(packet, &r)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.GreaterOrEqual(t, len(packet), UDPHeaderLen)
		again := AppendUDPRequest(nil, &r)
		var r2 UDPRequest
		require.NoError(t, ParseUDPRequest(again, &r2))
		if len(r.URLData) == 0 {
			r.URLData, r2.URLData = nil, nil
		}
		require.Equal(t, string(r.URLData), string(r2.URLData))
		r.URLData, r2.URLData = nil, nil
		r.urlBuf, r2.urlBuf = nil, nil
		r.urlInBuf, r2.urlInBuf = false, false
		if len(r.InfoHashes) == 0 {
			r.InfoHashes, r2.InfoHashes = nil, nil
		}
		require.Equal(t, r, r2)

		var resp UDPResponse
		_ = ParseUDPResponse(packet, &resp) // the client side must not panic either
	})
}
