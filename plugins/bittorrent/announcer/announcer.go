// Package announcer is the client side of the tracker protocol: scoring
// announces a torrent to the external trackers the operator registered
// for it, the way btstat did (left=0, a large numwant, event none), over
// UDP (BEP 15, with BEP 41 URL data) and HTTP (BEP 3/23), and reads how
// many peers each one gives.
//
// A tracker's reply is untrusted input: every request is bounded in time
// (Config.Timeout, across UDP's retries), an HTTP body is read to at most
// Config.MaxReply bytes, redirects are refused (an announce goes only
// where the operator registered it), proxies from the environment are not
// used, at most Config.MaxPeers peers are kept from one reply, and only
// addresses Config.Targets allows are dialled (by default no loopback,
// link-local or private ones: see internal/netguard).
//
// Each announce uses a random peer_id, key and port. The tracker puts
// the announcer itself into its swarm and usually hands it back in the
// reply, so peers on that round's port are left out of the count, and a
// best-effort "stopped" follows the announce to take it out again.
package announcer

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hoardproject/hoard/internal/netguard"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// Bounds of a registered tracker.
const (
	// MaxURLLen bounds an announce URL.
	MaxURLLen = 512
	// MaxTrackers bounds the external trackers of one torrent.
	MaxTrackers = 16
	// DefaultMaxPeers is a tracker's "max peers" when none is given
	// (btstat's default): the reply size that counts as full.
	DefaultMaxPeers = 50
	// MaxMaxPeers bounds a tracker's "max peers".
	MaxMaxPeers = 1000
)

// ErrInvalid marks a bad tracker URL or max peers.
var ErrInvalid = errors.New("invalid tracker")

// ParseURL checks an announce URL an operator registers: udp, http or
// https; a host and, for udp, a port; no user info or fragment; at most
// MaxURLLen bytes. The error says what is wrong.
func ParseURL(raw string) (*url.URL, error) {
	bad := func(why string) error {
		return fmt.Errorf("tracker %q: %s: %w", truncate(raw), why, ErrInvalid)
	}
	if raw == "" {
		return nil, bad("empty URL")
	}
	if len(raw) > MaxURLLen {
		return nil, bad(fmt.Sprintf("longer than %d bytes", MaxURLLen))
	}
	for _, c := range []byte(raw) {
		if !urlByte(c) {
			return nil, bad("only letters, digits and -._~:/?#[]@!$&'()*+,;=% may appear (percent-encode the rest)")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, bad("not a URL")
	}
	switch u.Scheme {
	case "udp", "http", "https":
	default:
		return nil, bad("the scheme must be udp, http or https")
	}
	if u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return nil, bad("no user info, fragment or opaque part allowed")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, bad("no host")
	}
	if u.Scheme == "udp" && port == "" {
		return nil, bad("a udp tracker needs host:port")
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, bad("the port must be 1-65535")
		}
	}
	if u.Scheme != "udp" && u.Path == "" {
		return nil, bad("an http tracker needs its announce path, e.g. /announce")
	}
	return u, nil
}

// urlByte says whether c may appear in a registered URL: RFC 3986's
// unreserved and reserved characters and '%'. Quotes, backslashes, spaces
// and control bytes never do, so a URL is its own length in a JSON result.
func urlByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~:/?#[]@!$&'()*+,;=%", c) >= 0
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Config bounds the announcer. Zero values take the defaults.
type Config struct {
	// Timeout bounds one tracker's announce, UDP retries included (15s).
	Timeout time.Duration
	// Retries is how many times a UDP exchange is sent again after its
	// share of Timeout passed without a reply (2).
	Retries int
	// NumWant is the numwant sent (200, btstat's).
	NumWant int
	// MaxReply bounds an HTTP reply's body (1 MiB).
	MaxReply int64
	// MaxPeers bounds the peers kept from one reply (1000); more are
	// only counted.
	MaxPeers int
	// Targets is where announces may go, checked on the address dialled
	// (after name resolution). The zero policy refuses loopback,
	// link-local, private, CGNAT, unspecified and multicast addresses.
	Targets netguard.Policy
}

// Client announces to external trackers. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a client.
func New(cfg Config) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	} else if cfg.Retries == 0 {
		cfg.Retries = 2
	}
	if cfg.NumWant <= 0 {
		cfg.NumWant = 200
	}
	if cfg.MaxReply <= 0 {
		cfg.MaxReply = 1 << 20
	}
	if cfg.MaxPeers <= 0 {
		cfg.MaxPeers = 1000
	}
	transport := &http.Transport{
		Proxy:                 nil, // never route an announce through the environment's proxy
		DialContext:           cfg.Targets.Dialer(cfg.Timeout).DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Client{cfg: cfg, http: &http.Client{
		Transport: transport,
		// An announce goes only where the operator registered it.
		CheckRedirect: func(*http.Request, []*http.Request) error { return errors.New("redirects are not followed") },
	}}
}

// Reply is what one announce found.
type Reply struct {
	// Peers are the peers the tracker gave (the announcer's own entry
	// left out), at most Config.MaxPeers of them.
	Peers []netip.AddrPort
	// Total counts every peer in the reply, those over MaxPeers too.
	Total    int
	Seeders  int64
	Leechers int64
}

// Error kinds, so callers can tell an unreachable tracker from one that
// answered badly.
var (
	ErrTimeout = errors.New("no reply in time")
	ErrRefused = errors.New("the tracker answered with an error")
	ErrBad     = errors.New("malformed reply")
)

type announce struct {
	hash   [20]byte
	peerID [20]byte
	key    uint32
	port   uint16
}

func newAnnounce(hash [20]byte) announce {
	a := announce{hash: hash}
	var b [26]byte
	_, _ = rand.Read(b[:])
	copy(a.peerID[:], "-HO0001-")
	copy(a.peerID[8:], b[:12])
	a.key = binary.BigEndian.Uint32(b[20:24])
	a.port = 49152 + binary.BigEndian.Uint16(b[24:26])%16384
	return a
}

// Announce announces hash to the tracker at rawURL (checked with
// ParseURL) and returns the peers it gave.
func (c *Client) Announce(ctx context.Context, rawURL string, hash [20]byte) (Reply, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return Reply{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	a := newAnnounce(hash)
	var r Reply
	if u.Scheme == "udp" {
		r, err = c.udp(ctx, u, a)
	} else {
		r, err = c.httpAnnounce(ctx, u, a)
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrRefused) || errors.Is(err, ErrBad):
		err = fmt.Errorf("%s: %w", truncate(rawURL), err)
	case errors.Is(err, ErrTimeout) || ctx.Err() != nil || isNetTimeout(err):
		err = fmt.Errorf("%s: %w after %s", truncate(rawURL), ErrTimeout, c.cfg.Timeout)
	default:
		err = fmt.Errorf("%s: %w", truncate(rawURL), err)
	}
	return r, err
}

// isNetTimeout: the HTTP transport's own timeouts (dial, headers) may
// fire a moment before the context's deadline.
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// keepPeers filters the announcer's own entry (its port of this round)
// out of a reply's peers, bounded by MaxPeers.
func (c *Client) keepPeers(r *Reply, peers []netip.AddrPort, self uint16) {
	for _, p := range peers {
		if p.Port() == self || !p.Addr().IsValid() {
			continue
		}
		r.Total++
		if len(r.Peers) < c.cfg.MaxPeers {
			r.Peers = append(r.Peers, p)
		}
	}
}

// ---- HTTP

func (c *Client) httpURL(u *url.URL, a announce, event wire.Event) string {
	q := wire.AnnounceQuery{InfoHash: a.hash, PeerID: a.peerID, Port: a.port, Left: 0, Event: event,
		Compact: true, NumWant: c.cfg.NumWant, Key: fmt.Sprintf("%08x", a.key)}
	if event == wire.EventStopped {
		q.NumWant = 0
	}
	query := string(wire.AppendAnnounceQuery(nil, &q))
	v := *u
	if v.RawQuery != "" {
		v.RawQuery += "&" + query
	} else {
		v.RawQuery = query
	}
	return v.String()
}

func (c *Client) httpAnnounce(ctx context.Context, u *url.URL, a announce) (Reply, error) {
	body, err := c.httpGet(ctx, c.httpURL(u, a, wire.EventNone))
	if err != nil {
		return Reply{}, err
	}
	var resp wire.HTTPAnnounceResponse
	r, err := c.readHTTP(body, &resp, a.port)
	if err == nil {
		// Take the announcer back out of the tracker's swarm; the reply
		// does not matter.
		_, _ = c.httpGet(ctx, c.httpURL(u, a, wire.EventStopped))
	}
	return r, err
}

// readHTTP reads an HTTP announce body.
func (c *Client) readHTTP(body []byte, resp *wire.HTTPAnnounceResponse, self uint16) (Reply, error) {
	resp.Peers = resp.Peers[:0]
	// Every peer is read (the body is bounded by MaxReply), so the
	// announcer's own entry is left out wherever it is; keepPeers caps.
	if err := wire.ParseHTTPAnnounceResponse(body, resp, 0); err != nil {
		return Reply{}, fmt.Errorf("%w: %w", ErrBad, err)
	}
	if resp.FailureReason != "" {
		return Reply{}, fmt.Errorf("%w: %q", ErrRefused, truncate(resp.FailureReason))
	}
	r := Reply{Seeders: resp.Complete, Leechers: resp.Incomplete}
	c.keepPeers(&r, resp.Peers, self)
	return r, nil
}

func (c *Client) httpGet(ctx context.Context, target string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBad, err)
	}
	req.Header.Set("User-Agent", "hoard-scoring/1")
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error repeats the whole announce URL (its query is long):
		// the caller names the tracker already, so keep the cause, which
		// must fit the stored error (a refused address says why).
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		var oerr *net.OpError
		if errors.As(err, &oerr) && errors.Is(err, netguard.ErrRefused) {
			err = oerr.Err
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxReply+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > c.cfg.MaxReply {
		return nil, fmt.Errorf("%w: the reply is over %d bytes", ErrBad, c.cfg.MaxReply)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: HTTP %d", ErrRefused, resp.StatusCode)
	}
	return body, nil
}

// ---- UDP (BEP 15)

// maxUDPPacket is the largest datagram read.
const maxUDPPacket = 64 << 10

func (c *Client) udp(ctx context.Context, u *url.URL, a announce) (Reply, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	if err != nil || len(addrs) == 0 {
		return Reply{}, fmt.Errorf("resolving %s: %w", u.Hostname(), err)
	}
	// The address checked is the one dialled: no second lookup can
	// answer differently in between.
	if err := c.cfg.Targets.Check(addrs[0]); err != nil {
		return Reply{}, err
	}
	port, _ := strconv.Atoi(u.Port())
	raddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)))
	conn, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return Reply{}, err
	}
	defer conn.Close()
	v6 := raddr.IP.To4() == nil
	deadline, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	// BEP 41: the path and query go along as URL data (a passkey in the
	// path, say).
	urlData := u.EscapedPath()
	if u.RawQuery != "" {
		urlData += "?" + u.RawQuery
	}
	attempts := c.cfg.Retries + 1
	buf := make([]byte, maxUDPPacket)
	var lastErr error
	for attempt := range attempts {
		// Each attempt gets an equal share of what is left.
		share := time.Until(deadline) / time.Duration(attempts-attempt)
		attemptDeadline := time.Now().Add(share)
		var reply Reply
		reply, lastErr = c.udpExchange(conn, buf, a, urlData, v6, attemptDeadline)
		if lastErr == nil {
			return reply, nil
		}
		if errors.Is(lastErr, ErrRefused) || errors.Is(lastErr, ErrBad) || ctx.Err() != nil {
			return Reply{}, lastErr
		}
	}
	return Reply{}, lastErr
}

// udpExchange is one connect + announce (+ a stopped, its answer waited
// for briefly), all before deadline.
func (c *Client) udpExchange(conn *net.UDPConn, buf []byte, a announce, urlData string, v6 bool, deadline time.Time) (Reply, error) {
	tx := randUint32()
	if _, err := conn.Write(wire.AppendUDPRequest(nil, &wire.UDPRequest{Action: wire.ActionConnect, TransactionID: tx})); err != nil {
		return Reply{}, err
	}
	var resp wire.UDPResponse
	if err := readUDP(conn, buf, deadline, tx, wire.ActionConnect, &resp); err != nil {
		return Reply{}, err
	}
	connID := resp.ConnectionID
	req := wire.UDPRequest{ConnectionID: connID, Action: wire.ActionAnnounce, TransactionID: randUint32(),
		InfoHash: a.hash, PeerID: a.peerID, Left: 0, Event: wire.EventNone, Key: a.key,
		NumWant: int32(c.cfg.NumWant), Port: a.port, URLData: []byte(urlData)}
	if _, err := conn.Write(wire.AppendUDPRequest(nil, &req)); err != nil {
		return Reply{}, err
	}
	if err := readUDP(conn, buf, deadline, req.TransactionID, wire.ActionAnnounce, &resp); err != nil {
		return Reply{}, err
	}
	r, err := c.readUDPAnnounce(&resp, v6, a.port)
	if err != nil {
		return Reply{}, err
	}
	req.Event, req.NumWant, req.TransactionID = wire.EventStopped, 0, randUint32()
	if _, err := conn.Write(wire.AppendUDPRequest(nil, &req)); err == nil {
		// Wait a little for its answer, so the next round's announce
		// (another socket, maybe another of the tracker's threads) does
		// not find this one's entry still there; a tracker that does not
		// answer a stopped costs at most stopWait.
		_ = readUDP(conn, buf, minTime(deadline, time.Now().Add(stopWait)), req.TransactionID, wire.ActionAnnounce, &resp)
	}
	return r, nil
}

// stopWait bounds the wait for a stopped's answer.
const stopWait = 500 * time.Millisecond

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// readUDPAnnounce turns a parsed announce reply into a Reply.
func (c *Client) readUDPAnnounce(resp *wire.UDPResponse, v6 bool, self uint16) (Reply, error) {
	// A datagram holds at most 64 KiB: every peer is read.
	peers, err := wire.ParseCompactPeers(nil, resp.Peers, v6)
	if err != nil {
		return Reply{}, fmt.Errorf("%w: %w", ErrBad, err)
	}
	r := Reply{Seeders: int64(max(resp.Seeders, 0)), Leechers: int64(max(resp.Leechers, 0))}
	c.keepPeers(&r, peers, self)
	return r, nil
}

// readUDP waits for the reply to tx: packets of other transactions (a
// late reply to an earlier attempt, or noise) are dropped, an error
// packet for tx is ErrRefused, and a reply of another action ErrBad.
func readUDP(conn *net.UDPConn, buf []byte, deadline time.Time, tx uint32, want wire.Action, resp *wire.UDPResponse) error {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return err
	}
	for {
		n, err := conn.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return ErrTimeout
			}
			return err
		}
		if err := checkUDPReply(buf[:n], tx, want, resp); !errors.Is(err, errOtherTransaction) {
			return err
		}
	}
}

var errOtherTransaction = errors.New("a reply to another transaction")

// checkUDPReply parses a datagram and checks it answers tx with want.
func checkUDPReply(packet []byte, tx uint32, want wire.Action, resp *wire.UDPResponse) error {
	if len(packet) == 8 && want == wire.ActionAnnounce && binary.BigEndian.Uint32(packet[4:8]) == tx &&
		wire.Action(binary.BigEndian.Uint32(packet[0:4])) == wire.ActionAnnounce {
		// opentracker's answer for a torrent it does not track (whitelist
		// mode): the header alone.
		return fmt.Errorf("%w: an empty announce reply (the tracker does not track this torrent)", ErrRefused)
	}
	if err := wire.ParseUDPResponse(packet, resp); err != nil {
		if len(packet) >= 8 && binary.BigEndian.Uint32(packet[4:8]) != tx {
			return errOtherTransaction
		}
		return fmt.Errorf("%w: %w", ErrBad, err)
	}
	if resp.TransactionID != tx {
		return errOtherTransaction
	}
	switch resp.Action {
	case want:
		return nil
	case wire.ActionError:
		return fmt.Errorf("%w: %q", ErrRefused, truncate(strings.ToValidUTF8(resp.Message, "?")))
	}
	return fmt.Errorf("%w: action %d answering action %d", ErrBad, resp.Action, want)
}

func randUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}
