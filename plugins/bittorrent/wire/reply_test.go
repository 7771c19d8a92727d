package wire

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"
)

func TestParseHTTPAnnounceResponse(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		name string
		body string
		want HTTPAnnounceResponse
		max  int
		err  error
	}{
		{name: "compact", body: "d8:completei3e10:incompletei2e8:intervali1800e5:peers12:\x0a\x00\x00\x01\x1a\xe1\x7f\x00\x00\x02\x00\x50e",
			want: HTTPAnnounceResponse{Interval: 1800, Complete: 3, Incomplete: 2, Peers: []netip.AddrPort{ap("10.0.0.1:6881"), ap("127.0.0.2:80")}}},
		{name: "compact with peers6 and unknown keys", body: "d5:extrald1:xi1eee5:peers0:6:peers618:\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01e",
			want: HTTPAnnounceResponse{Peers: []netip.AddrPort{ap("[2001:db8::1]:1")}}},
		{name: "dictionaries, a host name skipped", body: "d5:peersld2:ip8:10.0.0.17:peer id20:aaaaaaaaaaaaaaaaaaaa4:porti6881eed2:ip11:example.org4:porti1eed2:ip3:::14:porti2eeee",
			want: HTTPAnnounceResponse{Peers: []netip.AddrPort{ap("10.0.0.1:6881"), ap("[::1]:2")}, Skipped: 1}},
		{name: "a port out of range is skipped", body: "d5:peersld2:ip8:10.0.0.14:porti70000eeee",
			want: HTTPAnnounceResponse{Skipped: 1}},
		{name: "cap", max: 1, body: "d5:peers12:\x0a\x00\x00\x01\x1a\xe1\x7f\x00\x00\x02\x00\x50e",
			want: HTTPAnnounceResponse{Peers: []netip.AddrPort{ap("10.0.0.1:6881")}, Over: 1}},
		{name: "failure", body: "d14:failure reason25:Requested download is note",
			want: HTTPAnnounceResponse{FailureReason: "Requested download is not"}},
		{name: "trailing newline", body: "d8:intervali5ee\n", want: HTTPAnnounceResponse{Interval: 5}},
		{name: "not a dictionary", body: "<html>", err: ErrReplyNotDict},
		{name: "empty", body: "", err: ErrReplyNotDict},
		{name: "truncated string", body: "d5:peers99:abce", err: ErrReplyTruncated},
		{name: "truncated dict", body: "d8:intervali5e", err: ErrReplyTruncated},
		{name: "bad int", body: "d8:intervali5xe", err: ErrReplyTruncated},
		{name: "misaligned compact", body: "d5:peers5:abcdee", err: ErrReplyBadPeers},
		{name: "trailing data", body: "d8:intervali5eexyz", err: ErrReplyTrailingData},
		{name: "too deep", body: "d1:x" + strings.Repeat("l", 100) + strings.Repeat("e", 100) + "e", err: ErrReplyTooDeep},
		{name: "negative length", body: "d-1:xe", err: ErrReplyTruncated},
	} {
		var got HTTPAnnounceResponse
		err := ParseHTTPAnnounceResponse([]byte(c.body), &got, c.max)
		if c.err != nil {
			require.ErrorIs(t, err, c.err, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, got, c.name)
	}
}

// FuzzParseHTTPAnnounceResponse: an external tracker's reply is untrusted.
// The parser never panics, keeps at most maxPeers, only valid addresses,
// never more than the body could encode; and where anacrolix's decoder
// reads the same body as a dictionary with compact IPv4 peers, both agree
// on them.
func FuzzParseHTTPAnnounceResponse(f *testing.F) {
	f.Add([]byte("d8:completei3e10:incompletei2e8:intervali1800e5:peers12:\x0a\x00\x00\x01\x1a\xe1\x7f\x00\x00\x02\x00\x50e"), uint8(0))
	f.Add([]byte("d5:peersld2:ip8:10.0.0.17:peer id20:aaaaaaaaaaaaaaaaaaaa4:porti6881eed2:ip11:example.org4:porti1eeee"), uint8(1))
	f.Add([]byte("d14:failure reason4:nopee"), uint8(0))
	f.Add([]byte("d6:peers618:\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01e"), uint8(0))
	f.Fuzz(func(t *testing.T, body []byte, maxPeers uint8) {
		var r HTTPAnnounceResponse
		err := ParseHTTPAnnounceResponse(body, &r, int(maxPeers))
		if err != nil {
			return
		}
		if maxPeers > 0 {
			require.LessOrEqual(t, len(r.Peers), int(maxPeers))
		}
		require.LessOrEqual(t, len(r.Peers), len(body)/6)
		for _, p := range r.Peers {
			require.True(t, p.Addr().IsValid())
		}
		var d map[string]any
		if bencode.Unmarshal(body, &d) != nil {
			return
		}
		compact, ok := d["peers"].(string)
		if _, v6 := d["peers6"]; !ok || v6 || maxPeers != 0 {
			return
		}
		var want []netip.AddrPort
		want, err = ParseCompactPeers(want, []byte(compact), false)
		require.NoError(t, err)
		require.Equal(t, len(want), len(r.Peers))
		for i := range want {
			require.Equal(t, want[i], r.Peers[i])
		}
	})
}
