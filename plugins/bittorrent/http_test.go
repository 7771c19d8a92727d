package bittorrent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

var (
	testHash  = InfoHash{0xaa, 0x00, '&', '%', 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	testHash2 = InfoHash{0x01, 0x02}
	testPeer  = PeerID([]byte("-qB4520-abcdefghijkl"))
	otherPeer = PeerID([]byte("-TR3000-000000000001"))
	v6Peer    = PeerID([]byte("-TR3000-000000000006"))
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startHTTP runs an HTTP listener on loopback and returns its base URL.
func startHTTP(t *testing.T, swarms Swarms, edit func(*HTTPConfig)) (*HTTPServer, string) {
	t.Helper()
	cfg := HTTPConfig{Addr: "127.0.0.1:0", Swarms: swarms, Logger: quietLogger()}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := NewHTTPServer(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	return srv, "http://" + srv.Addr()
}

// announceQuery is a valid announce query for testPeer on testHash.
func announceQuery(edit func(*wire.AnnounceQuery)) string {
	q := wire.AnnounceQuery{InfoHash: testHash, PeerID: testPeer, Port: 6881, Left: 100, Compact: true, NumWant: -1}
	if edit != nil {
		edit(&q)
	}
	return string(wire.AppendAnnounceQuery(nil, &q))
}

// get fetches url and decodes the bencoded body.
func get(t *testing.T, url string, headers ...string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	return decode(t, body)
}

func failure(t *testing.T, url string) string {
	t.Helper()
	out := get(t, url)
	require.Contains(t, out, "failure reason", "%v", out)
	return out["failure reason"].(string)
}

func TestHTTPAnnounceURLShapes(t *testing.T) {
	const pk = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		name, path, query string
	}{
		{"passkey first", "/" + pk + "/announce", ""},
		{"passkey last", "/announce/" + pk, ""},
		{"passkey in query", "/announce", "passkey=" + pk + "&"},
		{"passkey in query after the rest", "/announce", "&passkey=" + pk},
		{"same passkey twice", "/" + pk + "/announce", "passkey=" + pk + "&"},
	}
	for _, private := range []bool{false, true} {
		fake := newFakeSwarms()
		_, base := startHTTP(t, fake, func(c *HTTPConfig) { c.RequirePasskey = private })
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				q := announceQuery(nil)
				if strings.HasPrefix(tc.query, "&") {
					q += tc.query
				} else {
					q = tc.query + q
				}
				out := get(t, base+tc.path+"?"+q)
				require.NotContains(t, out, "failure reason")
				require.Equal(t, pk, fake.lastAnnounce().Passkey)
			})
		}
		if private {
			require.Equal(t, "this tracker requires a passkey in the announce URL", failure(t, base+"/announce?"+announceQuery(nil)))
			require.Equal(t, "this tracker requires a passkey in the announce URL", failure(t, base+"/scrape?info_hash=x"+strings.Repeat("y", 19)))
		} else {
			out := get(t, base+"/announce?"+announceQuery(nil))
			require.NotContains(t, out, "failure reason")
			require.Empty(t, fake.lastAnnounce().Passkey, "open mode needs no passkey")
		}
		require.Equal(t, wire.ErrConflictingPasskeys.Error(),
			failure(t, base+"/"+pk+"/announce?passkey=other&"+announceQuery(nil)))
	}
}

func TestHTTPAnnounceRequestFromSocket(t *testing.T) {
	fake := newFakeSwarms()
	_, base := startHTTP(t, fake, nil)
	get(t, base+"/announce?"+announceQuery(func(q *wire.AnnounceQuery) {
		q.Uploaded, q.Downloaded, q.Left = 1, 2, 3
		q.Event = wire.EventStarted
		q.Key = "k3y"
		q.IP = netip.MustParseAddr("203.0.113.9") // ignored by default
		q.Port = 51413
	}))
	require.Equal(t, AnnounceRequest{
		InfoHash: testHash, PeerID: testPeer,
		Addr:     netip.MustParseAddrPort("127.0.0.1:51413"),
		Uploaded: 1, Downloaded: 2, Left: 3, Event: EventStarted,
		NumWant: DefaultNumWant, Key: "k3y",
	}, fake.lastAnnounce())
}

func TestHTTPAnnounceTrustClientIP(t *testing.T) {
	fake := newFakeSwarms()
	_, base := startHTTP(t, fake, func(c *HTTPConfig) { c.TrustClientIP = true })
	get(t, base+"/announce?"+announceQuery(func(q *wire.AnnounceQuery) { q.IP = netip.MustParseAddr("2001:db8::9") }))
	require.Equal(t, netip.MustParseAddrPort("[2001:db8::9]:6881"), fake.lastAnnounce().Addr)
	get(t, base+"/announce?"+announceQuery(nil))
	require.Equal(t, netip.MustParseAddrPort("127.0.0.1:6881"), fake.lastAnnounce().Addr, "no ip parameter: the socket's")
}

func TestHTTPProxyHeader(t *testing.T) {
	fake := newFakeSwarms()
	_, trusted := startHTTP(t, fake, func(c *HTTPConfig) {
		c.ProxyHeader = "x-forwarded-for"
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	get(t, trusted+"/announce?"+announceQuery(nil), "X-Forwarded-For", "198.51.100.1, 192.0.2.44")
	require.Equal(t, netip.MustParseAddrPort("192.0.2.44:6881"), fake.lastAnnounce().Addr, "the proxy's own entry is the last")

	before := fake.announceCount()
	require.Equal(t, internalFailure, failure(t, trusted+"/announce?"+announceQuery(nil)), "a trusted proxy must send the header")
	require.Equal(t, before, fake.announceCount())

	_, untrusted := startHTTP(t, fake, func(c *HTTPConfig) {
		c.ProxyHeader = "X-Real-IP"
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	})
	get(t, untrusted+"/announce?"+announceQuery(nil), "X-Real-IP", "192.0.2.44")
	require.Equal(t, netip.MustParseAddrPort("127.0.0.1:6881"), fake.lastAnnounce().Addr, "not from a trusted proxy")

	_, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: fake, ProxyHeader: "X-Real-IP"})
	require.ErrorContains(t, err, "TrustedProxies")
}

func TestHTTPNumWant(t *testing.T) {
	fake := newFakeSwarms()
	_, base := startHTTP(t, fake, func(c *HTTPConfig) { c.DefaultNumWant = 30; c.MaxNumWant = 80 })
	for _, tc := range []struct {
		numWant int
		event   wire.Event
		want    int
	}{
		{-1, wire.EventNone, 30},
		{0, wire.EventNone, 0},
		{10, wire.EventNone, 10},
		{500, wire.EventNone, 80},
		{50, wire.EventStopped, 0},
	} {
		get(t, base+"/announce?"+announceQuery(func(q *wire.AnnounceQuery) { q.NumWant = tc.numWant; q.Event = tc.event }))
		require.Equal(t, tc.want, fake.lastAnnounce().NumWant, "numwant=%d event=%v", tc.numWant, tc.event)
	}
}

func TestHTTPAnnounceCompactPeers(t *testing.T) {
	fake := newFakeSwarms()
	fake.addPeer(testHash, otherPeer, "192.0.2.1:6881", true)
	fake.addPeer(testHash, v6Peer, "[2001:db8::1]:51413", false)
	_, base := startHTTP(t, fake, func(c *HTTPConfig) { c.Interval = time.Hour; c.MinInterval = 10 * time.Minute })
	out := get(t, base+"/announce?"+announceQuery(nil))
	require.Equal(t, map[string]any{
		"complete":     int64(1),
		"incomplete":   int64(2), // the other leecher and us
		"downloaded":   int64(0),
		"interval":     int64(3600),
		"min interval": int64(600),
		"peers":        "\xc0\x00\x02\x01\x1a\xe1",
		"peers6":       "\x20\x01\x0d\xb8" + strings.Repeat("\x00", 11) + "\x01\xc8\xd5",
	}, out)

	fake.set(func(f *fakeSwarms) { f.interval = 5 * time.Minute })
	out = get(t, base+"/announce?"+announceQuery(nil))
	require.Equal(t, int64(300), out["interval"], "the store may set its own interval")
	require.Equal(t, int64(600), out["min interval"])
}

func TestHTTPAnnounceDictPeers(t *testing.T) {
	fake := newFakeSwarms()
	fake.addPeer(testHash, otherPeer, "192.0.2.1:6881", true)
	fake.addPeer(testHash, v6Peer, "[2001:db8::1]:51413", false)
	_, base := startHTTP(t, fake, nil)
	out := get(t, base+"/announce?"+announceQuery(func(q *wire.AnnounceQuery) { q.Compact = false }))
	require.Equal(t, []any{
		map[string]any{"ip": "192.0.2.1", "peer id": string(otherPeer[:]), "port": int64(6881)},
		map[string]any{"ip": "2001:db8::1", "peer id": string(v6Peer[:]), "port": int64(51413)},
	}, out["peers"])
	require.NotContains(t, out, "peers6")

	out = get(t, base+"/announce?"+announceQuery(func(q *wire.AnnounceQuery) { q.Compact = false; q.NoPeerID = true }))
	require.Equal(t, map[string]any{"ip": "192.0.2.1", "port": int64(6881)}, out["peers"].([]any)[0])
}

func TestHTTPFailureReasons(t *testing.T) {
	fake := newFakeSwarms()
	fake.passkeys = map[string]bool{"good": true}
	fake.registered = map[InfoHash]bool{testHash2: true}
	srv, base := startHTTP(t, fake, nil)

	require.Equal(t, "unknown passkey", failure(t, base+"/bad/announce?"+announceQuery(nil)))
	require.Equal(t, "unregistered torrent", failure(t, base+"/good/announce?"+announceQuery(nil)))
	require.Equal(t, "unknown passkey", failure(t, base+"/bad/scrape?info_hash="+string(wire.AppendQueryEscape(nil, string(testHash[:])))))

	require.Equal(t, wire.ErrBadInfoHash.Error(), failure(t, base+"/good/announce?info_hash=short&peer_id=x"))
	require.Equal(t, wire.ErrMissingPort.Error(),
		failure(t, base+"/good/announce?"+strings.Replace(announceQuery(nil), "port=6881", "pert=1", 1)))
	require.Equal(t, wire.ErrBadLeft.Error(),
		failure(t, base+"/good/announce?"+strings.Replace(announceQuery(nil), "left=100", "left=-1", 1)))

	fake.set(func(f *fakeSwarms) { f.fail = errors.New("redis: connection refused at 10.1.2.3:6379") })
	reason := failure(t, base+"/good/announce?"+announceQuery(nil))
	require.Equal(t, internalFailure, reason)
	require.NotContains(t, reason, "redis", "internals stay in the log")

	stats := srv.Stats()
	require.Equal(t, uint64(3), stats.Malformed)
	require.Equal(t, uint64(3), stats.Refused)
	require.Equal(t, uint64(1), stats.InternalErrors)
	require.Zero(t, stats.Announces)
}

func TestHTTPScrape(t *testing.T) {
	fake := newFakeSwarms()
	fake.addPeer(testHash, otherPeer, "192.0.2.1:6881", true)
	fake.addPeer(testHash, v6Peer, "[2001:db8::1]:51413", false)
	fake.addPeer(testHash2, otherPeer, "192.0.2.1:6881", false)
	fake.downloaded[testHash] = 7
	_, base := startHTTP(t, fake, nil)
	h1 := string(wire.AppendQueryEscape(nil, string(testHash[:])))
	h2 := string(wire.AppendQueryEscape(nil, string(testHash2[:])))
	unknown := strings.Repeat("z", 20)

	for _, path := range []string{"/scrape?", "/pk/scrape?", "/scrape/pk?", "/scrape?passkey=pk&"} {
		out := get(t, base+path+"info_hash="+h1+"&info_hash="+h2+"&info_hash="+h1+"&info_hash="+unknown)
		require.Equal(t, map[string]any{"files": map[string]any{
			string(testHash[:]):  map[string]any{"complete": int64(1), "incomplete": int64(1), "downloaded": int64(7)},
			string(testHash2[:]): map[string]any{"complete": int64(0), "incomplete": int64(1), "downloaded": int64(0)},
			unknown:              map[string]any{"complete": int64(0), "incomplete": int64(0), "downloaded": int64(0)},
		}}, out, path)
		scrape := fake.lastScrape()
		require.Len(t, scrape.hashes, 3, "duplicates are asked once")
		if path == "/scrape?" {
			require.Empty(t, scrape.passkey)
		} else {
			require.Equal(t, "pk", scrape.passkey, path)
		}
	}
	require.Contains(t, failure(t, base+"/scrape"), "at least one info_hash")
	require.Equal(t, wire.ErrBadInfoHash.Error(), failure(t, base+"/scrape?info_hash=abc"))
}

func TestHTTPScrapeLimit(t *testing.T) {
	fake := newFakeSwarms()
	_, base := startHTTP(t, fake, func(c *HTTPConfig) { c.MaxScrapeHashes = 2 })
	var q strings.Builder
	for i := range 5 {
		q.WriteString("&info_hash=" + strings.Repeat(string(rune('a'+i)), 20))
	}
	out := get(t, base+"/scrape?"+q.String()[1:])
	require.Len(t, out["files"], 2)
}

// fetch sends one request and returns the status, headers and body.
func fetch(t *testing.T, method, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, body
}

func TestHTTPRouting(t *testing.T) {
	fake := newFakeSwarms()
	srv, base := startHTTP(t, fake, nil)

	// Paths with nothing to do with the tracker stay a plain 404, whatever
	// the method.
	for _, path := range []string{"/", "/stats", "/favicon.ico", "/a/b"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			status, _, body := fetch(t, method, base+path)
			require.Equal(t, http.StatusNotFound, status, "%s %s", method, path)
			require.NotContains(t, string(body), "failure reason")
		}
	}

	// A path meant for the tracker that does not parse gets a failure
	// reason a client shows its user.
	q := "?" + announceQuery(nil)
	for path, reason := range map[string]string{
		"/announce/pk/":                       failureTrailingSlash,
		"/pk/announce/":                       failureTrailingSlash,
		"/pk/scrape/":                         failureTrailingSlash,
		"/announce/%7Bpk%7D":                  failureBadPathKey,
		"/pk%20x/announce":                    failureBadPathKey,
		"/scrape/" + strings.Repeat("k", 129): failureBadPathKey,
		"/announce.php":                       failureUnknownPath,
		"/a/b/announce":                       failureUnknownPath,
		"/Announce":                           failureUnknownPath,
		"/announce/a/b":                       failureUnknownPath,
		"/tracker/SCRAPE":                     failureUnknownPath,
	} {
		require.Equal(t, reason, failure(t, base+path+q), path)
	}

	// Another method on a tracker path: 405 with Allow, and a bencoded body.
	for _, path := range []string{"/announce", "/pk/scrape", "/announce.php"} {
		status, header, body := fetch(t, http.MethodPost, base+path+q)
		require.Equal(t, http.StatusMethodNotAllowed, status, path)
		require.Equal(t, "GET, HEAD", header.Get("Allow"))
		require.Equal(t, map[string]any{"failure reason": failureMethod}, decode(t, body))
	}
	require.Empty(t, fake.announces, "nothing reached the swarms")
	require.Equal(t, uint64(11+3), srv.Stats().Malformed)

	// HEAD answers like a GET would, but records nothing.
	for _, path := range []string{"/announce", "/pk/announce", "/scrape"} {
		status, header, body := fetch(t, http.MethodHead, base+path+q)
		require.Equal(t, http.StatusOK, status, path)
		require.Equal(t, "text/plain; charset=utf-8", header.Get("Content-Type"))
		require.Empty(t, body)
	}
	status, header, _ := fetch(t, http.MethodHead, base+"/announce/pk/"+q)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, strconv.Itoa(len(wire.AppendFailure(nil, failureTrailingSlash))), header.Get("Content-Length"))
	require.Empty(t, fake.announces, "HEAD is not an announce")
	require.Empty(t, fake.scrapes, "nor a scrape")
	stats := srv.Stats()
	require.Zero(t, stats.Announces)
	require.Zero(t, stats.Scrapes)

	// The same GET is an announce.
	get(t, base+"/announce"+q)
	require.Len(t, fake.announces, 1)
}

func TestHTTPLifecycle(t *testing.T) {
	fake := newFakeSwarms()
	srv, err := NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, srv.Stop(), "Stop before Start")

	srv, err = NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: fake, Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	require.Error(t, srv.Start(context.Background()), "already started")
	addr := srv.Addr()
	require.NoError(t, srv.Stop())
	require.NoError(t, srv.Stop(), "Stop twice")
	_, err = http.Get("http://" + addr + "/announce")
	require.Error(t, err, "the listener is closed")

	_, err = NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0"})
	require.ErrorContains(t, err, "Swarms")
	_, err = NewHTTPServer(HTTPConfig{Addr: "127.0.0.1:0", Swarms: fake, AnnouncePolicy: AnnouncePolicy{Interval: time.Minute, MinInterval: time.Hour}})
	require.ErrorContains(t, err, "MinInterval")
}

// TestStoreFailuresAreCountedNotShouted: while the store fails (Redis
// down), 1,000 announces are each answered with the internal failure
// reason, counted as internal errors, and logged once.
func TestStoreFailuresAreCountedNotShouted(t *testing.T) {
	fake := newFakeSwarms()
	fake.set(func(f *fakeSwarms) { f.fail = errors.New("redis: connection refused") })
	var mu sync.Mutex
	var logs strings.Builder
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	srv, base := startHTTP(t, fake, func(c *HTTPConfig) { c.Logger = logger })
	for range 1000 {
		require.Equal(t, internalFailure, failure(t, base+"/announce?"+announceQuery(nil)))
	}
	require.Equal(t, uint64(1000), srv.Stats().InternalErrors)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "swarm store failed"), logs.String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
