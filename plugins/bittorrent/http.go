package bittorrent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hoardproject/hoard/internal/http1"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// HTTPConfig configures the HTTP announce/scrape listener.
type HTTPConfig struct {
	AnnouncePolicy
	// Addr is the listen address, e.g. "0.0.0.0:6969" or "127.0.0.1:0".
	Addr   string
	Swarms Swarms
	Logger *slog.Logger
	// MaxScrapeHashes caps the info_hashes answered per scrape; the rest
	// are ignored, as opentracker does (default 64).
	MaxScrapeHashes int
	// FullScrape serves scrapes without an info_hash when its Source is
	// set (off by default).
	FullScrape FullScrapeConfig
	// ProxyHeader names a header carrying the client address, e.g.
	// "X-Forwarded-For" or "X-Real-IP". It is believed only on connections
	// from TrustedProxies, and then its last entry is used (the one the
	// trusted proxy appended). Empty uses the socket address.
	ProxyHeader    string
	TrustedProxies []netip.Prefix
	// Timeouts; zero picks the default.
	ReadHeaderTimeout time.Duration // default 5s
	WriteTimeout      time.Duration // default 10s
	IdleTimeout       time.Duration // keep-alive, default 60s
}

// HTTPServer answers HTTP announces and scrapes (BEP 3, 7, 23, 48) under
// /announce, /<passkey>/announce, /announce/<passkey> and
// /announce?passkey=…, and the same for scrape. Start it with Start and
// stop it with Stop. It speaks HTTP/1.0 and 1.1 itself, on the
// connection loop hoard's warrior listener shares (http1.Server,
// httpconn.go).
type HTTPServer struct {
	cfg         HTTPConfig
	proxyHeader string // cfg.ProxyHeader, matched ignoring case
	stats       listenerCounters
	full        *fullScrape // nil: full scrapes are refused
	// batch joins concurrent announces into one store call when the
	// store batches (BatchAnnouncer); nil: each goes to Announce.
	batch *httpBatcher
	// conns accepts and serves the connections (httpconn.go).
	conns *http1.Server[connState]

	mu       sync.Mutex
	listener net.Listener
	stopped  bool
}

// NewHTTPServer checks cfg and fills in its defaults.
func NewHTTPServer(cfg HTTPConfig) (*HTTPServer, error) {
	if cfg.Swarms == nil {
		return nil, errors.New("bittorrent http: Swarms is required")
	}
	if cfg.Addr == "" {
		return nil, errors.New("bittorrent http: Addr is required")
	}
	if cfg.ProxyHeader != "" && len(cfg.TrustedProxies) == 0 {
		return nil, errors.New("bittorrent http: ProxyHeader needs TrustedProxies, or any client could spoof its address")
	}
	if cfg.ProxyHeader != "" && !validHeaderName(cfg.ProxyHeader) {
		return nil, fmt.Errorf("bittorrent http: ProxyHeader %q is not a header name", cfg.ProxyHeader)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.AnnouncePolicy = cfg.AnnouncePolicy.withDefaults()
	if err := cfg.AnnouncePolicy.validate(); err != nil {
		return nil, fmt.Errorf("bittorrent http: %w", err)
	}
	if cfg.MaxScrapeHashes <= 0 {
		cfg.MaxScrapeHashes = DefaultMaxScrapeCount
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 5 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	s := &HTTPServer{cfg: cfg, proxyHeader: cfg.ProxyHeader, full: newFullScrape(cfg.FullScrape)}
	s.conns = http1.NewServer(http1.ServerConfig{
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadHeaderTimeout, // no bodies are read
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHead:           maxHeadBytes,
		Logger:            cfg.Logger,
		Name:              "bittorrent http",
		// Announces and scrapes are GETs without a body, sent in one
		// write: answered and closed without net's per-connection work.
		AcceptRaw: true,
		AcceptEnded: func(err error) {
			cfg.Logger.Error("bittorrent http: accept failed for good; no more connections are served", "err", err)
		},
	}, httpHandler{s})
	if b, ok := cfg.Swarms.(BatchAnnouncer); ok {
		s.batch = newHTTPBatcher(b, httpBatchLeaders, httpBatchMax)
	}
	return s, nil
}

func validHeaderName(name string) bool {
	for i := 0; i < len(name); i++ {
		if !http1.TokenByte(name[i]) {
			return false
		}
	}
	return name != ""
}

// Start listens and serves in the background; it returns once the listener
// is bound, so Addr is valid. ctx bounds only the bind: serving goes on
// until Stop.
func (s *HTTPServer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil || s.stopped {
		return errors.New("bittorrent http: already started")
	}
	ln, err := http1.Listen(ctx, s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("bittorrent http: listen on %s: %w", s.cfg.Addr, err)
	}
	s.listener = ln
	s.conns.Start(ln)
	s.cfg.Logger.InfoContext(ctx, "bittorrent http listening", "addr", ln.Addr().String(),
		"private", s.cfg.RequirePasskey)
	return nil
}

// openConnections counts the connections being served.
func (s *HTTPServer) openConnections() int { return s.conns.OpenConnections() }

// Addr is the bound address after Start, e.g. "127.0.0.1:41234".
func (s *HTTPServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// stopGrace is how long Stop waits for the requests in flight.
const stopGrace = 5 * time.Second

// Stop closes the listener and the idle connections, lets the requests
// in flight finish for up to stopGrace (their connections close after
// the answer), then closes what is left. Calling it twice, or before
// Start, is safe.
func (s *HTTPServer) Stop() error {
	s.mu.Lock()
	if s.stopped || s.listener == nil {
		s.stopped = true
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	err := s.conns.Close()
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	s.conns.Wait(ctx)
	return err
}

// Stats returns counters since the server was built.
func (s *HTTPServer) Stats() ListenerStats { return s.stats.snapshot() }

// Responses are rendered into pooled buffers: a compact announce with 50
// peers is about 400 bytes, a non-compact one about 4 KB.
var httpBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// trackerRequest is what the handlers read of a request. Its strings may
// be views into the connection's buffer: what outlives the request is
// copied (strings.Clone) before it leaves.
type trackerRequest struct {
	method   string
	path     string // percent-decoded
	rawQuery string
	remote   netip.AddrPort
	proxy    string // the proxy header's last line
	proxies  int    // its lines; 0: absent
	ctx      context.Context
}

// httpAnswer is a routed request's response.
type httpAnswer struct {
	status int
	body   []byte // the bencoded answer, or 404's text
	full   []byte // non-nil: the gzipped full scrape, sent instead of body
}

// notFoundBody is what net/http's NotFound said, kept for tools that
// probe the tracker's address.
const notFoundBody = "404 page not found\n"

// route answers on the raw path; there are few enough shapes that a
// router would only add allocations. A path that names announce or scrape
// but does not parse, or a method other than GET and HEAD on one, gets a
// bencoded failure reason, since that is all a torrent client shows its
// user; anything else is a plain 404. HEAD gets the headers of a GET
// without touching the swarms, so it is not recorded as an announce.
// Failures are 200 too: clients only read a bencoded body on 200.
func (s *HTTPServer) route(r *trackerRequest, buf []byte) httpAnswer {
	ep, pathPasskey := wire.ParsePath(r.path)
	if ep == wire.EndpointUnknown && !trackerLikePath(r.path) {
		return httpAnswer{status: http.StatusNotFound, body: append(buf, notFoundBody...)}
	}
	switch {
	case r.method != http.MethodGet && r.method != http.MethodHead:
		// No client announces with another method, so this answers HTTP
		// tools: keep the status they understand, with a readable body.
		s.stats.malformed.Add(1)
		return httpAnswer{status: http.StatusMethodNotAllowed, body: wire.AppendFailure(buf, failureMethod)}
	case ep == wire.EndpointUnknown:
		s.stats.malformed.Add(1)
		return httpAnswer{status: http.StatusOK, body: wire.AppendFailure(buf, pathFailure(r.path))}
	case r.method == http.MethodHead:
		return httpAnswer{status: http.StatusOK, body: buf}
	case ep == wire.EndpointAnnounce:
		return httpAnswer{status: http.StatusOK, body: s.announce(r, pathPasskey, buf)}
	}
	body, full := s.scrape(r, pathPasskey, buf)
	return httpAnswer{status: http.StatusOK, body: body, full: full}
}

// Failure reasons for requests that never reach the parser.
const (
	failureMethod        = "announce and scrape take GET requests"
	failureTrailingSlash = "the tracker URL path ends in a slash it must not have"
	failureBadPathKey    = "malformed passkey in the tracker URL: a passkey is 1 to 128 of A-Z a-z 0-9 . _ ~ -"
	failureUnknownPath   = "unknown tracker URL: use /announce, /<passkey>/announce or /announce/<passkey> (scrape likewise)"
)

// trackerLikePath reports whether a path that did not parse was meant for
// the tracker: it names announce or scrape, in any case.
func trackerLikePath(path string) bool {
	lower := strings.ToLower(path)
	return strings.Contains(lower, "announce") || strings.Contains(lower, "scrape")
}

// pathFailure says what is wrong with a tracker-like path ParsePath
// refused, as specifically as the path allows.
func pathFailure(path string) string {
	if trimmed, ok := strings.CutSuffix(path, "/"); ok {
		if ep, _ := wire.ParsePath(trimmed); ep != wire.EndpointUnknown {
			return failureTrailingSlash
		}
	}
	first, second, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if ok && !strings.Contains(second, "/") {
		switch {
		case (first == "announce" || first == "scrape") && !wire.ValidPasskey(second),
			(second == "announce" || second == "scrape") && !wire.ValidPasskey(first):
			return failureBadPathKey
		}
	}
	return failureUnknownPath
}

// announce renders the announce response, or a failure, into buf.
func (s *HTTPServer) announce(r *trackerRequest, pathPasskey string, buf []byte) []byte {
	var q wire.AnnounceQuery
	if err := wire.ParseAnnounceQuery(r.rawQuery, &q); err != nil {
		s.stats.malformed.Add(1)
		return wire.AppendFailure(buf, err.Error())
	}
	passkey, err := s.passkey(pathPasskey, q.Passkey)
	if err != nil {
		s.stats.refused.Add(1)
		return wire.AppendFailure(buf, err.Error())
	}
	ip, err := s.clientIP(r)
	if err != nil {
		s.stats.internalErrors.Add(1)
		s.cfg.Logger.LogAttrs(r.ctx, slog.LevelWarn, "cannot tell the client's address",
			slog.Any("remote", r.remote), slog.Any("err", err))
		return wire.AppendFailure(buf, internalFailure)
	}
	if refused := s.stats.admit(s.cfg.Guard, ip, true, passkey); refused != nil {
		return wire.AppendFailure(buf, refused.Reason)
	}
	guardIP := ip
	if s.cfg.TrustClientIP && q.IP.IsValid() {
		ip = q.IP
	}
	event := Event(q.Event)
	req := &AnnounceRequest{
		InfoHash:   InfoHash(q.InfoHash),
		PeerID:     PeerID(q.PeerID),
		Addr:       netip.AddrPortFrom(ip, q.Port),
		Uploaded:   q.Uploaded,
		Downloaded: q.Downloaded,
		Left:       q.Left,
		Event:      event,
		NumWant:    s.cfg.numWant(q.NumWant, event),
		Passkey:    passkey,
		Key:        strings.Clone(q.Key), // a view, as the passkey
	}
	var resp *AnnounceResponse
	if s.batch != nil {
		resp, err = s.batch.announce(r.ctx, req)
	} else {
		resp, err = s.cfg.Swarms.Announce(r.ctx, req)
	}
	if err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.ctx, s.cfg.Logger, "announce", err, s.cfg.Guard, guardIP, passkey))
	}
	s.stats.announces.Add(1)
	reply := s.cfg.reply(resp)
	return wire.AppendHTTPAnnounce(buf, &reply, peerList(resp.Peers), q.Compact, q.NoPeerID)
}

// scrape renders the scrape response (BEP 48), or a failure, into buf.
// Repeated hashes are answered once: they are dictionary keys. A scrape
// with no info_hash is a full scrape: when they are served, full is the
// gzipped body to send instead of buf.
func (s *HTTPServer) scrape(r *trackerRequest, pathPasskey string, buf []byte) (_ []byte, full []byte) {
	var stack [8][20]byte
	hashes, queryPasskey, err := wire.ParseScrapeQuery(r.rawQuery, stack[:0], s.cfg.MaxScrapeHashes)
	if err != nil {
		s.stats.malformed.Add(1)
		return wire.AppendFailure(buf, err.Error()), nil
	}
	if len(hashes) == 0 && s.full == nil {
		s.stats.malformed.Add(1)
		return wire.AppendFailure(buf, errFullScrapeOff), nil
	}
	passkey, err := s.passkey(pathPasskey, queryPasskey)
	if err != nil {
		s.stats.refused.Add(1)
		return wire.AppendFailure(buf, err.Error()), nil
	}
	var ip netip.Addr
	if (passkey != "" && s.cfg.Guard != nil) || len(hashes) == 0 {
		if ip, err = s.clientIP(r); err != nil {
			s.stats.internalErrors.Add(1)
			s.cfg.Logger.LogAttrs(r.ctx, slog.LevelWarn, "cannot tell the client's address",
				slog.Any("remote", r.remote), slog.Any("err", err))
			return wire.AppendFailure(buf, internalFailure), nil
		}
		if refused := s.stats.admit(s.cfg.Guard, ip, false, passkey); refused != nil {
			return wire.AppendFailure(buf, refused.Reason), nil
		}
	}
	if len(hashes) == 0 {
		return s.fullScrape(r, ip, passkey, buf)
	}
	hashes = wire.SortUniqueHashes(hashes)
	infoHashes := make([]InfoHash, len(hashes))
	for i := range hashes {
		infoHashes[i] = InfoHash(hashes[i])
	}
	entries, err := s.cfg.Swarms.Scrape(r.ctx, passkey, infoHashes)
	if err == nil && len(entries) != len(infoHashes) {
		err = fmt.Errorf("swarms returned %d scrape entries for %d hashes", len(entries), len(infoHashes))
	}
	if err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.ctx, s.cfg.Logger, "scrape", err, s.cfg.Guard, ip, passkey)), nil
	}
	s.stats.scrapes.Add(1)
	var countStack [8]wire.ScrapeCounts
	counts := countStack[:0]
	for _, e := range entries {
		counts = append(counts, wire.ScrapeCounts{Complete: e.Complete, Incomplete: e.Incomplete, Downloaded: e.Downloaded})
	}
	return wire.AppendHTTPScrape(buf, hashes, counts), nil
}

// fullScrape checks a full scrape (the address's allowance, then the
// passkey through the Swarms, which refuses an unknown one in private
// mode) and returns the shared body.
func (s *HTTPServer) fullScrape(r *trackerRequest, ip netip.Addr, passkey string, buf []byte) ([]byte, []byte) {
	if !s.full.allow(ip) {
		s.stats.rateLimited.Add(1)
		return wire.AppendFailure(buf, fmt.Sprintf(errFullScrapeRate, int64(s.full.cfg.PerAddress/time.Second))), nil
	}
	if _, err := s.cfg.Swarms.Scrape(r.ctx, passkey, nil); err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.ctx, s.cfg.Logger, "scrape", err, s.cfg.Guard, ip, passkey)), nil
	}
	body, err := s.full.get(r.ctx)
	if err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.ctx, s.cfg.Logger, "full_scrape", err, nil, ip, passkey)), nil
	}
	s.stats.scrapes.Add(1)
	s.stats.fullScrapes.Add(1)
	return buf, body
}

// passkey reconciles a passkey in the path with one in the query and
// applies private mode.
func (s *HTTPServer) passkey(fromPath, fromQuery string) (string, error) {
	passkey := fromPath
	switch {
	case fromPath != "" && fromQuery != "" && fromPath != fromQuery:
		return "", wire.ErrConflictingPasskeys
	case fromPath == "":
		passkey = fromQuery
	}
	if passkey == "" && s.cfg.RequirePasskey {
		return "", errPasskeyRequired
	}
	// The Swarms and the guard may keep it; the request's strings are
	// views into the connection's buffer.
	return strings.Clone(passkey), nil
}

// clientIP is the socket's address, or the trusted proxy header's.
func (s *HTTPServer) clientIP(r *trackerRequest) (netip.Addr, error) {
	if !r.remote.IsValid() {
		return netip.Addr{}, errors.New("the connection has no TCP remote address")
	}
	ip := r.remote.Addr().Unmap().WithZone("")
	if s.proxyHeader == "" || !s.trustedProxy(ip) {
		return ip, nil
	}
	if r.proxies == 0 {
		return netip.Addr{}, fmt.Errorf("trusted proxy sent no %s header", s.proxyHeader)
	}
	last := r.proxy
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	forwarded, err := netip.ParseAddr(strings.TrimSpace(last))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s header: %w", s.proxyHeader, err)
	}
	return forwarded.Unmap().WithZone(""), nil
}

func (s *HTTPServer) trustedProxy(ip netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
