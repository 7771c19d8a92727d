package bittorrent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// fixedSwarms answers every announce with the same 50 peers, so the
// benchmarks measure the listener alone.
type fixedSwarms struct{ resp AnnounceResponse }

func newFixedSwarms() *fixedSwarms {
	f := &fixedSwarms{resp: AnnounceResponse{Complete: 10, Incomplete: 40}}
	for i := range 50 {
		f.resp.Peers = append(f.resp.Peers, Peer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 6881)})
	}
	return f
}

func (f *fixedSwarms) Announce(context.Context, *AnnounceRequest) (*AnnounceResponse, error) {
	return &f.resp, nil
}

func (f *fixedSwarms) Scrape(_ context.Context, _ string, hashes []InfoHash) ([]ScrapeEntry, error) {
	return make([]ScrapeEntry, len(hashes)), nil
}

// BenchmarkHTTPAnnounceHandler is one announce's head parsed and routed,
// without the network.
func BenchmarkHTTPAnnounceHandler(b *testing.B) {
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	head := []byte("GET " + benchTarget + " HTTP/1.1\r\nHost: tracker.example:6969\r\nUser-Agent: qBittorrent/4.5.2\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
	remote := netip.MustParseAddrPort("192.0.2.1:40000")
	buf := make([]byte, 0, 1024)
	var h requestHead
	b.ReportAllocs()
	for b.Loop() {
		if err := parseRequestHead(head, "", &h); err != nil {
			b.Fatal(err)
		}
		req := trackerRequest{method: h.Method, path: h.Path, rawQuery: h.RawQuery, remote: remote, ctx: context.Background()}
		if ans := srv.route(&req, buf[:0]); len(ans.body) < 100 {
			b.Fatalf("short answer %q", ans.body)
		}
	}
}

// BenchmarkUDPAnnounceHandler is one UDP announce through the packet
// handler, without the socket.
func BenchmarkUDPAnnounceHandler(b *testing.B) {
	srv, err := NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	w := &udpWorker{signer: wire.NewConnIDSigner(srv.cfg.Secret), out: make([]byte, 0, maxUDPPacket)}
	from := netip.MustParseAddrPort("192.0.2.1:40000")
	req := udpAnnounce("/0123456789abcdef0123456789abcdef/announce", nil)
	req.ConnectionID = w.signer.New(from.Addr(), srv.cfg.Now())
	packet := wire.AppendUDPRequest(nil, &req)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if out := srv.handle(ctx, w, packet, from); len(out) < 20 {
			b.Fatal("short reply")
		}
	}
}
