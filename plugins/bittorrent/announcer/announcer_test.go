package announcer

import (
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/netguard"
	"github.com/hoardproject/hoard/plugins/bittorrent/announcer/opentrackertest"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// local lets the tests' trackers, all on loopback, be announced to, as an
// operator's allow_private_targets does.
var local = netguard.Policy{AllowPrivate: true}

func TestParseURL(t *testing.T) {
	for _, ok := range []string{"udp://127.0.0.1:6969/announce", "udp://[::1]:6969", "http://127.0.0.1:80/announce",
		"https://tracker.example.org/announce?passkey=abc", "udp://tracker.example.org:1337/announce"} {
		_, err := ParseURL(ok)
		require.NoError(t, err, ok)
	}
	for _, c := range []struct{ url, why string }{
		{"", "empty"}, {"ftp://h:1/announce", "scheme"}, {"udp://h/announce", "host:port"},
		{"udp://h:0/announce", "port"}, {"udp://h:99999/announce", "port"}, {"http://h:80", "announce path"},
		{"http://user:pw@h:80/announce", "user info"}, {"http://h:80/announce#x", "fragment"},
		{"udp://:80/announce", "no host"}, {"http://h:80/an nounce", "only letters"}, {`http://h:80/a"b`, "only letters"},
		{"http://h:80/a\\b", "only letters"}, {"http://h:80/\u00e9", "only letters"},
		{"http://h:80/" + strings.Repeat("a", MaxURLLen), "longer"}, {"udp//h:1", "scheme"},
	} {
		_, err := ParseURL(c.url)
		require.ErrorIs(t, err, ErrInvalid, c.url)
		require.Contains(t, err.Error(), c.why, c.url)
	}
}

// TestAnnounceToOpentracker: Debian's opentracker on 127.0.0.1 with 30
// fake peers (each from its own loopback address) gives all 30 over UDP
// and over HTTP, and the announcer's own entry is not counted.
func TestAnnounceToOpentracker(t *testing.T) {
	hash := sha1.Sum([]byte("announcer"))
	other := sha1.Sum([]byte("empty"))
	ot := opentrackertest.Start(t, [][20]byte{hash, other})
	ot.Announce(t, hash, 0, 30)
	c := New(Config{Targets: local, Timeout: 5 * time.Second})
	want := map[netip.AddrPort]bool{}
	for i := range 30 {
		want[opentrackertest.PeerAddr(i)] = true
	}
	for _, u := range []string{ot.UDPURL(), ot.HTTPURL(), ot.UDPURL()} {
		r, err := c.Announce(t.Context(), u, hash)
		require.NoError(t, err, u)
		require.Equal(t, 30, r.Total, "%s: %v", u, r.Peers)
		got := map[netip.AddrPort]bool{}
		for _, p := range r.Peers {
			got[p] = true
		}
		require.Equal(t, want, got, u)
		require.Equal(t, int64(30), r.Leechers, u)
	}
	r, err := c.Announce(t.Context(), ot.UDPURL(), other)
	require.NoError(t, err)
	require.Zero(t, r.Total, "a torrent nobody announced has no peers but the announcer, which is left out")

	// MaxPeers keeps 10 and counts the rest.
	r, err = New(Config{Targets: local, Timeout: 5 * time.Second, MaxPeers: 10}).Announce(t.Context(), ot.HTTPURL(), hash)
	require.NoError(t, err)
	require.Len(t, r.Peers, 10)
	require.Equal(t, 30, r.Total)

	// A hash opentracker does not whitelist is refused, with its reason.
	_, err = c.Announce(t.Context(), ot.UDPURL(), sha1.Sum([]byte("not listed")))
	require.ErrorIs(t, err, ErrRefused)
	require.Contains(t, err.Error(), "does not track this torrent")
}

// TestHangingUDPTrackerTimesOut: a UDP socket that never answers costs
// the configured timeout, retries included, and no more.
func TestHangingUDPTrackerTimesOut(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	received := make(chan int, 16)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := silent.ReadFrom(buf)
			if err != nil {
				close(received)
				return
			}
			received <- n
		}
	}()
	// The bound tells the two readings apart with a margin of a whole
	// timeout on each side: Timeout across the retries takes 1.5 s, a
	// Timeout per try would take 4.5 s. A bound close to Timeout (it was
	// 2 s for 600 ms) is what a machine at load 20 under -race trips over,
	// not what the test is about.
	const timeout = 1500 * time.Millisecond
	c := New(Config{Targets: local, Timeout: timeout, Retries: 2})
	start := time.Now()
	_, err = c.Announce(t.Context(), "udp://"+silent.LocalAddr().String()+"/announce", sha1.Sum([]byte("x")))
	elapsed := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, elapsed, 2*timeout, "Timeout bounds the retries together, not each")
	require.GreaterOrEqual(t, elapsed, timeout-100*time.Millisecond, "the retries wait out the timeout")
	_ = silent.Close()
	connects := 0
	for n := range received {
		require.Equal(t, 16, n, "only connect requests: none was answered")
		connects++
	}
	require.Equal(t, 3, connects, "one try and two retries")
}

// TestUDPRepliesAreChecked: a reply to another transaction is ignored (and
// the real one still read), an error packet is ErrRefused with its text.
func TestUDPRepliesAreChecked(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	mode := make(chan string, 1)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var req wire.UDPRequest
			if wire.ParseUDPRequest(buf[:n], &req) != nil {
				continue
			}
			switch req.Action {
			case wire.ActionConnect:
				_, _ = pc.WriteTo(wire.AppendUDPConnect(nil, req.TransactionID+1, 99), from) // wrong tx: ignored
				_, _ = pc.WriteTo(wire.AppendUDPConnect(nil, req.TransactionID, 42), from)
			case wire.ActionAnnounce:
				if req.Event == wire.EventStopped {
					continue
				}
				if req.ConnectionID != 42 || req.Left != 0 || req.NumWant != 200 || string(req.URLData) != "/ann/pk?x=1" {
					_, _ = pc.WriteTo(wire.AppendUDPError(nil, req.TransactionID, "bad request"), from)
					continue
				}
				switch <-mode {
				case "error":
					_, _ = pc.WriteTo(wire.AppendUDPError(nil, req.TransactionID, "go away"), from)
				case "peers":
					peers := wire.Peers{{Addr: netip.MustParseAddrPort("10.0.0.1:1")}, {Addr: netip.MustParseAddrPort("10.0.0.2:2")},
						{Addr: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.3"), req.Port)}}
					_, _ = pc.WriteTo(wire.AppendUDPAnnounce(nil, req.TransactionID, &wire.AnnounceReply{Complete: 5, Incomplete: 6}, peers, false), from)
				}
			}
		}
	}()
	c := New(Config{Targets: local, Timeout: 2 * time.Second})
	u := "udp://" + pc.LocalAddr().String() + "/ann/pk?x=1"
	mode <- "peers"
	r, err := c.Announce(t.Context(), u, sha1.Sum([]byte("x")))
	require.NoError(t, err)
	require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")}, r.Peers,
		"the peer on the announcer's own port is its own entry")
	require.Equal(t, Reply{Peers: r.Peers, Total: 2, Seeders: 5, Leechers: 6}, r)
	mode <- "error"
	_, err = c.Announce(t.Context(), u, sha1.Sum([]byte("x")))
	require.ErrorIs(t, err, ErrRefused)
	require.Contains(t, err.Error(), "go away")
}

// TestHTTPReplies: non-compact peers, a failure reason, an oversized body,
// a redirect (refused: an announce goes only where it was registered), a
// hanging server (timeout), a non-200 status.
func TestHTTPReplies(t *testing.T) {
	var gotQuery string
	mux := http.NewServeMux()
	mux.HandleFunc("/dict", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("event") == "stopped" {
			return
		}
		gotQuery = r.URL.RawQuery
		_, _ = w.Write([]byte("d8:intervali60e5:peersld2:ip8:10.0.0.14:porti1eed2:ip11:2001:db8::24:porti2eed2:ip9:some.host4:porti3eeee"))
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("d14:failure reason6:no thxe"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("d5:peers2000:" + strings.Repeat("x", 2000) + "e"))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dict", http.StatusFound)
	})
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/500", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"))
	c := New(Config{Targets: local, Timeout: 500 * time.Millisecond, MaxReply: 1000})
	hash := sha1.Sum([]byte("x"))
	r, err := c.Announce(t.Context(), srv.URL+"/dict?passkey=pk", hash)
	require.NoError(t, err)
	require.Equal(t, 2, r.Total, "the host name entry is skipped")
	require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("[2001:db8::2]:2")}, r.Peers)
	require.Contains(t, gotQuery, "passkey=pk&info_hash=")
	require.Contains(t, gotQuery, "&left=0&")
	require.Contains(t, gotQuery, "&numwant=200")
	require.NotContains(t, gotQuery, "event=")

	for path, want := range map[string]error{"/fail": ErrRefused, "/big": ErrBad, "/redirect": nil, "/hang": ErrTimeout, "/500": ErrRefused} {
		_, err := c.Announce(t.Context(), srv.URL+path, hash)
		require.Error(t, err, path)
		if want != nil {
			require.ErrorIs(t, err, want, path)
		} else {
			require.Contains(t, err.Error(), "redirects are not followed")
		}
	}
}

// FuzzUDPAnnounceReply: a datagram from an external tracker is untrusted.
// Checking it against the transaction never panics, and an accepted
// announce reply gives only valid peers, at most MaxPeers, none on the
// announcer's port, and a total no bigger than the packet could hold.
func FuzzUDPAnnounceReply(f *testing.F) {
	ok := wire.AppendUDPAnnounce(nil, 7, &wire.AnnounceReply{Complete: 1},
		wire.Peers{{Addr: netip.MustParseAddrPort("10.0.0.1:1")}, {Addr: netip.MustParseAddrPort("10.0.0.2:9")}}, false)
	f.Add(ok, false, uint8(1))
	f.Add(wire.AppendUDPError(nil, 7, "nope"), false, uint8(0))
	f.Add(wire.AppendUDPConnect(nil, 7, 1), true, uint8(3))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 7, 0}, true, uint8(0))
	f.Fuzz(func(t *testing.T, packet []byte, v6 bool, maxPeers uint8) {
		// The client's reading part only: New would build an HTTP
		// transport per input.
		c := &Client{cfg: Config{MaxPeers: max(1, int(maxPeers))}}
		var resp wire.UDPResponse
		err := checkUDPReply(packet, 7, wire.ActionAnnounce, &resp)
		if err != nil {
			if !errors.Is(err, errOtherTransaction) {
				require.True(t, errors.Is(err, ErrBad) || errors.Is(err, ErrRefused), "%v", err)
			}
			return
		}
		require.Equal(t, uint32(7), binary.BigEndian.Uint32(packet[4:8]))
		r, err := c.readUDPAnnounce(&resp, v6, 9)
		if err != nil {
			require.ErrorIs(t, err, ErrBad)
			return
		}
		require.LessOrEqual(t, len(r.Peers), c.cfg.MaxPeers)
		require.LessOrEqual(t, len(r.Peers), r.Total)
		require.LessOrEqual(t, r.Total, len(packet)/6)
		for _, p := range r.Peers {
			require.True(t, p.Addr().IsValid())
			require.NotEqual(t, uint16(9), p.Port())
		}
	})
}

// TestUDPOverIPv6: a tracker on ::1 answers with 18-byte peers.
func TestUDPOverIPv6(t *testing.T) {
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("by design: no IPv6 loopback here (%v)", err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var req wire.UDPRequest
			if wire.ParseUDPRequest(buf[:n], &req) != nil {
				continue
			}
			switch {
			case req.Action == wire.ActionConnect:
				_, _ = pc.WriteTo(wire.AppendUDPConnect(nil, req.TransactionID, 7), from)
			case req.Action == wire.ActionAnnounce && req.Event != wire.EventStopped:
				peers := wire.Peers{{Addr: netip.MustParseAddrPort("[2001:db8::1]:1")}, {Addr: netip.MustParseAddrPort("[2001:db8::2]:2")}}
				_, _ = pc.WriteTo(wire.AppendUDPAnnounce(nil, req.TransactionID, &wire.AnnounceReply{}, peers, true), from)
			}
		}
	}()
	r, err := New(Config{Targets: local, Timeout: 2 * time.Second}).Announce(t.Context(), "udp://"+pc.LocalAddr().String()+"/announce", sha1.Sum([]byte("v6")))
	require.NoError(t, err)
	require.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[2001:db8::2]:2")}, r.Peers)
}

// TestTrackersOnLoopbackAndLinkLocalAreRefused: with the default policy,
// an announce to a tracker on loopback (a live one, over HTTP and UDP) or
// on a link-local address (the cloud metadata address) is refused before
// a byte is sent: the trackers see nothing.
func TestTrackersOnLoopbackAndLinkLocalAreRefused(t *testing.T) {
	hits := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits <- struct{}{}
		_, _ = w.Write([]byte("d8:intervali60e5:peers0:e"))
	}))
	t.Cleanup(srv.Close)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	// The refusals come before any byte is sent, so the timeout is only a
	// bound for a policy that failed to refuse; it must not be what a
	// loaded machine (-race, a niced build) trips over first: 300 ms once
	// was, on "localhost" in a fresh Debian chroot.
	c := New(Config{Timeout: 5 * time.Second})
	for _, u := range []string{
		srv.URL + "/announce", "udp://" + pc.LocalAddr().String() + "/announce",
		"http://169.254.169.254/latest/meta-data/announce", "udp://169.254.169.254:6969/announce",
		"http://[::1]:1/announce", "http://localhost:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:] + "/announce",
	} {
		_, err := c.Announce(t.Context(), u, sha1.Sum([]byte("x")))
		require.ErrorIs(t, err, netguard.ErrRefused, u)
		require.NotErrorIs(t, err, ErrTimeout, u)
	}
	require.Empty(t, hits, "the HTTP tracker was never asked")
	_ = pc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, _, err = pc.ReadFrom(make([]byte, 64))
	require.Error(t, err, "the UDP tracker got no packet")
	// Allowed, the same HTTP tracker answers. The timeout is only a bound
	// for a hang (2 s once ran out at load 20 under -race).
	_, err = New(Config{Timeout: 30 * time.Second, Targets: local}).Announce(t.Context(), srv.URL+"/announce", sha1.Sum([]byte("x")))
	require.NoError(t, err)
	require.Len(t, hits, 2, "the announce and its stopped")
}
