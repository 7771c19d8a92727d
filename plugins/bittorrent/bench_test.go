package bittorrent

import (
	"context"
	"net/http"
	"net/http/httptest"
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

// discardWriter is a ResponseWriter that keeps nothing, so allocations
// counted are the handler's own.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkHTTPAnnounceHandler is one announce through ServeHTTP, without
// the network and without net/http's own request parsing.
func BenchmarkHTTPAnnounceHandler(b *testing.B) {
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/0123456789abcdef0123456789abcdef/announce?"+announceQuery(func(q *wire.AnnounceQuery) {
		q.Key = "DEADBEEF"
		q.Event = wire.EventStarted
	}), nil)
	req.RemoteAddr = "192.0.2.1:40000"
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		srv.ServeHTTP(w, req)
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
