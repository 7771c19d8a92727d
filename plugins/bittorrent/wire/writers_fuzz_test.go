package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"net/netip"
	"testing"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"
)

// The fuzzers here drive the real response writers with generated replies
// and read the output back with an independent decoder: anacrolix's
// bencode decoder for HTTP (it rejects unsorted or repeated dictionary
// keys, non-canonical integers and trailing bytes) and ParseUDPResponse,
// checked against byte offsets computed here, for UDP.

// fill copies the next len(dst) bytes into dst, zero-padded.
func (s *fuzzSource) fill(dst []byte) {
	clear(dst)
	copy(dst, s.bytes(len(dst)))
}

func (s *fuzzSource) uint16() uint16 {
	var b [2]byte
	s.fill(b[:])
	return binary.BigEndian.Uint16(b[:])
}

// genReply draws an announce reply; every int64 is possible.
func genReply(s *fuzzSource) AnnounceReply {
	return AnnounceReply{Interval: s.int64(), MinInterval: s.int64(), Complete: s.int64(),
		Incomplete: s.int64(), Downloaded: s.int64()}
}

// genPeers draws up to 63 peers of every kind the writers meet: IPv4,
// IPv4-mapped IPv6, IPv6 (with and without a zone), and the zero AddrPort
// the writers skip.
func genPeers(s *fuzzSource) Peers {
	peers := make(Peers, s.byte()%64)
	for i := range peers {
		s.fill(peers[i].ID[:])
		var a16 [16]byte
		var a4 [4]byte
		var addr netip.Addr
		switch s.byte() % 5 {
		case 0: // zero AddrPort
			continue
		case 1:
			s.fill(a4[:])
			addr = netip.AddrFrom4(a4)
		case 2:
			s.fill(a4[:])
			addr = netip.AddrFrom16(netip.AddrFrom4(a4).As16())
		case 3:
			s.fill(a16[:])
			addr = netip.AddrFrom16(a16)
		default:
			s.fill(a16[:])
			addr = netip.AddrFrom16(a16).WithZone("eth0")
		}
		peers[i].Addr = netip.AddrPortFrom(addr, s.uint16())
	}
	return peers
}

// wantPeer is how a peer must come out: its address without the IPv4
// mapping or zone, and whether it is written at all.
func wantPeer(ap netip.AddrPort) (addr netip.Addr, ok bool) {
	if !ap.Addr().IsValid() {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

// wantCompact is the compact form of the peers of one family, built with
// encoding/binary rather than the writer's own helper.
func wantCompact(peers Peers, v6 bool, limit int) []byte {
	out := []byte{}
	n := 0
	for _, p := range peers {
		addr, ok := wantPeer(p.Addr)
		if !ok || addr.Is6() != v6 || n == limit {
			continue
		}
		out = append(out, addr.AsSlice()...)
		out = binary.BigEndian.AppendUint16(out, p.Addr.Port())
		n++
	}
	return out
}

func decodeAny(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, bencode.Unmarshal(b, &out), "%q", b)
	return out
}

// FuzzHTTPAnnounceWriter checks AppendHTTPAnnounce: the decoded dictionary
// carries exactly the reply's numbers and the peers, compact (peers and
// peers6) or as dictionaries, each family in order and invalid addresses
// left out. It writes after a prefix, which must be left alone.
func FuzzHTTPAnnounceWriter(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x07\x08\x00\x00\x00\x00\x00\x00\x03\x84" + "\x00\x00\x00\x00\x00\x00\x00\x05" +
		"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x0b\x01\x04" +
		"aaaaaaaaaaaaaaaaaaaa\x01\x0a\x00\x00\x01\x1a\xe1" + "bbbbbbbbbbbbbbbbbbbb\x03 \x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xc8\xd5" +
		"cccccccccccccccccccc\x02\xc0\xa8\x01\x03\x00\x01" + "dddddddddddddddddddd\x00"))
	f.Add([]byte("\x80\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00" +
		"\x7f\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x02\x03" +
		"eeeeeeeeeeeeeeeeeeee\x04\xfe\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x50"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &fuzzSource{b: data}
		reply := genReply(s)
		flags := s.byte()
		compact, noPeerID := flags&1 != 0, flags&2 != 0
		peers := genPeers(s)

		const prefix = "HTTP body follows:"
		out := AppendHTTPAnnounce([]byte(prefix), &reply, peers, compact, noPeerID)
		require.Equal(t, prefix, string(out[:len(prefix)]))
		got := decodeAny(t, out[len(prefix):])

		want := map[string]any{
			"complete":     reply.Complete,
			"incomplete":   reply.Incomplete,
			"downloaded":   reply.Downloaded,
			"interval":     reply.Interval,
			"min interval": reply.MinInterval,
		}
		if compact {
			want["peers"] = string(wantCompact(peers, false, math.MaxInt))
			if v6 := wantCompact(peers, true, math.MaxInt); len(v6) > 0 {
				want["peers6"] = string(v6)
			}
			require.Equal(t, want, got)
			return
		}
		list, ok := got["peers"].([]any)
		require.True(t, ok, "peers is a list: %#v", got["peers"])
		delete(got, "peers")
		require.Equal(t, want, got)
		i := 0
		for _, p := range peers {
			addr, ok := wantPeer(p.Addr)
			if !ok {
				continue
			}
			require.Less(t, i, len(list), "too few peers")
			d, ok := list[i].(map[string]any)
			require.True(t, ok, "%#v", list[i])
			i++
			ip, ok := d["ip"].(string)
			require.True(t, ok, "%#v", d)
			parsed, err := netip.ParseAddr(ip)
			require.NoError(t, err)
			require.Equal(t, addr, parsed)
			require.Equal(t, int64(p.Addr.Port()), d["port"])
			if noPeerID {
				require.Len(t, d, 2, "%#v", d)
			} else {
				require.Len(t, d, 3, "%#v", d)
				require.Equal(t, string(p.ID[:]), d["peer id"])
			}
		}
		require.Len(t, list, i, "too many peers")
	})
}

// FuzzHTTPScrapeWriter checks SortUniqueHashes and AppendHTTPScrape:
// duplicates collapse to one strictly sorted key each, and every file's
// counts decode to what was written for it.
func FuzzHTTPScrapeWriter(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x03\x00" + "aaaaaaaaaaaaaaaaaaaa" + "\x01" + "\x00" + "bbbbbbbbbbbbbbbbbbbb"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &fuzzSource{b: data}
		var hashes [][20]byte
		set := map[[20]byte]bool{}
		for range s.byte() % 80 {
			var h [20]byte
			if n := len(hashes); n > 0 && s.byte()%4 == 0 {
				h = hashes[int(s.byte())%n] // a repeat
			} else {
				s.fill(h[:])
			}
			hashes = append(hashes, h)
			set[h] = true
		}
		hashes = SortUniqueHashes(hashes)
		require.Len(t, hashes, len(set))
		for i := range hashes {
			require.True(t, set[hashes[i]])
			if i > 0 {
				require.Negative(t, bytes.Compare(hashes[i-1][:], hashes[i][:]), "sorted and unique")
			}
		}
		counts := make([]ScrapeCounts, len(hashes))
		for i := range counts {
			counts[i] = ScrapeCounts{Complete: s.int64(), Incomplete: s.int64(), Downloaded: s.int64()}
		}

		got := decodeAny(t, AppendHTTPScrape(nil, hashes, counts))
		require.Len(t, got, 1)
		files, ok := got["files"].(map[string]any)
		require.True(t, ok, "%#v", got)
		require.Len(t, files, len(hashes))
		for i, h := range hashes {
			require.Equal(t, map[string]any{
				"complete":   counts[i].Complete,
				"incomplete": counts[i].Incomplete,
				"downloaded": counts[i].Downloaded,
			}, files[string(h[:])])
		}
	})
}

// FuzzFailureWriter checks AppendFailure carries any reason, bytes and
// all, as the only key, after a prefix it leaves alone.
func FuzzFailureWriter(f *testing.F) {
	f.Add("unregistered torrent")
	f.Add("")
	f.Add("d14:failure reason3:abce\x00\xff")
	f.Fuzz(func(t *testing.T, reason string) {
		out := AppendFailure([]byte("x"), reason)
		require.Equal(t, byte('x'), out[0])
		require.Equal(t, map[string]any{"failure reason": reason}, decodeAny(t, out[1:]))
	})
}

// clamp32 is the protocol's view of a count: BEP 15 carries int32s, and a
// negative count makes no sense.
func clamp32(n int64) int32 {
	switch {
	case n < 0:
		return 0
	case n > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(n)
}

// FuzzUDPAnnounceWriter checks AppendUDPAnnounce: the header, the clamped
// counts in BEP 15's order (interval, leechers, seeders), and only the
// socket family's peers, in order, at most one frame's worth.
func FuzzUDPAnnounceWriter(f *testing.F) {
	f.Add([]byte{}, uint32(0), false)
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x07\x08\x00\x00\x00\x00\x00\x00\x03\x84"+"\x00\x00\x00\x00\x00\x00\x00\x05"+
		"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x0b\x03"+
		"aaaaaaaaaaaaaaaaaaaa\x01\x0a\x00\x00\x01\x1a\xe1"+"bbbbbbbbbbbbbbbbbbbb\x03 \x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xc8\xd5"+
		"cccccccccccccccccccc\x02\xc0\xa8\x01\x03\x00\x01"), uint32(42), true)
	f.Fuzz(func(t *testing.T, data []byte, tx uint32, ipv6 bool) {
		s := &fuzzSource{b: data}
		reply := genReply(s)
		peers := genPeers(s)
		// Enough IPv4 peers, sometimes, to pass the cap.
		for range int(s.byte()%2) * (MaxUDPPeers4 + 10) {
			peers = append(peers, Peer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, s.byte()}), 1)})
		}

		out := AppendUDPAnnounce(nil, tx, &reply, peers, ipv6)
		var resp UDPResponse
		require.NoError(t, ParseUDPResponse(out, &resp))
		require.Equal(t, ActionAnnounce, resp.Action)
		require.Equal(t, tx, resp.TransactionID)
		require.Equal(t, clamp32(reply.Interval), resp.Interval)
		require.Equal(t, clamp32(reply.Incomplete), resp.Leechers)
		require.Equal(t, clamp32(reply.Complete), resp.Seeders)
		limit := MaxUDPPeers4
		if ipv6 {
			limit = MaxUDPPeers6
		}
		require.Equal(t, wantCompact(peers, ipv6, limit), append([]byte{}, resp.Peers...))
	})
}

// FuzzUDPScrapeWriter checks AppendUDPScrape (one clamped entry per hash,
// in order, in BEP 15's order complete, downloaded, incomplete) and
// AppendUDPError (the message, bytes and all).
func FuzzUDPScrapeWriter(f *testing.F) {
	f.Add([]byte{}, uint32(0), "")
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x01\x00\x00\x00\x00"), uint32(7), "unregistered torrent")
	f.Fuzz(func(t *testing.T, data []byte, tx uint32, message string) {
		s := &fuzzSource{b: data}
		counts := make([]ScrapeCounts, s.byte()%(MaxUDPScrapeHashes+1))
		for i := range counts {
			counts[i] = ScrapeCounts{Complete: s.int64(), Downloaded: s.int64(), Incomplete: s.int64()}
		}
		var resp UDPResponse
		require.NoError(t, ParseUDPResponse(AppendUDPScrape(nil, tx, counts), &resp))
		require.Equal(t, ActionScrape, resp.Action)
		require.Equal(t, tx, resp.TransactionID)
		require.Len(t, resp.Scrape, len(counts))
		for i, c := range counts {
			require.Equal(t, ScrapeCounts{
				Complete:   int64(clamp32(c.Complete)),
				Downloaded: int64(clamp32(c.Downloaded)),
				Incomplete: int64(clamp32(c.Incomplete)),
			}, resp.Scrape[i], "entry %d", i)
		}

		require.NoError(t, ParseUDPResponse(AppendUDPError(nil, tx, message), &resp))
		require.Equal(t, ActionError, resp.Action)
		require.Equal(t, tx, resp.TransactionID)
		require.Equal(t, message, resp.Message)
	})
}
