package btplugin_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// The flood tests: one address (127.0.0.1) floods the tracker the way
// issue 21's findings did, while an honest client on another loopback
// address (127.0.0.2) announces meanwhile. Each checks that Redis's memory
// stays bounded, that the honest client is served throughout, and that
// every refusal is answered with a failure reason and counted.

// eachMaster runs fn on the backend's one server or on every master.
func eachMaster(t testing.TB, b redistest.Backend, fn func(c *redis.Client)) {
	t.Helper()
	switch c := b.Client.(type) {
	case *redis.ClusterClient:
		// ForEachMaster calls back concurrently: collect, then run fn here.
		var mu sync.Mutex
		var masters []*redis.Client
		require.NoError(t, c.ForEachMaster(context.Background(), func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters = append(masters, c)
			return nil
		}))
		for _, m := range masters {
			fn(m)
		}
	case *redis.Client:
		fn(c)
	}
}

// infoSum adds a number from INFO section over every master.
func infoSum(t *testing.T, b redistest.Backend, section string, re *regexp.Regexp) int64 {
	t.Helper()
	var sum int64
	eachMaster(t, b, func(c *redis.Client) {
		info, err := c.Info(context.Background(), section).Result()
		require.NoError(t, err)
		if m := re.FindStringSubmatch(info); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			require.NoError(t, err)
			sum += n
		}
	})
	return sum
}

var (
	usedMemoryRE = regexp.MustCompile(`used_memory:(\d+)`)
	getCallsRE   = regexp.MustCompile(`cmdstat_get:calls=(\d+)`)
)

func dbSize(t *testing.T, b redistest.Backend) int64 {
	t.Helper()
	var n int64
	eachMaster(t, b, func(c *redis.Client) { n += c.DBSize(context.Background()).Val() })
	return n
}

// httpFrom is an HTTP client whose connections come from a loopback
// address of its own.
func httpFrom(t *testing.T, local string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// announceHTTP announces and returns the failure reason, "" on success.
func announceHTTP(t *testing.T, c *http.Client, base, passkey string, hash [20]byte, peer string, port uint16) string {
	t.Helper()
	q := wire.AnnounceQuery{InfoHash: hash, Port: port, Left: 100, Compact: true, NumWant: 5}
	copy(q.PeerID[:], peer)
	path := "/announce?"
	if passkey != "" {
		path = "/" + passkey + "/announce?"
	}
	resp, err := c.Get(base + path + string(wire.AppendAnnounceQuery(nil, &q)))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var body map[string]any
	require.NoError(t, bencode.Unmarshal(raw, &body), "%q", raw)
	if reason, ok := body["failure reason"].(string); ok {
		return reason
	}
	require.Contains(t, body, "interval", "%v", body)
	return ""
}

// udpPeer speaks BEP 15 from a loopback address of its own.
type udpPeer struct {
	t    *testing.T
	conn *net.UDPConn
	id   uint64
	tx   uint32
}

func udpFrom(t *testing.T, local, server string) *udpPeer {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp4", server)
	require.NoError(t, err)
	conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(local)}, raddr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	p := &udpPeer{t: t, conn: conn}
	resp := p.do(wire.UDPRequest{Action: wire.ActionConnect})
	require.Equal(t, wire.ActionConnect, resp.Action, resp.Message)
	p.id = resp.ConnectionID
	return p
}

func (p *udpPeer) do(req wire.UDPRequest) wire.UDPResponse {
	p.t.Helper()
	p.tx++
	req.TransactionID, req.ConnectionID = p.tx, p.id
	_, err := p.conn.Write(wire.AppendUDPRequest(nil, &req))
	require.NoError(p.t, err)
	buf := make([]byte, 2048)
	for {
		// The deadline only keeps a broken server from hanging the test.
		require.NoError(p.t, p.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, err := p.conn.Read(buf)
		require.NoError(p.t, err)
		var resp wire.UDPResponse
		require.NoError(p.t, wire.ParseUDPResponse(buf[:n], &resp))
		if resp.TransactionID == p.tx {
			return resp
		}
	}
}

// announce returns the error message, "" on success.
func (p *udpPeer) announce(hash [20]byte, peer string, port uint16) string {
	p.t.Helper()
	return p.announceWith("", hash, peer, port)
}

// announceWith announces with a passkey in BEP 41 URL data ("" for none).
func (p *udpPeer) announceWith(passkey string, hash [20]byte, peer string, port uint16) string {
	p.t.Helper()
	req := wire.UDPRequest{Action: wire.ActionAnnounce, InfoHash: hash, Left: 100, NumWant: 5, Port: port}
	if passkey != "" {
		req.URLData = []byte("/" + passkey + "/announce")
	}
	copy(req.PeerID[:], peer)
	resp := p.do(req)
	if resp.Action == wire.ActionError {
		return resp.Message
	}
	require.Equal(p.t, wire.ActionAnnounce, resp.Action)
	return ""
}

// listenerCounts are a Stats counter per listener, for one metric name.
func listenerCounts(t *testing.T, tr *btplugin.Tracker, name string) map[string]float64 {
	t.Helper()
	stats, err := tr.Stats(context.Background())
	require.NoError(t, err)
	out := map[string]float64{}
	for _, m := range stats.Metrics {
		if m.Name == name {
			out[m.Labels["listener"]] = m.Value
		}
	}
	return out
}

func hashOf(i int) [20]byte {
	var h [20]byte
	copy(h[:], fmt.Sprintf("flood-%014d", i))
	return h
}

// TestOpenModeAnnounceFloodIsBounded: one address announces new torrents
// with new peer ids as fast as it can, over HTTP and UDP; past its burst
// every announce is refused by the per-address rate before it reaches
// Redis, so Redis grows by the burst's records and no more, while another
// address is served throughout.
func TestOpenModeAnnounceFloodIsBounded(t *testing.T) {
	const burst, flood = 40, 5000
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		// A rate of one announce per 1000 s refills nothing while the test
		// runs, so what is admitted is the burst, whatever the machine's
		// speed (no timing in the test).
		tr, addrs := startTracker(t, b, fmt.Sprintf(`{"http":"127.0.0.1:0","udp4":"127.0.0.1:0","udp6":"",
			"limits":{"announce_rate":0.001,"announce_burst":%d}}`, burst))
		base := "http://" + addrs["http"]
		flooder, honest := httpFrom(t, "127.0.0.1"), httpFrom(t, "127.0.0.2")
		udpFlooder, udpHonest := udpFrom(t, "127.0.0.1", addrs["udp4"]), udpFrom(t, "127.0.0.2", addrs["udp4"])
		honestHash := hashOf(-1)
		// Warmed up first (scripts loaded, connection pools open), so what
		// Redis gains after is the flood's.
		require.Empty(t, announceHTTP(t, honest, base, "", honestHash, "-HO0001-honest000001", 6881))
		require.Empty(t, udpHonest.announce(honestHash, "-HO0001-honest000002", 6882))
		require.NoError(t, tr.Store().Flush(context.Background()))

		memBefore, keysBefore := infoSum(t, b, "memory", usedMemoryRE), dbSize(t, b)
		admitted, refused := 0, map[string]int{}
		for i := range flood {
			peer := fmt.Sprintf("-FL0001-%012d", i)
			var reason string
			if i%2 == 0 {
				reason = announceHTTP(t, flooder, base, "", hashOf(i), peer, 7000)
			} else {
				reason = udpFlooder.announce(hashOf(i), peer, 7000)
			}
			if reason == "" {
				admitted++
			} else {
				refused[reason]++
			}
			// Every 500th: the honest address has the same small rate, and
			// spends 2 + 20 of its burst of 40 in this test.
			if i%500 == 0 {
				require.Empty(t, announceHTTP(t, honest, base, "", honestHash, "-HO0001-honest000001", 6881), "the honest client is served over HTTP at %d", i)
				require.Empty(t, udpHonest.announce(honestHash, "-HO0001-honest000002", 6882), "and over UDP at %d", i)
			}
		}
		require.NoError(t, tr.Store().Flush(context.Background()))
		require.Equal(t, burst, admitted, "the burst, shared by HTTP and UDP")
		require.Equal(t, map[string]int{"too many announces from your address: announce less often and try again later": flood - burst}, refused)
		limited := listenerCounts(t, tr, "rate_limited_total")
		require.Equal(t, float64(flood-burst), limited["http"]+limited["udp"])

		// Redis holds the burst's torrents and peers, not the flood's: a
		// few keys each (torrent, swarm, deadlines, peer record, timeout,
		// due entry), and about 1.6 KB each (docs/limits-and-memory.md).
		grownKeys := dbSize(t, b) - keysBefore
		require.LessOrEqual(t, grownKeys, int64(10*(burst+2)), "keys grew by %d", grownKeys)
		grown := infoSum(t, b, "memory", usedMemoryRE) - memBefore
		t.Logf("%d flood announces, %d admitted: Redis grew by %d keys and %d bytes (unbounded, each would add about 1.6 KB: %d KB)",
			flood, admitted, grownKeys, grown, flood*1600/1024)
		require.Less(t, grown, int64(flood*1600/4), "Redis grew by %d bytes", grown)
	})
}

// TestOpenModePeersPerAddressAreBounded: one address makes new peer ids
// on one torrent (each a client restart) with no rate limit in the way:
// past max_peers_per_torrent they are refused in the announce script, and
// the swarm, its records and Redis's memory stay bounded.
func TestOpenModePeersPerAddressAreBounded(t *testing.T) {
	const maxPeers, flood = 3, 1000
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, fmt.Sprintf(`{"http":"127.0.0.1:0","udp4":"127.0.0.1:0","udp6":"",
			"limits":{"announce_rate":-1,"max_peers_per_torrent":%d}}`, maxPeers))
		base := "http://" + addrs["http"]
		flooder, honest := httpFrom(t, "127.0.0.1"), httpFrom(t, "127.0.0.2")
		udpFlooder := udpFrom(t, "127.0.0.1", addrs["udp4"])
		hash := hashOf(1)

		memBefore := infoSum(t, b, "memory", usedMemoryRE)
		admitted, refused := 0, map[string]int{}
		for i := range flood {
			peer := fmt.Sprintf("-FL0001-%012d", i)
			var reason string
			if i%2 == 0 {
				reason = announceHTTP(t, flooder, base, "", hash, peer, uint16(7000+i))
			} else {
				reason = udpFlooder.announce(hash, peer, uint16(7000+i))
			}
			if reason == "" {
				admitted++
			} else {
				refused[reason]++
			}
			if i%100 == 0 {
				require.Empty(t, announceHTTP(t, honest, base, "", hash, "-HO0001-honest000001", 6881), "the honest client is served at %d", i)
			}
		}
		require.Equal(t, maxPeers, admitted)
		require.Equal(t, map[string]int{fmt.Sprintf("your address has %d peers on this torrent already: stop one, or wait for old ones to time out", maxPeers): flood - maxPeers}, refused)
		info, err := tr.Store().Torrent(context.Background(), hash)
		require.NoError(t, err)
		require.EqualValues(t, maxPeers+1, info.Leechers, "the flooder's 3 and the honest client")

		stats, err := tr.Stats(context.Background())
		require.NoError(t, err)
		for _, m := range stats.Metrics {
			if m.Name == "peer_limit_refused_total" {
				require.Equal(t, float64(flood-maxPeers), m.Value)
			}
		}
		grown := infoSum(t, b, "memory", usedMemoryRE) - memBefore
		t.Logf("%d new peer ids from one address on one torrent, %d admitted: Redis grew by %d bytes", flood, admitted, grown)
		require.Less(t, grown, int64(flood*900/4), "Redis grew by %d bytes", grown)
	})
}

// TestPrivateModePasskeyGuessingIsBounded: one address guesses passkeys
// as fast as it can, over HTTP and UDP; after passkey_misses different
// misses it is refused without a lookup (Redis sees no GET for it),
// nothing is written, and a user on another address is served
// throughout. Passkeys shorter than 32 characters are refused unread too.
func TestPrivateModePasskeyGuessingIsBounded(t *testing.T) {
	const misses, guesses = 5, 2000
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, fmt.Sprintf(`{"mode":"private","http":"127.0.0.1:0","udp4":"127.0.0.1:0","udp6":"",
			"limits":{"announce_rate":-1,"passkey_misses":%d}}`, misses))
		ctx := context.Background()
		hash := hashOf(7)
		good := strings.Repeat("G", 32)
		store := tr.Store()
		require.NoError(t, store.RegisterTorrent(ctx, bittorrent.InfoHash(hash), "t7"))
		require.NoError(t, store.AddUser(ctx, good, "7"))
		require.NoError(t, store.AddClient(ctx, "-HO", "honest"))
		require.NoError(t, store.AddClient(ctx, "-FL", "flooder"))
		base := "http://" + addrs["http"]
		flooder, honest := httpFrom(t, "127.0.0.1"), httpFrom(t, "127.0.0.2")
		udpFlooder, udpHonest := udpFrom(t, "127.0.0.1", addrs["udp4"]), udpFrom(t, "127.0.0.2", addrs["udp4"])

		// Short passkeys: refused without a lookup, not counted as misses.
		getsBefore := infoSum(t, b, "commandstats", getCallsRE)
		for _, short := range []string{"a", strings.Repeat("b", 31)} {
			require.Equal(t, "malformed passkey: a passkey is 32-64 characters of A-Z a-z 0-9 _ -",
				announceHTTP(t, flooder, base, short, hash, "-FL0001-000000000000", 7000))
		}
		require.Equal(t, getsBefore, infoSum(t, b, "commandstats", getCallsRE))

		// The user's first announce writes its records; the counts start
		// after it.
		require.Empty(t, announceHTTP(t, honest, base, good, hash, "-HO0001-honest000001", 6881))
		require.NoError(t, store.Flush(ctx))
		memBefore, keysBefore := infoSum(t, b, "memory", usedMemoryRE), dbSize(t, b)
		getsBefore = infoSum(t, b, "commandstats", getCallsRE)
		refused := map[string]int{}
		for i := range guesses {
			guess := fmt.Sprintf("%032d", i)
			var reason string
			if i%2 == 0 {
				reason = announceHTTP(t, flooder, base, guess, hash, "-FL0001-000000000001", 7001)
			} else {
				reason = udpFlooder.announceWith(guess, hash, "-FL0001-000000000001", 7001)
			}
			require.NotEmpty(t, reason, "guess %d", i)
			refused[reason]++
			if i%100 == 0 {
				require.Empty(t, announceHTTP(t, honest, base, good, hash, "-HO0001-honest000001", 6881), "the user is served over HTTP at %d", i)
				require.Empty(t, udpHonest.announceWith(good, hash, "-HO0001-honest000001", 6881), "and over UDP at %d", i)
			}
		}
		// Even the right passkey is refused from the blocked address, and
		// a scrape with one too.
		require.Equal(t, "too many unknown passkeys from your address: try again later",
			announceHTTP(t, flooder, base, good, hash, "-FL0001-000000000002", 7002))

		require.Equal(t, map[string]int{
			"unknown passkey": misses,
			"too many unknown passkeys from your address: try again later": guesses - misses,
		}, refused)
		gets := infoSum(t, b, "commandstats", getCallsRE) - getsBefore
		// The user's passkey is looked up again each time its cache entry
		// is 10 s old; the guesses past the block never are.
		require.LessOrEqual(t, gets, int64(misses+10), "only the misses before the block were looked up")
		require.NoError(t, store.Flush(ctx))
		// The honest user's re-announces (not the guesses) mark its record
		// for the feed to the site: the torrent's feed rows and its feed
		// index entry may be new. Everything else must be as it was.
		require.NoError(t, b.Client.Del(ctx, btstore.FeedRowsKey(hash)).Err())
		require.NoError(t, b.Client.Del(ctx, btstore.FeedIndexKey(btstore.FeedShard(hash))).Err())
		require.Equal(t, keysBefore, dbSize(t, b), "guessing writes nothing")
		grown := infoSum(t, b, "memory", usedMemoryRE) - memBefore
		t.Logf("%d passkey guesses from one address: %d looked up, Redis grew by %d bytes", guesses, gets, grown)
		require.Less(t, grown, int64(256<<10))

		blocked, missed := listenerCounts(t, tr, "passkey_blocked_total"), listenerCounts(t, tr, "passkey_misses_total")
		require.Equal(t, float64(guesses-misses+1), blocked["http"]+blocked["udp"])
		require.Equal(t, float64(misses), missed["http"]+missed["udp"])
		require.Positive(t, blocked["udp"], "UDP guesses are blocked too")
	})
}
