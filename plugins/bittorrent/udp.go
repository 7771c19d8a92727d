package bittorrent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// UDPConfig configures the UDP announce/scrape listener (BEP 15).
type UDPConfig struct {
	AnnouncePolicy
	// Addr4 and Addr6 are the IPv4 and IPv6 listen addresses, e.g.
	// "0.0.0.0:6969" and "[::]:6969" (tests: "127.0.0.1:0", "[::1]:0").
	// Either may be empty to leave that family out, not both. The IPv6
	// socket is IPv6-only, so each family has its own socket and an IPv6
	// client gets 18-byte peers.
	Addr4  string
	Addr6  string
	Swarms Swarms
	Logger *slog.Logger
	// Secret keys the connection ids (at least 16 bytes; 32 random bytes
	// recommended). Hosts answering the same clients should share it;
	// empty picks a random one, so ids do not survive a restart (clients
	// just reconnect).
	Secret []byte
	// Workers is how many packets each socket handles at once, store
	// round trips included (default 32): the socket's readers each take
	// up to udpBatch packets a read and answer them before the next.
	Workers int
	// ReadBuffer sets SO_RCVBUF in bytes, best effort (default 4 MiB), so
	// bursts queue in the kernel rather than being dropped.
	ReadBuffer int
	// Now is the clock for connection ids (default time.Now).
	Now func() time.Time
}

// UDPServer answers BEP 15 connect, announce and scrape packets, with BEP 41
// URL data carrying a passkey ("/<passkey>/announce",
// "/announce?passkey=…"). A UDP scrape cannot carry URL data, so it is
// passed to the Swarms with an empty passkey.
type UDPServer struct {
	cfg   UDPConfig
	stats listenerCounters
	// batch is the most datagrams a read takes (udpBatch; 1 in the
	// benchmark that measures the unbatched path); kernelBatches is
	// whether reads and writes go through recvmmsg/sendmmsg (tests turn
	// it off to run the other platforms' path).
	batch         int
	kernelBatches bool
	// reads and packets count the socket reads and the datagrams they
	// returned: packets/reads is the mean batch.
	reads, packets atomic.Uint64

	mu      sync.Mutex
	conns   []*net.UDPConn
	addr4   string
	addr6   string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	stopped bool
}

// Error texts sent in UDP error packets.
const (
	udpBadConnID      = "expired or invalid conn id" // fits the smallest scrape reply unshortened
	udpNotAnnounceURL = "URL data does not name an announce path"
)

// maxUDPPacket is the read buffer: more than any well-formed request
// (a 74-hash scrape is 1496 bytes; an announce with all the URL data we
// accept is about 1140).
const maxUDPPacket = 2048

// NewUDPServer checks cfg and fills in its defaults.
func NewUDPServer(cfg UDPConfig) (*UDPServer, error) {
	if cfg.Swarms == nil {
		return nil, errors.New("bittorrent udp: Swarms is required")
	}
	if cfg.Addr4 == "" && cfg.Addr6 == "" {
		return nil, errors.New("bittorrent udp: set Addr4, Addr6 or both")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.AnnouncePolicy = cfg.AnnouncePolicy.withDefaults()
	if err := cfg.AnnouncePolicy.validate(); err != nil {
		return nil, fmt.Errorf("bittorrent udp: %w", err)
	}
	if len(cfg.Secret) > 0 && len(cfg.Secret) < 16 {
		return nil, errors.New("bittorrent udp: Secret must be at least 16 bytes (32 random bytes recommended)")
	}
	if len(cfg.Secret) == 0 {
		cfg.Secret = make([]byte, 32)
		if _, err := rand.Read(cfg.Secret); err != nil {
			return nil, fmt.Errorf("bittorrent udp: connection id secret: %w", err)
		}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.ReadBuffer <= 0 {
		cfg.ReadBuffer = 4 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &UDPServer{cfg: cfg, batch: udpBatch, kernelBatches: kernelBatches}, nil
}

// Start binds the sockets and starts the readers; it returns once both
// sockets are bound, so Addr4 and Addr6 are valid. ctx bounds only the
// bind: serving goes on until Stop.
func (s *UDPServer) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("bittorrent udp: already started")
	}
	var lc net.ListenConfig
	var networks []string
	for _, l := range []struct{ network, addr string }{{"udp4", s.cfg.Addr4}, {"udp6", s.cfg.Addr6}} {
		if l.addr == "" {
			continue
		}
		pc, err := lc.ListenPacket(ctx, l.network, l.addr)
		if err != nil {
			for _, c := range s.conns {
				_ = c.Close()
			}
			s.conns = nil
			return fmt.Errorf("bittorrent udp: listen on %s %s: %w", l.network, l.addr, err)
		}
		conn := pc.(*net.UDPConn)
		if err := conn.SetReadBuffer(s.cfg.ReadBuffer); err != nil {
			s.cfg.Logger.WarnContext(ctx, "bittorrent udp: cannot set the read buffer", "err", err)
		}
		s.conns = append(s.conns, conn)
		networks = append(networks, l.network)
		if l.network == "udp4" {
			s.addr4 = conn.LocalAddr().String()
		} else {
			s.addr6 = conn.LocalAddr().String()
		}
	}
	s.started = true
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	batch := min(s.batch, s.cfg.Workers)
	if !s.kernelBatches {
		batch = 1 // a read returns one datagram: readers of one, as many as Workers
	}
	readers := (s.cfg.Workers + batch - 1) / batch
	for i, conn := range s.conns {
		bc := newBatchConn(conn, networks[i], s.kernelBatches)
		for range readers {
			s.wg.Add(1)
			go newUDPReader(s, bc, batch).run(serveCtx)
		}
	}
	s.cfg.Logger.InfoContext(ctx, "bittorrent udp listening", "addr4", s.addr4, "addr6", s.addr6,
		"workers", s.cfg.Workers, "readers", readers, "batch", batch, "private", s.cfg.RequirePasskey)
	return nil
}

// Addr4 is the bound IPv4 address after Start, or "" without one.
func (s *UDPServer) Addr4() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr4
}

// Addr6 is the bound IPv6 address after Start, or "" without one.
func (s *UDPServer) Addr6() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr6
}

// Stop closes the sockets, cancels in-flight store calls and waits for the
// readers. Calling it twice, or before Start, is safe.
func (s *UDPServer) Stop() error {
	s.mu.Lock()
	if s.stopped || !s.started {
		s.stopped = true
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	var err error
	for _, c := range s.conns {
		err = errors.Join(err, c.Close())
	}
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// Stats returns counters since the server was built.
func (s *UDPServer) Stats() ListenerStats { return s.stats.snapshot() }

// udpWorker is the reusable state that answers one packet at a time.
type udpWorker struct {
	signer  *wire.ConnIDSigner
	in      []byte
	out     []byte
	req     wire.UDPRequest
	hashes  []InfoHash
	entries []wire.ScrapeCounts
	// an announce between parse and the store's answer: the request, and
	// the source address and passkey its refusal is counted against
	announce AnnounceRequest
	guardIP  netip.Addr
	passkey  string
}

// handle answers one packet; nil means no reply (too short to carry a
// transaction id).
func (s *UDPServer) handle(ctx context.Context, w *udpWorker, packet []byte, from netip.AddrPort) []byte {
	reply, toStore := s.parse(w, packet, from)
	if !toStore {
		return reply
	}
	if w.req.Action == wire.ActionAnnounce {
		resp, err := s.cfg.Swarms.Announce(ctx, &w.announce)
		return s.announced(ctx, w, resp, err)
	}
	return s.scrape(ctx, w, w.out[:0])
}

// parse does all of a packet's work that needs no store: it returns the
// reply of a connect, or of a packet refused here, or toStore with w
// holding what the store call needs (w.req; w.announce for an announce).
func (s *UDPServer) parse(w *udpWorker, packet []byte, from netip.AddrPort) (reply []byte, toStore bool) {
	out := w.out[:0]
	req := &w.req
	if err := wire.ParseUDPRequest(packet, req); err != nil {
		s.stats.malformed.Add(1)
		if errors.Is(err, wire.ErrUDPTooShort) {
			return nil, false
		}
		return unprovenError(out, req.TransactionID, err.Error(), len(packet)), false
	}
	ip := from.Addr().Unmap().WithZone("")
	now := s.cfg.Now()
	if req.Action == wire.ActionConnect {
		s.stats.connects.Add(1)
		return wire.AppendUDPConnect(out, req.TransactionID, w.signer.New(ip, now)), false
	}
	if !w.signer.Valid(req.ConnectionID, ip, now) {
		s.stats.malformed.Add(1)
		return unprovenError(out, req.TransactionID, udpBadConnID, len(packet)), false
	}
	if req.Action == wire.ActionAnnounce {
		return s.parseAnnounce(w, ip, out)
	}
	return nil, true
}

// unprovenError is the error reply to a packet whose source address is not
// proven (no valid connection id): it is never larger than the packet, so
// the tracker can't be used to reflect and amplify traffic at a spoofed
// address. The message is cut to fit (a 16-byte packet gets 8 bytes of it).
func unprovenError(out []byte, transactionID uint32, message string, requestLen int) []byte {
	room := max(0, requestLen-8) // the action and transaction id take 8
	if len(message) > room {
		message = message[:room]
	}
	return wire.AppendUDPError(out, transactionID, message)
}

// parseAnnounce checks an announce and fills w.announce (toStore), or
// returns its refusal.
func (s *UDPServer) parseAnnounce(w *udpWorker, ip netip.Addr, out []byte) (reply []byte, toStore bool) {
	req := &w.req
	var passkey string
	if len(req.URLData) > 0 {
		ep, pk, err := wire.ParseURLData(string(req.URLData))
		if err == nil && ep != wire.EndpointAnnounce {
			err = errors.New(udpNotAnnounceURL)
		}
		if err != nil {
			s.stats.malformed.Add(1)
			return wire.AppendUDPError(out, req.TransactionID, err.Error()), false
		}
		passkey = pk
	}
	if passkey == "" && s.cfg.RequirePasskey {
		s.stats.refused.Add(1)
		return wire.AppendUDPError(out, req.TransactionID, errPasskeyRequired.Reason), false
	}
	// The connection id proved the source address, so a spoofed packet
	// cannot spend another address's allowance.
	if refused := s.stats.admit(s.cfg.Guard, ip, true, passkey); refused != nil {
		return wire.AppendUDPError(out, req.TransactionID, refused.Reason), false
	}
	w.guardIP, w.passkey = ip, passkey
	if s.cfg.TrustClientIP && ip.Is4() && req.IPv4 != [4]byte{} {
		ip = netip.AddrFrom4(req.IPv4)
	}
	event := Event(req.Event)
	numWant := s.cfg.numWant(int(req.NumWant), event)
	if ip.Is4() {
		numWant = min(numWant, wire.MaxUDPPeers4)
	} else {
		numWant = min(numWant, wire.MaxUDPPeers6)
	}
	w.announce = AnnounceRequest{
		InfoHash:   InfoHash(req.InfoHash),
		PeerID:     PeerID(req.PeerID),
		Addr:       netip.AddrPortFrom(ip, req.Port),
		Uploaded:   req.Uploaded,
		Downloaded: req.Downloaded,
		Left:       req.Left,
		Event:      event,
		NumWant:    numWant,
		Passkey:    passkey,
		Key:        udpKey(req.Key),
		PeerFamily: IPv4Only,
	}
	if !ip.Is4() {
		w.announce.PeerFamily = IPv6Only
	}
	return nil, true
}

// announced renders the store's answer to w.announce.
func (s *UDPServer) announced(ctx context.Context, w *udpWorker, resp *AnnounceResponse, err error) []byte {
	out := w.out[:0]
	req := &w.req
	if err != nil {
		return wire.AppendUDPError(out, req.TransactionID, s.stats.countRefusal(ctx, s.cfg.Logger, "announce", err, s.cfg.Guard, w.guardIP, w.passkey))
	}
	s.stats.announces.Add(1)
	reply := s.cfg.reply(resp)
	return wire.AppendUDPAnnounce(out, req.TransactionID, &reply, peerList(resp.Peers), w.announce.PeerFamily == IPv6Only)
}

func (s *UDPServer) scrape(ctx context.Context, w *udpWorker, out []byte) []byte {
	req := &w.req
	// BEP 41 gives a scrape no way to carry a passkey, so even in private
	// mode the store gets an empty one and decides.
	w.hashes = w.hashes[:0]
	for _, h := range req.InfoHashes {
		w.hashes = append(w.hashes, InfoHash(h))
	}
	entries, err := s.cfg.Swarms.Scrape(ctx, "", w.hashes)
	if err == nil && len(entries) != len(w.hashes) {
		err = fmt.Errorf("swarms returned %d scrape entries for %d hashes", len(entries), len(w.hashes))
	}
	if err != nil {
		return wire.AppendUDPError(out, req.TransactionID, s.stats.countRefusal(ctx, s.cfg.Logger, "scrape", err, nil, netip.Addr{}, ""))
	}
	s.stats.scrapes.Add(1)
	w.entries = w.entries[:0]
	for _, e := range entries {
		w.entries = append(w.entries, wire.ScrapeCounts{Complete: e.Complete, Incomplete: e.Incomplete, Downloaded: e.Downloaded})
	}
	return wire.AppendUDPScrape(out, req.TransactionID, w.entries)
}

// udpKey renders the UDP key as 8 hex digits, the way most HTTP clients
// send theirs; 0 (no key) is empty.
func udpKey(key uint32) string {
	if key == 0 {
		return ""
	}
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(key>>24), byte(key>>16), byte(key>>8), byte(key)
	return hex.EncodeToString(b[:])
}
