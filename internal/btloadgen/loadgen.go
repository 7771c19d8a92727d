// Package btloadgen is an announce load generator for BitTorrent trackers:
// ours, opentracker, or anything speaking HTTP or UDP (BEP 15) announces.
// It only ever talks to a loopback address.
//
// Traffic model (after aquatic's load tester): a fixed set of torrents and
// a fixed pool of peers; every announce picks a torrent and a peer at
// random, so swarms grow to a steady size instead of without bound. A
// fixed fraction of the peers are seeders (left=0). Every announce asks for
// compact peers and NumWant of them.
package btloadgen

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// Mode is how announces are sent.
type Mode string

// The modes.
const (
	// ModeHTTPKeepAlive sends HTTP/1.1 announces over long-lived
	// connections, one per worker.
	ModeHTTPKeepAlive Mode = "http-keepalive"
	// ModeHTTPClose opens a new TCP connection for every announce and asks
	// the tracker to close it, as most BitTorrent clients do.
	ModeHTTPClose Mode = "http-close"
	// ModeUDP sends BEP 15 announces, one socket per worker, reusing the
	// connection id for a minute as clients do.
	ModeUDP Mode = "udp"
)

// Config describes a run. Zero values pick the defaults.
type Config struct {
	Mode Mode
	// Target is the tracker's host:port. It must be a loopback address
	// (127.0.0.0/8, ::1, or localhost resolving only to those).
	Target string
	// Path is the announce path, with any fixed query the tracker needs:
	// "/announce" (the HTTP default; opentracker), "/<passkey>/announce",
	// "/announce/<passkey>" or "/announce?passkey=<passkey>". The generated
	// query is appended. In UDP mode a non-empty Path is sent as BEP 41 URL
	// data; the default there is none.
	Path string
	// Paths, when set, replaces Path per peer: peer p announces on
	// Paths[p % len(Paths)], so a private tracker's load spreads over
	// many users' passkeys ("/<passkey>/announce"). Each must start with /.
	Paths []string
	// Transfer makes every announce report transfer, as a client that
	// moves data does: cumulative uploaded (and downloaded, for
	// leechers) counters that grow with the wall clock by TransferRate
	// bytes per second, so each re-announce of a peer has a positive
	// delta to credit, across runs too (the counters never go back).
	Transfer bool
	// Sticky keeps each peer on one torrent (peer p always on the same
	// one, spread at random), as a client re-announces the torrents it
	// has, so every announce after a peer's first is a re-announce with
	// the transfer since (with Transfer). Without it the torrent is drawn
	// apart from the peer, so a (peer, torrent) pair almost never
	// repeats: nearly every announce is that peer's first on the torrent,
	// with no delta to credit.
	Sticky bool
	// EachPeerOnce announces every peer exactly once, in index order
	// (split among the workers), and ends the run: a warm-up after which
	// every peer is known to the tracker, so each later announce is a
	// re-announce. Random picks would leave e^-n of the peers unseen
	// after n announces per peer (14% after two). It sets Announces to
	// Peers and needs no Duration.
	EachPeerOnce bool
	// Torrents is how many info-hashes to spread announces over (default
	// 10000); they are InfoHashes(Seed, Torrents).
	Torrents int
	// Peers is the pool of simulated peers (default 10 × Torrents).
	Peers int
	// Seed makes the torrents and peers reproducible.
	Seed uint64
	// NumWant is the numwant each announce sends (default 50).
	NumWant int
	// SeederFraction is the fraction of peers announcing left=0 (default
	// 0.25, as aquatic's HTTP load test; negative for none).
	SeederFraction float64
	// Concurrency is the number of workers, each with one announce in
	// flight (default 32).
	Concurrency int
	// Announces bounds the run by count, Duration by time; the first
	// reached ends it. With neither, Announces is 10000.
	Announces int
	Duration  time.Duration
	// Timeout bounds each announce (default 5s); a timeout is an error.
	Timeout time.Duration
	// StopFraction is the fraction of announces that are a peer leaving
	// (event=stopped, as a client that quits or drops the torrent sends);
	// the peer's next announce in the same Run comes back with
	// event=started, a new session (a peer a Run left stopped starts the
	// next Run with a plain announce, which a tracker takes as a return
	// too). 0: none, every announce a plain one (no event). Real
	// swarms always churn, so a tracker's store always holds some
	// records counting down to their expiry (hoard keeps a stopped
	// peer's record PeerRetention longer): a run without churn measures
	// a store with no expiring key at all, which no running tracker has.
	StopFraction float64
	// ForwardedFor sends every HTTP announce with an X-Forwarded-For
	// header naming the peer's own IPv4 address (PeerIP), so a tracker
	// that trusts loopback as a proxy sees Peers distinct clients instead
	// of one 127.0.0.1 (the unique-IP metrics are per IP). UDP has no
	// such header.
	ForwardedFor bool
}

// PeerIP is the address peer index p claims with ForwardedFor: spread
// over unicast IPv4 space (first byte 1 to 223, never 127), the same for
// the same seed and index.
func PeerIP(seed, p uint64) netip.Addr {
	x := (p + 1) * 0x9e3779b97f4a7c15
	x ^= seed
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	first := 1 + x%222
	if first >= 127 {
		first++ // loopback would be the tracker's own proxy
	}
	b := [4]byte{byte(first), byte(x >> 8), byte(x >> 16), byte(x >> 24)}
	return netip.AddrFrom4(b)
}

// Result is what a run measured.
type Result struct {
	Mode      Mode
	Announces int64 // answered without a failure
	Errors    int64 // transport errors, timeouts, non-200s and failure replies
	// FirstError describes the first error, to tell a misconfigured run
	// ("Requested download is not authorized") from an overloaded tracker.
	FirstError      string
	Elapsed         time.Duration
	AnnouncesPerSec float64
	// Latency of successful announces, from the request being written to
	// the reply being read (HTTP close mode includes the TCP handshake).
	P50, P99, Max time.Duration
	// PeersReceived totals the compact peers handed out, to check the
	// tracker did return swarms.
	PeersReceived int64
}

// String is a one-line summary.
func (r Result) String() string {
	s := fmt.Sprintf("%s: %d announces in %s = %.0f/s, p50 %s, p99 %s, max %s, %d errors, %.1f peers/announce",
		r.Mode, r.Announces, r.Elapsed.Round(time.Millisecond), r.AnnouncesPerSec,
		r.P50, r.P99, r.Max, r.Errors, float64(r.PeersReceived)/float64(max(r.Announces, 1)))
	if r.FirstError != "" {
		s += " (first error: " + r.FirstError + ")"
	}
	return s
}

// Defaults.
const (
	DefaultTorrents       = 10000
	DefaultNumWant        = 50
	DefaultSeederFraction = 0.25
	DefaultConcurrency    = 32
	DefaultAnnounces      = 10000
	DefaultTimeout        = 5 * time.Second
)

// ErrNotLoopback refuses a target off this machine.
var ErrNotLoopback = errors.New("loadgen: target must be a loopback address")

// InfoHashes returns the n info-hashes a run with this seed announces:
// SHA-1 of "hoard-loadgen", the seed and the index. Give the same list to
// a whitelisting tracker (opentracker.Start does).
func InfoHashes(seed uint64, n int) [][20]byte {
	out := make([][20]byte, n)
	var msg [13 + 16]byte
	copy(msg[:], "hoard-loadgen")
	binary.BigEndian.PutUint64(msg[13:], seed)
	for i := range out {
		binary.BigEndian.PutUint64(msg[21:], uint64(i))
		out[i] = sha1.Sum(msg[:])
	}
	return out
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	switch out.Mode {
	case ModeHTTPKeepAlive, ModeHTTPClose:
		if out.Path == "" {
			out.Path = "/announce"
		}
	case ModeUDP:
	default:
		return out, fmt.Errorf("loadgen: unknown mode %q (want %s, %s or %s)", out.Mode, ModeHTTPKeepAlive, ModeHTTPClose, ModeUDP)
	}
	if out.Path != "" && out.Path[0] != '/' {
		return out, fmt.Errorf("loadgen: Path %q must start with /", out.Path)
	}
	for _, p := range out.Paths {
		if p == "" || p[0] != '/' {
			return out, fmt.Errorf("loadgen: Paths: %q must start with /", p)
		}
	}
	if out.Torrents <= 0 {
		out.Torrents = DefaultTorrents
	}
	if out.Peers <= 0 {
		out.Peers = 10 * out.Torrents
	}
	if out.NumWant <= 0 {
		out.NumWant = DefaultNumWant
	}
	switch {
	case out.SeederFraction == 0:
		out.SeederFraction = DefaultSeederFraction
	case out.SeederFraction < 0:
		out.SeederFraction = 0
	case out.SeederFraction > 1:
		return out, fmt.Errorf("loadgen: SeederFraction %v is more than 1", out.SeederFraction)
	}
	if !(out.StopFraction >= 0 && out.StopFraction < 1) { // NaN too
		return out, fmt.Errorf("loadgen: StopFraction %v must be at least 0 and below 1", out.StopFraction)
	}
	if out.Concurrency <= 0 {
		out.Concurrency = DefaultConcurrency
	}
	if out.EachPeerOnce {
		if out.Announces > 0 || out.Duration > 0 {
			return out, errors.New("loadgen: EachPeerOnce announces every peer once: Announces and Duration must be 0")
		}
		out.Announces = out.Peers
	}
	if out.Announces <= 0 && out.Duration <= 0 {
		out.Announces = DefaultAnnounces
	}
	if out.Timeout <= 0 {
		out.Timeout = DefaultTimeout
	}
	return out, nil
}

// resolveLoopback resolves target and refuses anything not on loopback;
// the run then dials the resolved address, so a name cannot change under
// it.
func resolveLoopback(ctx context.Context, target string) (netip.AddrPort, error) {
	host, portText, err := net.SplitHostPort(target)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("loadgen: target %q: %w", target, err)
	}
	port, err := net.DefaultResolver.LookupPort(ctx, "tcp", portText)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("loadgen: target %q: bad port", target)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if host == "localhost" {
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("loadgen: resolve %q: %w", host, err)
		}
	}
	if len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("%w: %q", ErrNotLoopback, target)
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return netip.AddrPort{}, fmt.Errorf("%w: %q resolves to %s", ErrNotLoopback, target, a)
		}
	}
	return netip.AddrPortFrom(preferIPv4(addrs), uint16(port)), nil
}

// preferIPv4 picks the address to load: the first IPv4 one, else the
// first. Debian's /etc/hosts names both 127.0.0.1 and ::1 "localhost",
// and the resolver may list ::1 first, while trackers (hoard's defaults,
// opentracker's) listen on 127.0.0.1: taking the first address refused
// every announce on a fresh Debian 12.
func preferIPv4(addrs []netip.Addr) netip.Addr {
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap()
		}
	}
	return addrs[0].Unmap()
}

// Run sends announces until the count or the duration is reached, or ctx
// ends, and reports what it measured. It returns an error only for a bad
// Config or target; failed announces are counted in the Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	target, err := resolveLoopback(ctx, cfg.Target)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	run := &run{
		cfg:      cfg,
		target:   target,
		hashes:   InfoHashes(cfg.Seed, cfg.Torrents),
		budgeted: cfg.Announces > 0,
	}
	run.remaining.Store(int64(cfg.Announces))
	if cfg.StopFraction > 0 {
		run.stopped = make([]atomic.Uint32, (cfg.Peers+31)/32)
	}

	workers := make([]*workerStats, cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		workers[i] = &workerStats{}
		wg.Add(1)
		go func(stats *workerStats) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
			switch cfg.Mode {
			case ModeUDP:
				run.udpWorker(ctx, rng, stats)
			default:
				run.httpWorker(ctx, rng, stats, cfg.Mode == ModeHTTPClose)
			}
		}(workers[i])
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := Result{Mode: cfg.Mode, Elapsed: elapsed}
	var hist histogram
	for _, w := range workers {
		res.Announces += w.announces
		res.Errors += w.errors
		res.PeersReceived += w.peers
		if res.FirstError == "" && w.firstError != "" {
			res.FirstError = w.firstError
		}
		hist.merge(&w.latency)
	}
	if elapsed > 0 {
		res.AnnouncesPerSec = float64(res.Announces) / elapsed.Seconds()
	}
	res.P50, res.P99, res.Max = hist.quantile(0.50), hist.quantile(0.99), hist.max()
	return res, nil
}

type run struct {
	cfg       Config
	target    netip.AddrPort
	hashes    [][20]byte
	budgeted  bool
	remaining atomic.Int64
	// swept counts the peers EachPeerOnce has handed out
	swept atomic.Uint64
	// stopped has a bit per peer, set while the peer is stopped (its
	// last announce was event=stopped), with StopFraction only
	stopped []atomic.Uint32
}

// next claims one announce from the budget; false ends the worker.
func (r *run) next(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	return !r.budgeted || r.remaining.Add(-1) >= 0
}

// announce is one simulated announce.
type announce struct {
	infoHash [20]byte
	peerID   [20]byte
	port     uint16
	left     uint64
	key      uint32
	ip       netip.Addr // the peer's PeerIP
	path     string     // Path, or the peer's one of Paths
	// uploaded and downloaded are the counters it reports (Transfer).
	uploaded, downloaded uint64
	// event is none, or with StopFraction stopped or started
	event wire.Event
}

// TransferRate is the bytes per second a peer's counters grow by with
// Config.Transfer.
const TransferRate = 64 << 10

// transferEpoch is where the counters start; a fixed instant, so runs
// one after another continue each peer's counters.
var transferEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pick chooses a torrent and a peer at random. A peer's id, port and
// whether it seeds follow from its index, so the same peer announces the
// same way every time.
func (r *run) pick(rng *rand.Rand) announce {
	t := rng.IntN(len(r.hashes))
	p := uint64(rng.IntN(r.cfg.Peers))
	if r.cfg.EachPeerOnce {
		// next's budget is Peers, so this stays below it
		p = r.swept.Add(1) - 1
	}
	if r.cfg.Sticky {
		t = stickyTorrent(p, len(r.hashes))
	}
	a := announce{infoHash: r.hashes[t], key: uint32(p), path: r.cfg.Path}
	if n := len(r.cfg.Paths); n > 0 {
		a.path = r.cfg.Paths[p%uint64(n)]
	}
	if r.cfg.ForwardedFor {
		a.ip = PeerIP(r.cfg.Seed, p)
	}
	copy(a.peerID[:], "-HL0001-")
	var idBytes [8]byte
	binary.BigEndian.PutUint64(idBytes[:], p^r.cfg.Seed)
	hex.Encode(a.peerID[8:], idBytes[2:]) // 12 hex digits
	a.port = uint16(1024 + p%64000)
	// Seeders are a fixed subset of peers, spread by a multiplicative hash.
	if float64((p*0x9E3779B97F4A7C15)>>11)/float64(1<<53) >= r.cfg.SeederFraction {
		a.left = 1 << 20
	}
	if r.cfg.Transfer {
		// Offset per peer, so peers' counters differ.
		counter := uint64(time.Since(transferEpoch).Milliseconds())*TransferRate/1000 + p%4096
		a.uploaded = counter
		if a.left > 0 {
			a.downloaded = counter
		}
	}
	if r.stopped != nil && !r.cfg.EachPeerOnce {
		a.event = r.churn(rng, p)
	}
	return a
}

// churn is the event of peer p's announce with StopFraction: a stopped
// peer comes back (started); a peer in its swarm leaves (stopped) with
// that chance, else announces plainly. The peer's bit changes atomically,
// so two workers that draw the same peer at once send one stop, not two.
func (r *run) churn(rng *rand.Rand, p uint64) wire.Event {
	word, bit := &r.stopped[p/32], uint32(1)<<(p%32)
	if word.Load()&bit != 0 {
		if word.And(^bit)&bit != 0 {
			return wire.EventStarted
		}
		return wire.EventNone
	}
	if rng.Float64() < r.cfg.StopFraction && word.Or(bit)&bit == 0 {
		return wire.EventStopped
	}
	return wire.EventNone
}

// stickyTorrent is the torrent a Sticky peer announces on: its index
// mixed (splitmix64's finaliser), so the peers of one torrent are not
// also the peers of one passkey (Paths go by p mod len) or all seeders.
func stickyTorrent(p uint64, torrents int) int {
	x := p + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(torrents))
}

// workerStats is one worker's tally; merged after the run, so no locks.
type workerStats struct {
	announces  int64
	errors     int64
	peers      int64
	firstError string
	latency    histogram
}

func (s *workerStats) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // the run ended mid-announce: not the tracker's fault
	}
	s.errors++
	if s.firstError == "" {
		s.firstError = err.Error()
	}
}

func (s *workerStats) ok(latency time.Duration, peers int) {
	s.announces++
	s.peers += int64(peers)
	s.latency.record(latency)
}
