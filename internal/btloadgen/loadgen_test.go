package btloadgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// countingSwarms records announces and answers with up to NumWant of the
// last peers seen on the torrent.
type countingSwarms struct {
	mu        sync.Mutex
	refuse    string
	announces []bittorrent.AnnounceRequest
	peers     map[bittorrent.InfoHash][]bittorrent.Peer
}

func (s *countingSwarms) Announce(_ context.Context, req *bittorrent.AnnounceRequest) (*bittorrent.AnnounceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announces = append(s.announces, *req)
	if s.refuse != "" {
		return nil, &bittorrent.ClientError{Reason: s.refuse}
	}
	if s.peers == nil {
		s.peers = map[bittorrent.InfoHash][]bittorrent.Peer{}
	}
	swarm := s.peers[req.InfoHash]
	resp := &bittorrent.AnnounceResponse{Peers: append([]bittorrent.Peer(nil), swarm[max(0, len(swarm)-req.NumWant):]...)}
	s.peers[req.InfoHash] = append(swarm, bittorrent.Peer{ID: req.PeerID, Addr: req.Addr})
	return resp, nil
}

func (s *countingSwarms) Scrape(_ context.Context, _ string, hashes []bittorrent.InfoHash) ([]bittorrent.ScrapeEntry, error) {
	return make([]bittorrent.ScrapeEntry, len(hashes)), nil
}

func (s *countingSwarms) seen() []bittorrent.AnnounceRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bittorrent.AnnounceRequest(nil), s.announces...)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startTrackers runs our HTTP and UDP listeners on loopback.
func startTrackers(t *testing.T, swarms bittorrent.Swarms) (httpAddr, udpAddr string) {
	t.Helper()
	h, err := bittorrent.NewHTTPServer(bittorrent.HTTPConfig{Addr: "127.0.0.1:0", Swarms: swarms, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	u, err := bittorrent.NewUDPServer(bittorrent.UDPConfig{Addr4: "127.0.0.1:0", Swarms: swarms, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, u.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, u.Stop()) })
	return h.Addr(), u.Addr4()
}

// targetOf is the listener a run in mode announces to.
func targetOf(mode Mode, httpAddr, udpAddr string) string {
	if mode == ModeUDP {
		return udpAddr
	}
	return httpAddr
}

func TestRunAgainstOurListeners(t *testing.T) {
	for _, mode := range []Mode{ModeHTTPKeepAlive, ModeHTTPClose, ModeUDP} {
		t.Run(string(mode), func(t *testing.T) {
			swarms := &countingSwarms{}
			httpAddr, udpAddr := startTrackers(t, swarms)
			target := targetOf(mode, httpAddr, udpAddr)
			res, err := Run(context.Background(), Config{
				Mode: mode, Target: target, Path: "/pk123/announce",
				Torrents: 100, Announces: 2000, Concurrency: 4, NumWant: 7, Seed: 42,
			})
			require.NoError(t, err)
			require.Equal(t, int64(2000), res.Announces, res.String())
			require.Zero(t, res.Errors, res.String())
			require.Positive(t, res.PeersReceived)
			require.LessOrEqual(t, res.PeersReceived, int64(7*2000))
			require.Positive(t, res.P50)
			require.GreaterOrEqual(t, res.P99, res.P50)
			require.GreaterOrEqual(t, res.Max, res.P99)
			require.Positive(t, res.AnnouncesPerSec)

			seen := swarms.seen()
			require.Len(t, seen, 2000)
			hashes := map[bittorrent.InfoHash]bool{}
			for _, h := range InfoHashes(42, 100) {
				hashes[h] = true
			}
			seeders := 0
			for _, a := range seen {
				require.True(t, hashes[a.InfoHash], "announces only the seed's torrents")
				require.Equal(t, "pk123", a.Passkey)
				require.Equal(t, 7, a.NumWant)
				require.True(t, strings.HasPrefix(string(a.PeerID[:]), "-HL0001-"))
				if a.Left == 0 {
					seeders++
				}
			}
			require.InDelta(t, 0.25, float64(seeders)/2000, 0.1, "about a quarter seed")
		})
	}
}

func TestRunPathShapes(t *testing.T) {
	swarms := &countingSwarms{}
	httpAddr, udpAddr := startTrackers(t, swarms)
	for _, tc := range []struct {
		mode          Mode
		target, path  string
		wantPasskey   string
		wantAnnounces int
	}{
		{ModeHTTPKeepAlive, httpAddr, "", "", 10}, // plain /announce, as opentracker
		{ModeHTTPKeepAlive, httpAddr, "/announce/pkA", "pkA", 10},
		{ModeHTTPClose, httpAddr, "/announce?passkey=pkB", "pkB", 10},
		{ModeUDP, udpAddr, "", "", 10},
		{ModeUDP, udpAddr, "/announce?passkey=pkC", "pkC", 10},
	} {
		before := len(swarms.seen())
		res, err := Run(context.Background(), Config{Mode: tc.mode, Target: tc.target, Path: tc.path, Announces: 10, Concurrency: 2, Torrents: 5})
		require.NoError(t, err)
		require.Equal(t, int64(10), res.Announces, res.String())
		seen := swarms.seen()[before:]
		require.Len(t, seen, tc.wantAnnounces)
		for _, a := range seen {
			require.Equal(t, tc.wantPasskey, a.Passkey, "%s %s", tc.mode, tc.path)
		}
	}
}

// Paths spread the peers over passkeys, each peer keeping its own, and
// Transfer reports counters: uploaded by every peer, downloaded by
// leechers only, never going back between runs.
func TestRunSpreadsPathsAndReportsTransfer(t *testing.T) {
	swarms := &countingSwarms{}
	httpAddr, udpAddr := startTrackers(t, swarms)
	for _, tc := range []struct {
		mode   Mode
		target string
	}{{ModeHTTPKeepAlive, httpAddr}, {ModeUDP, udpAddr}} {
		before := len(swarms.seen())
		cfg := Config{Mode: tc.mode, Target: tc.target, Paths: []string{"/pkA/announce", "/pkB/announce", "/pkC/announce"},
			Transfer: true, Announces: 200, Concurrency: 2, Torrents: 5, Peers: 20}
		for range 2 {
			res, err := Run(context.Background(), cfg)
			require.NoError(t, err)
			require.Equal(t, int64(200), res.Announces, res.String())
		}
		seen := swarms.seen()[before:]
		require.Len(t, seen, 400)
		passkeyOf := map[bittorrent.PeerID]string{}
		lastUp := map[bittorrent.PeerID]uint64{}
		passkeys := map[string]bool{}
		for _, a := range seen {
			id := a.PeerID
			require.Contains(t, []string{"pkA", "pkB", "pkC"}, a.Passkey, "%s", tc.mode)
			if pk, ok := passkeyOf[id]; ok {
				require.Equal(t, pk, a.Passkey, "%s: a peer keeps its passkey", tc.mode)
			}
			passkeyOf[id], passkeys[a.Passkey] = a.Passkey, true
			require.Positive(t, a.Uploaded, tc.mode)
			if a.Left == 0 {
				require.Zero(t, a.Downloaded, "%s: a seeder downloads nothing", tc.mode)
			} else {
				require.Equal(t, a.Uploaded, a.Downloaded, tc.mode)
			}
			// Workers run concurrently, so only roughly in order; the
			// second run's counters are at least the first's.
			lastUp[id] = max(lastUp[id], a.Uploaded)
		}
		require.Len(t, passkeys, 3, "%s: every passkey is used", tc.mode)
		for _, a := range seen[:200] {
			require.LessOrEqual(t, a.Uploaded, lastUp[a.PeerID])
		}
	}
	_, err := Run(context.Background(), Config{Mode: ModeUDP, Target: udpAddr, Paths: []string{"pk"}})
	require.ErrorContains(t, err, "must start with /")
}

func TestRunStickyKeepsEachPeerOnOneTorrent(t *testing.T) {
	torrentsPerPeer := func(sticky bool) (most int, announces map[bittorrent.PeerID]int) {
		swarms := &countingSwarms{}
		_, udpAddr := startTrackers(t, swarms)
		res, err := Run(context.Background(), Config{Mode: ModeUDP, Target: udpAddr, Sticky: sticky, Transfer: true,
			Announces: 300, Concurrency: 2, Torrents: 5, Peers: 20})
		require.NoError(t, err)
		require.Equal(t, int64(300), res.Announces, res.String())
		on := map[bittorrent.PeerID]map[bittorrent.InfoHash]bool{}
		announces = map[bittorrent.PeerID]int{}
		for _, a := range swarms.seen() {
			if on[a.PeerID] == nil {
				on[a.PeerID] = map[bittorrent.InfoHash]bool{}
			}
			on[a.PeerID][a.InfoHash] = true
			announces[a.PeerID]++
		}
		for _, hashes := range on {
			most = max(most, len(hashes))
		}
		return most, announces
	}
	most, announces := torrentsPerPeer(true)
	require.Equal(t, 1, most, "a sticky peer announces on one torrent")
	require.Len(t, announces, 20, "every peer announced")
	for id, n := range announces {
		require.Greater(t, n, 1, "peer %x re-announced", id)
	}
	most, _ = torrentsPerPeer(false)
	require.Greater(t, most, 1, "without Sticky a peer's torrent is drawn each time")
}

// EachPeerOnce is the warm-up that leaves every peer known: each of the
// pool's peers announces exactly once, over both protocols, and a run
// that also asks for a count or a time is refused.
func TestRunEachPeerOnceAnnouncesEveryPeerExactlyOnce(t *testing.T) {
	swarms := &countingSwarms{}
	httpAddr, udpAddr := startTrackers(t, swarms)
	for _, mode := range []Mode{ModeUDP, ModeHTTPKeepAlive} {
		target := targetOf(mode, httpAddr, udpAddr)
		before := len(swarms.seen())
		res, err := Run(context.Background(), Config{Mode: mode, Target: target, Sticky: true, Transfer: true,
			EachPeerOnce: true, Concurrency: 4, Torrents: 7, Peers: 257})
		require.NoError(t, err)
		require.Equal(t, int64(257), res.Announces, res.String())
		seen := swarms.seen()[before:]
		require.Len(t, seen, 257)
		announces := map[bittorrent.PeerID]int{}
		for _, a := range seen {
			announces[a.PeerID]++
		}
		require.Len(t, announces, 257, "%s: every peer announced", mode)
		for id, n := range announces {
			require.Equal(t, 1, n, "%s: peer %x announced once", mode, id)
		}
	}
	_, err := Run(context.Background(), Config{Mode: ModeUDP, Target: udpAddr, EachPeerOnce: true, Announces: 10})
	require.ErrorContains(t, err, "EachPeerOnce")
	_, err = Run(context.Background(), Config{Mode: ModeUDP, Target: udpAddr, EachPeerOnce: true, Duration: time.Second})
	require.ErrorContains(t, err, "EachPeerOnce")
}

func TestRunCountsFailureReasons(t *testing.T) {
	swarms := &countingSwarms{refuse: "Requested download is not authorized for use with this tracker."}
	httpAddr, udpAddr := startTrackers(t, swarms)
	for _, mode := range []Mode{ModeHTTPKeepAlive, ModeUDP} {
		target := targetOf(mode, httpAddr, udpAddr)
		res, err := Run(context.Background(), Config{Mode: mode, Target: target, Announces: 20, Concurrency: 2})
		require.NoError(t, err)
		require.Zero(t, res.Announces)
		require.Equal(t, int64(20), res.Errors)
		require.Contains(t, res.FirstError, "not authorized")
	}
}

func TestRunDuration(t *testing.T) {
	swarms := &countingSwarms{}
	_, udpAddr := startTrackers(t, swarms)
	// No announce budget: only the duration can end this run.
	res, err := Run(context.Background(), Config{Mode: ModeUDP, Target: udpAddr, Duration: 300 * time.Millisecond, Concurrency: 2})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Elapsed, 300*time.Millisecond)
	require.Zero(t, res.Errors, "announces cut off by the end are not errors: %s", res.FirstError)
	require.LessOrEqual(t, res.Announces, int64(len(swarms.seen())), "every announce counted reached the tracker")
}

func TestRunRefusesNonLoopback(t *testing.T) {
	for _, target := range []string{"192.0.2.1:6969", "[2001:db8::1]:6969", "example.com:80", "10.0.0.1:80", "0.0.0.0:6969"} {
		_, err := Run(context.Background(), Config{Mode: ModeUDP, Target: target})
		require.ErrorIs(t, err, ErrNotLoopback, target)
	}
	_, err := Run(context.Background(), Config{Mode: "tcp", Target: "127.0.0.1:1"})
	require.ErrorContains(t, err, "unknown mode")
	_, err = Run(context.Background(), Config{Mode: ModeUDP, Target: "127.0.0.1"})
	require.Error(t, err)
	_, err = Run(context.Background(), Config{Mode: ModeHTTPClose, Target: "127.0.0.1:1", Path: "announce"})
	require.ErrorContains(t, err, "must start with /")
}

func TestRunLocalhost(t *testing.T) {
	swarms := &countingSwarms{}
	httpAddr, _ := startTrackers(t, swarms)
	_, port, err := net.SplitHostPort(httpAddr)
	require.NoError(t, err)
	res, err := Run(context.Background(), Config{Mode: ModeHTTPClose, Target: "localhost:" + port, Announces: 5, Concurrency: 1})
	require.NoError(t, err)
	require.Equal(t, int64(5), res.Announces, res.String())
}

func TestInfoHashes(t *testing.T) {
	a := InfoHashes(1, 1000)
	require.Equal(t, a, InfoHashes(1, 1000), "deterministic")
	require.Equal(t, a[:10], InfoHashes(1, 10), "a prefix of a longer run")
	require.NotEqual(t, a[0], InfoHashes(2, 1)[0], "the seed matters")
	unique := map[[20]byte]bool{}
	for _, h := range a {
		unique[h] = true
	}
	require.Len(t, unique, 1000)

}

// TestHTTPClientResponseShapes checks the minimal HTTP client against
// replies shaped as other trackers send them: chunked, and HTTP/1.0 with
// the body ending at close (opentracker's style).
func TestHTTPClientResponseShapes(t *testing.T) {
	body := "d8:completei1e10:incompletei2e8:intervali1800e5:peers12:" + strings.Repeat("\x7f\x00\x00\x01\x1a\xe1", 2) + "e"

	chunked := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body[:10])
		w.(http.Flusher).Flush() // forces chunked encoding
		_, _ = io.WriteString(w, body[10:])
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = chunked.Serve(ln) }()
	t.Cleanup(func() { _ = chunked.Close() })
	res, err := Run(context.Background(), Config{Mode: ModeHTTPKeepAlive, Target: ln.Addr().String(), Announces: 20, Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, int64(20), res.Announces, res.String())
	require.Equal(t, int64(40), res.PeersReceived)

	// HTTP/1.0, no Content-Length, close after each reply.
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	go func() {
		for {
			conn, err := raw.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				fmt.Fprintf(conn, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n%s", body)
			}()
		}
	}()
	res, err = Run(context.Background(), Config{Mode: ModeHTTPKeepAlive, Target: raw.Addr().String(), Announces: 20, Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, int64(20), res.Announces, res.String())
	require.Zero(t, res.Errors)
}

func TestHistogram(t *testing.T) {
	var h histogram
	require.Zero(t, h.quantile(0.5))
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	require.InEpsilon(t, float64(500*time.Microsecond), float64(h.quantile(0.5)), 0.04)
	require.InEpsilon(t, float64(990*time.Microsecond), float64(h.quantile(0.99)), 0.04)
	require.Equal(t, 1000*time.Microsecond, h.max())
	require.LessOrEqual(t, h.quantile(1), h.max())

	var other histogram
	other.record(time.Hour)
	h.merge(&other)
	require.Equal(t, time.Hour, h.max())
	for _, ns := range []uint64{0, 1, 31, 32, 33, 63, 64, 1000, 1 << 40, 1<<63 - 1} {
		b := bucketOf(ns)
		require.Less(t, b, len(h.counts))
		v := bucketValue(b)
		require.InDelta(t, float64(ns), float64(v), float64(ns)/30+1, "ns=%d", ns)
	}
}

// TestForwardedForGivesEachPeerItsIP: with ForwardedFor, a tracker that
// trusts loopback as a proxy sees each simulated peer at its own PeerIP.
func TestForwardedForGivesEachPeerItsIP(t *testing.T) {
	swarms := &countingSwarms{}
	h, err := bittorrent.NewHTTPServer(bittorrent.HTTPConfig{Addr: "127.0.0.1:0", Swarms: swarms, Logger: quiet(),
		ProxyHeader: "X-Forwarded-For", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, h.Stop()) })
	for _, mode := range []Mode{ModeHTTPKeepAlive, ModeHTTPClose} {
		before := len(swarms.seen())
		res, err := Run(context.Background(), Config{Mode: mode, Target: h.Addr(), Announces: 200, Concurrency: 2,
			Torrents: 5, Peers: 20, Seed: 7, ForwardedFor: true})
		require.NoError(t, err)
		require.Equal(t, int64(200), res.Announces, res.String())
		ips := map[netip.Addr]bool{}
		for _, a := range swarms.seen()[before:] {
			ip := a.Addr.Addr()
			require.True(t, ip.Is4() && !ip.IsLoopback() && !ip.IsUnspecified(), "%s", ip)
			ips[ip] = true
		}
		require.Greater(t, len(ips), 10, "peers claim distinct addresses")
		require.LessOrEqual(t, len(ips), 20)
	}
	require.Equal(t, PeerIP(7, 3), PeerIP(7, 3))
	require.NotEqual(t, PeerIP(7, 3), PeerIP(7, 4))
}

// TestLocalhostPrefersIPv4: "localhost" names both loopbacks on Debian
// (127.0.0.1 and ::1, in either order); the trackers under test listen on
// 127.0.0.1, so the IPv4 one is loaded whatever the resolver's order.
func TestLocalhostPrefersIPv4(t *testing.T) {
	v4, v6 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	require.Equal(t, v4, preferIPv4([]netip.Addr{v6, v4}))
	require.Equal(t, v4, preferIPv4([]netip.Addr{v4, v6}))
	require.Equal(t, v4, preferIPv4([]netip.Addr{netip.MustParseAddr("::ffff:127.0.0.1")}))
	require.Equal(t, v6, preferIPv4([]netip.Addr{v6}))
}

// StopFraction churns the swarms as clients do: a peer leaves with a
// stopped event now and then, and its next announce is a started one,
// never two stops in a row nor a start out of nowhere, over both
// protocols; a fraction out of range is refused.
func TestRunStopFractionChurnsPeers(t *testing.T) {
	swarms := &countingSwarms{}
	httpAddr, udpAddr := startTrackers(t, swarms)
	for _, mode := range []Mode{ModeUDP, ModeHTTPKeepAlive} {
		target := targetOf(mode, httpAddr, udpAddr)
		before := len(swarms.seen())
		// One worker, so each peer's announces arrive in the order sent.
		res, err := Run(context.Background(), Config{Mode: mode, Target: target, Sticky: true, Transfer: true,
			StopFraction: 0.2, Announces: 2000, Concurrency: 1, Torrents: 5, Peers: 50})
		require.NoError(t, err)
		require.Equal(t, int64(2000), res.Announces, res.String())
		last := map[bittorrent.PeerID]bittorrent.Event{}
		events := map[bittorrent.Event]int{}
		for _, a := range swarms.seen()[before:] {
			events[a.Event]++
			switch prev, seen := last[a.PeerID]; {
			case prev == bittorrent.EventStopped:
				require.Equal(t, bittorrent.EventStarted, a.Event, "%s: a stopped peer comes back started", mode)
			case a.Event == bittorrent.EventStarted:
				require.Failf(t, "started out of nowhere", "%s: peer %x (seen %v, last %v)", mode, a.PeerID, seen, prev)
			}
			last[a.PeerID] = a.Event
		}
		// A peer in its swarm stops with chance 0.2 and a stopped one always
		// starts: one announce in 6 is a stop (2000 announces: sd 0.008).
		stops := float64(events[bittorrent.EventStopped]) / 2000
		require.InDelta(t, 1.0/6, stops, 0.05, "%s: %v", mode, events)
		require.InDelta(t, events[bittorrent.EventStopped], events[bittorrent.EventStarted], 50, "%s: %v", mode, events)
		require.Zero(t, events[bittorrent.EventCompleted], "%s", mode)
	}
	for _, bad := range []float64{-0.1, 1, 2, math.NaN()} {
		_, err := Run(context.Background(), Config{Mode: ModeUDP, Target: udpAddr, StopFraction: bad})
		require.ErrorContains(t, err, "StopFraction", "%v", bad)
	}
}
