package bittorrent

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/anacrolix/torrent/tracker"
	"github.com/anacrolix/torrent/tracker/udp"
	"github.com/anacrolix/torrent/types"
	"github.com/anacrolix/torrent/types/infohash"
	"github.com/stretchr/testify/require"
)

// The interop tests drive our listeners with anacrolix/torrent's tracker
// client (the one chihaya's e2e test uses), so a protocol mistake we share
// between our parser and our writer cannot hide.

func anacrolixAnnounce(t *testing.T, url string, peer PeerID, port uint16, left int64) tracker.AnnounceResponse {
	t.Helper()
	cl, err := tracker.NewClient(url, tracker.NewClientOpts{Slogger: quietLogger()})
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cl.Announce(ctx, tracker.AnnounceRequest{
		InfoHash: infohash.T(testHash), PeerId: types.PeerID(peer), Left: left, Event: tracker.Started,
		Key: 7, NumWant: -1, Port: port,
	}, tracker.AnnounceOpt{})
	require.NoError(t, err)
	return resp
}

func anacrolixScrape(t *testing.T, url string, hashes ...InfoHash) udp.ScrapeResponse {
	t.Helper()
	cl, err := tracker.NewClient(url, tracker.NewClientOpts{Slogger: quietLogger()})
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ihs := make([]infohash.T, len(hashes))
	for i, h := range hashes {
		ihs[i] = infohash.T(h)
	}
	resp, err := cl.Scrape(ctx, ihs)
	require.NoError(t, err)
	return resp
}

func peerAddrs(peers []tracker.Peer) []netip.AddrPort {
	var out []netip.AddrPort
	for _, p := range peers {
		ap, ok := p.ToNetipAddrPort()
		if ok {
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	return out
}

func TestInteropAnacrolixUDP(t *testing.T) {
	for _, tc := range []struct {
		name, network, host string
		want                []netip.AddrPort
	}{
		{"ipv4", "udp4", "127.0.0.1", []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7001")}},
		{"ipv6", "udp6", "::1", []netip.AddrPort{
			netip.MustParseAddrPort("[2001:db8::1]:51413"), netip.MustParseAddrPort("[::1]:7001"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeSwarms()
			fake.addPeer(testHash, v6Peer, "[2001:db8::1]:51413", false)
			srv := startUDP(t, fake, func(c *UDPConfig) { c.Interval = 20 * time.Minute })
			addr := srv.Addr4()
			if tc.network == "udp6" {
				addr = srv.Addr6()
			}
			_, port, err := net.SplitHostPort(addr)
			require.NoError(t, err)
			base := "udp://" + net.JoinHostPort(tc.host, port)

			// The first peer announces with a passkey in BEP 41 URL data.
			anacrolixAnnounce(t, base+"/0123456789abcdef/announce", otherPeer, 7001, 0)
			require.Equal(t, "0123456789abcdef", fake.lastAnnounce().Passkey)

			resp := anacrolixAnnounce(t, base+"/announce?passkey=pk2", testPeer, 7002, 10)
			require.Equal(t, "pk2", fake.lastAnnounce().Passkey)
			require.Equal(t, int32(1200), resp.Interval)
			require.Equal(t, int32(1), resp.Seeders)
			require.Equal(t, int32(2), resp.Leechers)
			require.ElementsMatch(t, tc.want, peerAddrs(resp.Peers), "peers of the socket's family only")

			scrape := anacrolixScrape(t, base+"/announce", testHash, testHash2)
			require.Equal(t, udp.ScrapeResponse{{Seeders: 1, Leechers: 2}, {}}, scrape)
			require.Equal(t, uint64(1), srv.Stats().Scrapes)
		})
	}
}

func TestInteropAnacrolixHTTP(t *testing.T) {
	fake := newFakeSwarms()
	fake.addPeer(testHash, v6Peer, "[2001:db8::1]:51413", false)
	_, base := startHTTP(t, fake, func(c *HTTPConfig) { c.Interval = 20 * time.Minute })

	for _, url := range []string{base + "/pkA/announce", base + "/announce/pkA", base + "/announce?passkey=pkA"} {
		anacrolixAnnounce(t, url, otherPeer, 7001, 0)
		require.Equal(t, "pkA", fake.lastAnnounce().Passkey, url)
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:7001"), fake.lastAnnounce().Addr,
			"the client's ip parameter is ignored")
	}
	resp := anacrolixAnnounce(t, base+"/pkB/announce", testPeer, 7002, 10)
	require.Equal(t, int32(1200), resp.Interval)
	require.Equal(t, int32(1), resp.Seeders)
	require.Equal(t, int32(2), resp.Leechers)
	require.ElementsMatch(t, []netip.AddrPort{
		netip.MustParseAddrPort("127.0.0.1:7001"), netip.MustParseAddrPort("[2001:db8::1]:51413"),
	}, peerAddrs(resp.Peers), "peers and peers6")

	// anacrolix derives the scrape URL from the announce URL.
	scrape := anacrolixScrape(t, base+"/pkB/announce", testHash, testHash2)
	require.Equal(t, udp.ScrapeResponse{{Seeders: 1, Leechers: 2}, {}}, scrape)
	require.Equal(t, "pkB", fake.lastScrape().passkey)
}
