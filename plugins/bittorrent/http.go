package bittorrent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

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
// stop it with Stop.
type HTTPServer struct {
	cfg         HTTPConfig
	proxyHeader string // canonical form of cfg.ProxyHeader
	stats       listenerCounters
	full        *fullScrape // nil: full scrapes are refused
	// batch joins concurrent announces into one store call when the
	// store batches (BatchAnnouncer); nil: each goes to Announce.
	batch *httpBatcher

	mu       sync.Mutex
	srv      *http.Server
	listener net.Listener
	stopped  bool
	done     chan struct{}
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
	s := &HTTPServer{cfg: cfg, proxyHeader: textproto.CanonicalMIMEHeaderKey(cfg.ProxyHeader),
		full: newFullScrape(cfg.FullScrape)}
	if b, ok := cfg.Swarms.(BatchAnnouncer); ok {
		s.batch = newHTTPBatcher(b, httpBatchLeaders, httpBatchMax)
	}
	return s, nil
}

// Start listens and serves in the background; it returns once the listener
// is bound, so Addr is valid. ctx bounds only the bind: serving goes on
// until Stop.
func (s *HTTPServer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil || s.stopped {
		return errors.New("bittorrent http: already started")
	}
	// No TCP keep-alive probes: IdleTimeout already reaps idle
	// connections, and the probes' setsockopt calls cost about a tenth of
	// the CPU of a connection-per-announce client.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("bittorrent http: listen on %s: %w", s.cfg.Addr, err)
	}
	s.listener = ln
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    16 << 10, // announce URLs are a few hundred bytes
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
	}
	s.done = make(chan struct{})
	srv := s.srv
	go func() {
		defer close(s.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("bittorrent http listener stopped", "err", err)
		}
	}()
	s.cfg.Logger.InfoContext(ctx, "bittorrent http listening", "addr", ln.Addr().String(),
		"private", s.cfg.RequirePasskey)
	return nil
}

// Addr is the bound address after Start, e.g. "127.0.0.1:41234".
func (s *HTTPServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Stop lets in-flight requests finish for up to 5 s, then closes. Calling
// it twice, or before Start, is safe.
func (s *HTTPServer) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.srv == nil {
		s.stopped = true
		return nil
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// Stats returns counters since the server was built.
func (s *HTTPServer) Stats() ListenerStats { return s.stats.snapshot() }

// Responses are rendered into pooled buffers: a compact announce with 50
// peers is about 400 bytes, a non-compact one about 4 KB.
var httpBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

var headerTextPlain = []string{"text/plain; charset=utf-8"}

// ServeHTTP routes on the raw path; there are few enough shapes that a
// router would only add allocations. A path that names announce or scrape
// but does not parse, or a method other than GET and HEAD on one, gets a
// bencoded failure reason, since that is all a torrent client shows its
// user; anything else is a plain 404. HEAD gets the headers of a GET
// without touching the swarms, so it is not recorded as an announce.
func (s *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep, pathPasskey := wire.ParsePath(r.URL.Path)
	if ep == wire.EndpointUnknown && !trackerLikePath(r.URL.Path) {
		http.NotFound(w, r)
		return
	}
	bufp := httpBufPool.Get().(*[]byte)
	buf := (*bufp)[:0]
	// Failures are 200 too: clients only read a bencoded body on 200.
	status := http.StatusOK
	h := w.Header()
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		// No client announces with another method, so this answers HTTP
		// tools: keep the status they understand, with a readable body.
		status = http.StatusMethodNotAllowed
		h["Allow"] = headerAllow
		s.stats.malformed.Add(1)
		buf = wire.AppendFailure(buf, failureMethod)
	case ep == wire.EndpointUnknown:
		s.stats.malformed.Add(1)
		buf = wire.AppendFailure(buf, pathFailure(r.URL.Path))
	case r.Method == http.MethodHead:
	case ep == wire.EndpointAnnounce:
		buf = s.announce(r, pathPasskey, buf)
	default:
		var full []byte
		if buf, full = s.scrape(r, pathPasskey, buf); full != nil {
			*bufp = buf[:0]
			httpBufPool.Put(bufp)
			s.full.serve(w, r, full)
			return
		}
	}
	h["Content-Type"] = headerTextPlain
	if len(buf) > 0 {
		h["Content-Length"] = []string{strconv.Itoa(len(buf))}
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf)
	if cap(buf) <= 64<<10 { // don't let one huge response pin memory
		*bufp = buf
		httpBufPool.Put(bufp)
	}
}

var headerAllow = []string{"GET, HEAD"}

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
func (s *HTTPServer) announce(r *http.Request, pathPasskey string, buf []byte) []byte {
	var q wire.AnnounceQuery
	if err := wire.ParseAnnounceQuery(r.URL.RawQuery, &q); err != nil {
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
		s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "cannot tell the client's address",
			slog.String("remote", r.RemoteAddr), slog.Any("err", err))
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
		Key:        q.Key,
	}
	var resp *AnnounceResponse
	if s.batch != nil {
		resp, err = s.batch.announce(r.Context(), req)
	} else {
		resp, err = s.cfg.Swarms.Announce(r.Context(), req)
	}
	if err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.Context(), s.cfg.Logger, "announce", err, s.cfg.Guard, guardIP, passkey))
	}
	s.stats.announces.Add(1)
	reply := s.cfg.reply(resp)
	return wire.AppendHTTPAnnounce(buf, &reply, peerList(resp.Peers), q.Compact, q.NoPeerID)
}

// scrape renders the scrape response (BEP 48), or a failure, into buf.
// Repeated hashes are answered once: they are dictionary keys. A scrape
// with no info_hash is a full scrape: when they are served, full is the
// gzipped body to send instead of buf.
func (s *HTTPServer) scrape(r *http.Request, pathPasskey string, buf []byte) (_ []byte, full []byte) {
	var stack [8][20]byte
	hashes, queryPasskey, err := wire.ParseScrapeQuery(r.URL.RawQuery, stack[:0], s.cfg.MaxScrapeHashes)
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
			s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "cannot tell the client's address",
				slog.String("remote", r.RemoteAddr), slog.Any("err", err))
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
	entries, err := s.cfg.Swarms.Scrape(r.Context(), passkey, infoHashes)
	if err == nil && len(entries) != len(infoHashes) {
		err = fmt.Errorf("swarms returned %d scrape entries for %d hashes", len(entries), len(infoHashes))
	}
	if err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.Context(), s.cfg.Logger, "scrape", err, s.cfg.Guard, ip, passkey)), nil
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
func (s *HTTPServer) fullScrape(r *http.Request, ip netip.Addr, passkey string, buf []byte) ([]byte, []byte) {
	if !s.full.allow(ip) {
		s.stats.rateLimited.Add(1)
		return wire.AppendFailure(buf, fmt.Sprintf(errFullScrapeRate, int64(s.full.cfg.PerAddress/time.Second))), nil
	}
	if _, err := s.cfg.Swarms.Scrape(r.Context(), passkey, nil); err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.Context(), s.cfg.Logger, "scrape", err, s.cfg.Guard, ip, passkey)), nil
	}
	body, err := s.full.get(r.Context())
	if err != nil {
		return wire.AppendFailure(buf, s.stats.countRefusal(r.Context(), s.cfg.Logger, "full_scrape", err, nil, ip, passkey)), nil
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
	return passkey, nil
}

// clientIP is the socket's address, or the trusted proxy header's.
func (s *HTTPServer) clientIP(r *http.Request) (netip.Addr, error) {
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("remote address %q: %w", r.RemoteAddr, err)
	}
	ip := remote.Addr().Unmap().WithZone("")
	if s.proxyHeader == "" || !s.trustedProxy(ip) {
		return ip, nil
	}
	values := r.Header[s.proxyHeader]
	if len(values) == 0 {
		return netip.Addr{}, fmt.Errorf("trusted proxy sent no %s header", s.proxyHeader)
	}
	last := values[len(values)-1]
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
