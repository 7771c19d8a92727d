package bittorrent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"

	"github.com/hoardproject/hoard/internal/clock"
)

func startUDP(t *testing.T, swarms Swarms, edit func(*UDPConfig)) *UDPServer {
	t.Helper()
	cfg := UDPConfig{Addr4: "127.0.0.1:0", Addr6: "[::1]:0", Swarms: swarms, Logger: quietLogger(), Workers: 4}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := NewUDPServer(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	return srv
}

// udpClient speaks BEP 15 to the server over a real loopback socket.
type udpClient struct {
	t      *testing.T
	conn   *net.UDPConn
	tx     uint32
	connID uint64
}

func dialUDPClient(t *testing.T, network, local, server string) *udpClient {
	t.Helper()
	raddr, err := net.ResolveUDPAddr(network, server)
	require.NoError(t, err)
	var laddr *net.UDPAddr
	if local != "" {
		laddr, err = net.ResolveUDPAddr(network, local)
		require.NoError(t, err)
	}
	conn, err := net.DialUDP(network, laddr, raddr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &udpClient{t: t, conn: conn, tx: 100}
}

// send writes a raw packet.
func (c *udpClient) send(packet []byte) {
	c.t.Helper()
	_, err := c.conn.Write(packet)
	require.NoError(c.t, err)
}

// receive reads one response. The deadline only keeps a broken server
// from hanging the test; nothing is asserted about time.
func (c *udpClient) receive() wire.UDPResponse {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 4096)
	n, err := c.conn.Read(buf)
	require.NoError(c.t, err)
	var resp wire.UDPResponse
	require.NoError(c.t, wire.ParseUDPResponse(buf[:n], &resp))
	resp.Peers = append([]byte(nil), resp.Peers...)
	return resp
}

// do sends req with a fresh transaction id (and the client's connection
// id) and returns the matching response.
func (c *udpClient) do(req wire.UDPRequest) wire.UDPResponse {
	c.t.Helper()
	c.tx++
	req.TransactionID = c.tx
	if req.ConnectionID == 0 {
		req.ConnectionID = c.connID
	}
	c.send(wire.AppendUDPRequest(nil, &req))
	resp := c.receive()
	require.Equal(c.t, c.tx, resp.TransactionID)
	return resp
}

func (c *udpClient) connect() {
	c.t.Helper()
	resp := c.do(wire.UDPRequest{Action: wire.ActionConnect})
	require.Equal(c.t, wire.ActionConnect, resp.Action, resp.Message)
	c.connID = resp.ConnectionID
}

func (c *udpClient) localAddr() netip.AddrPort {
	return c.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func udpAnnounce(urlData string, edit func(*wire.UDPRequest)) wire.UDPRequest {
	req := wire.UDPRequest{
		Action: wire.ActionAnnounce, InfoHash: testHash, PeerID: testPeer,
		Left: 100, NumWant: -1, Port: 6881, Key: 0xcafe0001,
	}
	if urlData != "" {
		req.URLData = []byte(urlData)
	}
	if edit != nil {
		edit(&req)
	}
	return req
}

func TestUDPConnectAnnounceScrape(t *testing.T) {
	for _, family := range []struct {
		network string
		ipv6    bool
	}{{"udp4", false}, {"udp6", true}} {
		t.Run(family.network, func(t *testing.T) {
			fake := newFakeSwarms()
			fake.addPeer(testHash, otherPeer, "192.0.2.1:6881", true)
			fake.addPeer(testHash, v6Peer, "[2001:db8::1]:51413", false)
			fake.downloaded[testHash] = 4
			srv := startUDP(t, fake, func(c *UDPConfig) { c.Interval = time.Hour })
			addr := srv.Addr4()
			wantFamily := IPv4Only
			if family.ipv6 {
				addr = srv.Addr6()
				wantFamily = IPv6Only
			}
			c := dialUDPClient(t, family.network, "", addr)
			c.connect()

			resp := c.do(udpAnnounce("/pk1/announce", func(r *wire.UDPRequest) { r.Event = wire.EventStarted }))
			require.Equal(t, wire.ActionAnnounce, resp.Action, resp.Message)
			require.Equal(t, int32(3600), resp.Interval)
			require.Equal(t, int32(1), resp.Seeders)
			require.Equal(t, int32(2), resp.Leechers)
			peers, err := wire.ParseCompactPeers(nil, resp.Peers, family.ipv6)
			require.NoError(t, err)
			if family.ipv6 {
				require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:51413")}, peers)
			} else {
				require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:6881")}, peers)
			}
			require.Equal(t, AnnounceRequest{
				InfoHash: testHash, PeerID: testPeer,
				Addr: netip.AddrPortFrom(c.localAddr().Addr(), 6881),
				Left: 100, Event: EventStarted, NumWant: DefaultNumWant,
				Passkey: "pk1", Key: "cafe0001", PeerFamily: wantFamily,
			}, fake.lastAnnounce(), "the store is asked for the socket's family only")

			resp = c.do(wire.UDPRequest{Action: wire.ActionScrape, InfoHashes: [][20]byte{testHash2, testHash, testHash2}})
			require.Equal(t, wire.ActionScrape, resp.Action, resp.Message)
			require.Equal(t, []wire.ScrapeCounts{{}, {Complete: 1, Incomplete: 2, Downloaded: 4}, {}}, resp.Scrape,
				"one entry per requested hash, in order")
			require.Equal(t, fakeScrape{hashes: []InfoHash{testHash2, testHash, testHash2}}, fake.lastScrape())

			stats := srv.Stats()
			require.Equal(t, uint64(1), stats.Connects)
			require.Equal(t, uint64(1), stats.Announces)
			require.Equal(t, uint64(1), stats.Scrapes)
		})
	}
}

func TestUDPPasskeys(t *testing.T) {
	for _, private := range []bool{false, true} {
		fake := newFakeSwarms()
		srv := startUDP(t, fake, func(c *UDPConfig) { c.RequirePasskey = private })
		c := dialUDPClient(t, "udp4", "", srv.Addr4())
		c.connect()
		for _, urlData := range []string{"/pk/announce", "/announce/pk", "/announce?passkey=pk", "/announce?x=1&passkey=pk", "/pk/announce?passkey=pk"} {
			resp := c.do(udpAnnounce(urlData, nil))
			require.Equal(t, wire.ActionAnnounce, resp.Action, "%s: %s", urlData, resp.Message)
			require.Equal(t, "pk", fake.lastAnnounce().Passkey, urlData)
		}
		resp := c.do(udpAnnounce("", nil))
		if private {
			require.Equal(t, wire.ActionError, resp.Action)
			require.Equal(t, "this tracker requires a passkey in the announce URL", resp.Message)
		} else {
			require.Equal(t, wire.ActionAnnounce, resp.Action, resp.Message)
			require.Empty(t, fake.lastAnnounce().Passkey)
		}
		before := fake.announceCount()
		for urlData, want := range map[string]string{
			"/pk/scrape":            udpNotAnnounceURL,
			"/nope":                 wire.ErrBadURLData.Error(),
			"/a/announce?passkey=b": wire.ErrConflictingPasskeys.Error(),
			"/announce?passkey=%7B": wire.ErrBadPasskey.Error(),
		} {
			resp := c.do(udpAnnounce(urlData, nil))
			require.Equal(t, wire.ActionError, resp.Action, urlData)
			require.Equal(t, want, resp.Message, urlData)
		}
		require.Equal(t, before, fake.announceCount(), "refused before reaching the store")
	}
}

func TestUDPConnectionIDs(t *testing.T) {
	fake := newFakeSwarms()
	clk := clock.NewFake(time.Unix(1_900_000_000, 0))
	srv := startUDP(t, fake, func(c *UDPConfig) { c.Now = clk.Now })
	c := dialUDPClient(t, "udp4", "127.0.0.1:0", srv.Addr4())

	resp := c.do(udpAnnounce("", func(r *wire.UDPRequest) { r.ConnectionID = 0x1234 }))
	require.Equal(t, wire.ActionError, resp.Action)
	require.Equal(t, udpBadConnID, resp.Message)
	resp = c.do(wire.UDPRequest{Action: wire.ActionScrape, ConnectionID: 0x1234, InfoHashes: [][20]byte{testHash}})
	require.Equal(t, udpBadConnID, resp.Message)

	c.connect()
	clk.Advance(wire.ConnIDLifetime)
	require.Equal(t, wire.ActionAnnounce, c.do(udpAnnounce("", nil)).Action, "still valid after two minutes")
	clk.Advance(wire.ConnIDClockSkew + time.Second)
	require.Equal(t, udpBadConnID, c.do(udpAnnounce("", nil)).Message, "expired")

	// An id is bound to the client's address: 127.0.0.2 is loopback too.
	c.connect()
	other := dialUDPClient(t, "udp4", "127.0.0.2:0", srv.Addr4())
	other.connID = c.connID
	require.Equal(t, udpBadConnID, other.do(udpAnnounce("", nil)).Message)

	// A server with the same secret accepts another's ids (several hosts).
	secret := []byte("shared secret shared secret 1234")
	a := startUDP(t, fake, func(c *UDPConfig) { c.Secret = secret; c.Addr6 = "" })
	b := startUDP(t, fake, func(c *UDPConfig) { c.Secret = secret; c.Addr6 = "" })
	ca := dialUDPClient(t, "udp4", "", a.Addr4())
	ca.connect()
	cb := dialUDPClient(t, "udp4", "127.0.0.1:0", b.Addr4()) // ids bind the IP, not the port
	cb.connID = ca.connID
	require.Equal(t, wire.ActionAnnounce, cb.do(udpAnnounce("", nil)).Action)
}

func TestUDPMalformedPackets(t *testing.T) {
	fake := newFakeSwarms()
	// One reader handles packets in arrival order, so a reply to a later
	// packet proves the earlier ones were handled.
	srv := startUDP(t, fake, func(c *UDPConfig) { c.Workers = 1 })
	c := dialUDPClient(t, "udp4", "", srv.Addr4())
	c.connect()
	valid := udpAnnounce("", nil)
	valid.ConnectionID = c.connID
	valid.TransactionID = 7
	packet := wire.AppendUDPRequest(nil, &valid)

	// Too short to carry a transaction id: no reply. The next response is
	// the connect's, proving nothing was sent for the short packets.
	c.send(packet[:15])
	c.send(nil)
	c.connect()

	for name, tc := range map[string]struct {
		packet []byte
		want   error
	}{
		"truncated announce": {packet[:60], wire.ErrUDPTruncated},
		"header only":        {packet[:16], wire.ErrUDPTruncated},
		"bad option":         {append(append([]byte(nil), packet...), 2, 40, 'x'), wire.ErrUDPBadOption},
		"unknown action":     {append(append([]byte(nil), packet[:8]...), 0, 0, 0, 9, 0, 0, 0, 7), wire.ErrUDPBadAction},
		"misaligned scrape":  {append(append([]byte(nil), packet[:8]...), append([]byte{0, 0, 0, 2, 0, 0, 0, 7}, make([]byte, 30)...)...), wire.ErrUDPScrapeMisaligned},
		"connect no magic":   {append(make([]byte, 8), 0, 0, 0, 0, 0, 0, 0, 7), wire.ErrUDPBadProtocolID},
	} {
		c.send(tc.packet)
		resp := c.receive()
		require.Equal(t, wire.ActionError, resp.Action, name)
		require.Equal(t, uint32(7), resp.TransactionID, name)
		// The source is unproven (no valid connection id), so the reply
		// is never larger than the packet: the message is cut to fit.
		want := tc.want.Error()
		want = want[:min(len(want), len(tc.packet)-8)]
		require.Equal(t, want, resp.Message, name)
		require.LessOrEqual(t, 8+len(resp.Message), len(tc.packet), "%s: no amplification", name)
	}
	require.Zero(t, fake.announceCount(), "garbage changes nothing")
	require.Zero(t, fake.swarmSize(testHash))
	require.Equal(t, uint64(8), srv.Stats().Malformed)
}

func TestUDPErrorsFromStore(t *testing.T) {
	fake := newFakeSwarms()
	fake.registered = map[InfoHash]bool{}
	srv := startUDP(t, fake, nil)
	c := dialUDPClient(t, "udp4", "", srv.Addr4())
	c.connect()
	resp := c.do(udpAnnounce("", nil))
	require.Equal(t, wire.ActionError, resp.Action)
	require.Equal(t, "unregistered torrent", resp.Message)

	fake.set(func(f *fakeSwarms) { f.fail = errors.New("redis: i/o timeout on 10.0.0.5") })
	require.Equal(t, internalFailure, c.do(udpAnnounce("", nil)).Message)
	require.Equal(t, internalFailure, c.do(wire.UDPRequest{Action: wire.ActionScrape, InfoHashes: [][20]byte{testHash}}).Message)
	stats := srv.Stats()
	require.Equal(t, uint64(1), stats.Refused)
	require.Equal(t, uint64(2), stats.InternalErrors)
}

func TestUDPNumWantAndClientIP(t *testing.T) {
	fake := newFakeSwarms()
	srv := startUDP(t, fake, func(c *UDPConfig) { c.MaxNumWant = 500 })
	c := dialUDPClient(t, "udp4", "", srv.Addr4())
	c.connect()
	c.do(udpAnnounce("", func(r *wire.UDPRequest) { r.NumWant = 1000; r.IPv4 = [4]byte{203, 0, 113, 1} }))
	got := fake.lastAnnounce()
	require.Equal(t, wire.MaxUDPPeers4, got.NumWant, "capped to what fits one datagram")
	require.Equal(t, netip.MustParseAddr("127.0.0.1"), got.Addr.Addr(), "the IP field is ignored by default")
	c.do(udpAnnounce("", func(r *wire.UDPRequest) { r.Event = wire.EventStopped; r.NumWant = 10 }))
	require.Zero(t, fake.lastAnnounce().NumWant)

	trusting := startUDP(t, fake, func(c *UDPConfig) { c.TrustClientIP = true })
	c = dialUDPClient(t, "udp4", "", trusting.Addr4())
	c.connect()
	c.do(udpAnnounce("", func(r *wire.UDPRequest) { r.IPv4 = [4]byte{203, 0, 113, 1} }))
	require.Equal(t, netip.MustParseAddrPort("203.0.113.1:6881"), fake.lastAnnounce().Addr)
}

func TestUDPLifecycle(t *testing.T) {
	fake := newFakeSwarms()
	_, err := NewUDPServer(UDPConfig{Swarms: fake})
	require.ErrorContains(t, err, "Addr4")
	_, err = NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0"})
	require.ErrorContains(t, err, "Swarms")
	_, err = NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0", Swarms: fake, Secret: []byte("short")})
	require.ErrorContains(t, err, "Secret")

	srv, err := NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0", Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, srv.Stop(), "Stop before Start")

	srv, err = NewUDPServer(UDPConfig{Addr6: "[::1]:0", Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	require.Empty(t, srv.Addr4())
	require.NotEmpty(t, srv.Addr6())
	require.Error(t, srv.Start(context.Background()))
	require.NoError(t, srv.Stop())
	require.NoError(t, srv.Stop(), "Stop twice")

	busy := startUDP(t, fake, nil)
	srv, err = NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0", Addr6: busy.Addr6(), Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	require.Error(t, srv.Start(context.Background()), "the IPv6 port is taken")
	require.NoError(t, srv.Stop())
}
