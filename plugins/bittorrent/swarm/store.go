package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"

	"github.com/hoardproject/hoard/internal/lease"
)

// HnRPolicy says when a user who snatched a torrent and left it is a
// hit-and-run: when they seeded it for less than MinSeedTime and reached
// less than MinRatio (uploaded/downloaded on that torrent). A zero field
// is not a requirement; both zero disables hit-and-runs.
type HnRPolicy struct {
	MinSeedTime time.Duration
	MinRatio    float64
}

// Config configures a Store. Zero values take the defaults named on each
// field.
type Config struct {
	// Private requires a registered torrent, a known passkey and a
	// whitelisted client on every announce; open mode accepts any
	// info-hash and needs no passkey.
	Private bool
	// Interval is the announce interval sent to clients (30m).
	Interval time.Duration
	// MinInterval is the minimum announce interval sent to clients
	// (Interval/2).
	MinInterval time.Duration
	// PeerTimeout is how long after its last announce a peer is dropped
	// (2 x Interval). It must be at least Interval.
	PeerTimeout time.Duration
	// MaxNumWant caps the peers returned per announce, whatever the
	// listener let through (200).
	MaxNumWant int
	// PeerRetention is how long a peer's record outlives the peer (24h).
	PeerRetention time.Duration
	// OpenTorrentRetention is how long an unregistered torrent's record
	// (counters, created, last_action) outlives its last peer (24h), so
	// random info-hashes do not accumulate. Negative keeps them forever.
	OpenTorrentRetention time.Duration
	// HnR is the hit-and-run policy (private mode; disabled by default).
	HnR HnRPolicy
	// MaxPeersPerOwner bounds the peers one owner may have in one
	// torrent's swarm: a user (whichever of its passkeys) in private mode,
	// 5 by default; an address (an IPv6 /64) in open mode, 20 by default,
	// since NATs put many clients behind one. A client makes a new peer
	// id each time it restarts, and its old one stays until it times out
	// unless it said stopped. A peer joining past the bound is refused;
	// one in the swarm never is. Negative: no bound.
	MaxPeersPerOwner int
	// ReaperClaimWindow is how long after the first reseed of a torrent
	// in the unseeded reaper's process other users who start seeding it
	// also win the claim (15m): package reaper's claim_window.
	ReaperClaimWindow time.Duration
	// DeletedReasonTTL is how long the reason the site gave when it
	// removed a torrent (DeleteTorrent) is answered to its announces,
	// before they get "unregistered torrent" (72h).
	DeletedReasonTTL time.Duration
	// FloodInterval is the least time between two announces of one peer
	// on one torrent without an event: one sooner is refused (flood
	// control, checked in the announce script against the peer's last
	// accepted announce). Zero turns flood control off. Events (started,
	// stopped, completed) are never refused by it.
	FloodInterval time.Duration
	// FloodWindow is the window a peer's refusals are counted in (1h);
	// FloodReportAfter is how many refusals in one window make a peer a
	// repeat offender, reported once per window to OnFlood (10; negative:
	// never).
	FloodWindow      time.Duration
	FloodReportAfter int
	// OnFlood hears of each repeat offender (the plugin appends an outbox
	// event for the site). It runs on the announce's goroutine, once per
	// offender and window; nil: offenders are only counted.
	OnFlood func(context.Context, FloodReport)
	// NoAccounting turns credited transfer off (private mode): announces
	// keep the raw transfer only, and no token is used or reported. For
	// trackers that keep no ratio economy, and to measure what it costs.
	NoAccounting bool
	// OnToken hears of each personal token's first use and end (the
	// plugin appends an outbox event for the site). It runs on the
	// announce's goroutine, once per grant and event; nil: not reported.
	OnToken func(context.Context, TokenEvent)
	// Watch configures the transfer ledger and the cheat signals (with
	// accounting on; watch.go); OnCheat hears of each signal fired (the
	// plugin appends an outbox event for the site), on the announce's
	// goroutine or the write-behind's; nil: they are only counted.
	Watch   WatchConfig
	OnCheat func(context.Context, CheatSignal)
	// OnFeed delivers the feed's batches to the site (the plugin appends
	// them to the outbox); set, the frontend holds the rows its replies
	// carry (feedbuf.go) and Start runs a feed round every FeedInterval
	// (10s). FeedBackstopInterval is unused since S5 (s43): the feed's
	// index it scanned for is read only by the drain at start; kept so
	// settings that name it still parse. FeedBufferRows caps the rows
	// held (100,000): half of it starts a round at once, past it the
	// oldest are dropped and left to the frontend's own scan. See feed.go.
	OnFeed               func(context.Context, []FeedBatch) error
	FeedInterval         time.Duration
	FeedBackstopInterval time.Duration
	FeedBufferRows       int
	// CacheTTL is how long passkey lookups and the client whitelist are
	// cached per frontend (10s). A change made through this Store applies
	// here at once; other frontends see it within CacheTTL.
	CacheTTL time.Duration
	// FlushInterval is how often batched global writes are flushed (1s).
	FlushInterval time.Duration
	// SweepInterval is how often the expiry sweep runs (15s).
	SweepInterval time.Duration
	// ExternalSweep: the Store's owner calls Sweep every SweepInterval
	// itself (the BitTorrent plugin, as a host-scheduled job under the
	// host's lease), so Start runs no sweep loop of its own.
	ExternalSweep bool
	// RepairInterval is how often one frontend recomputes the global
	// counters, indexes and user sets from per-torrent truth (1h).
	// Negative disables the periodic repair (Repair can still be called).
	RepairInterval time.Duration
	// ExpiryWorkers is how many goroutines process expiry events (4).
	ExpiryWorkers int
	// AnnouncePipelines is how many shared pipelines carry concurrent
	// announces to Redis (4): announces that arrive while all are busy
	// go out together in the next free one (see coalescer). Negative
	// sends every announce in its own round trip.
	AnnouncePipelines int
	// WriteBehind is how long the refreshes of plain re-announces may
	// wait to be written (DefaultWriteBehind): an announce with no event from a peer this frontend
	// accepted, in the same role, at the same address, is answered from
	// this frontend's view of the swarm (at most 950ms old) and its
	// refresh is queued, coalesced per torrent, and written behind. It may
	// not exceed 1s: a frontend killed with SIGKILL loses at most that
	// much of plain re-announces. Negative: every announce runs
	// announce.lua at once.
	WriteBehind time.Duration
	// KnownPeers bounds the peers a frontend remembers for WriteBehind
	// (1,000,000); past it, peers are forgotten at random and their next
	// announce runs announce.lua.
	KnownPeers int
	// Clock defaults to the wall clock.
	Clock Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// validate fills in defaults and names the first bad field.
func (c *Config) validate() error {
	durations := []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"Interval", &c.Interval, 30 * time.Minute},
		{"MinInterval", &c.MinInterval, 0},
		{"PeerTimeout", &c.PeerTimeout, 0},
		{"PeerRetention", &c.PeerRetention, 24 * time.Hour},
		{"CacheTTL", &c.CacheTTL, 10 * time.Second},
		{"FlushInterval", &c.FlushInterval, time.Second},
		{"SweepInterval", &c.SweepInterval, 15 * time.Second},
		{"HnR.MinSeedTime", &c.HnR.MinSeedTime, 0},
		{"ReaperClaimWindow", &c.ReaperClaimWindow, 15 * time.Minute},
		{"DeletedReasonTTL", &c.DeletedReasonTTL, 72 * time.Hour},
		{"FloodInterval", &c.FloodInterval, 0},
		{"FloodWindow", &c.FloodWindow, time.Hour},
		{"FeedInterval", &c.FeedInterval, 10 * time.Second},
		{"FeedBackstopInterval", &c.FeedBackstopInterval, 10 * time.Minute},
	}
	for _, d := range durations {
		if *d.value < 0 {
			return fmt.Errorf("swarm config: %s must not be negative, got %v", d.name, *d.value)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	if c.MinInterval == 0 {
		c.MinInterval = c.Interval / 2
	}
	if c.MinInterval > c.Interval {
		return fmt.Errorf("swarm config: MinInterval (%v) must not exceed Interval (%v)", c.MinInterval, c.Interval)
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = 2 * c.Interval
	}
	if c.PeerTimeout < c.Interval {
		return fmt.Errorf("swarm config: PeerTimeout (%v) must be at least Interval (%v), or peers expire between announces",
			c.PeerTimeout, c.Interval)
	}
	if c.OpenTorrentRetention == 0 {
		c.OpenTorrentRetention = 24 * time.Hour
	}
	if c.RepairInterval == 0 {
		c.RepairInterval = time.Hour
	}
	if c.FeedBufferRows < 0 {
		return fmt.Errorf("swarm config: FeedBufferRows must not be negative, got %d", c.FeedBufferRows)
	}
	if c.FeedBufferRows == 0 {
		c.FeedBufferRows = defaultFeedBufferRows
	}
	if c.MaxNumWant < 0 {
		return fmt.Errorf("swarm config: MaxNumWant must not be negative, got %d", c.MaxNumWant)
	}
	if c.MaxNumWant == 0 {
		c.MaxNumWant = 200
	}
	if c.MaxPeersPerOwner == 0 {
		c.MaxPeersPerOwner = DefaultMaxPeersOpen
		if c.Private {
			c.MaxPeersPerOwner = DefaultMaxPeersPrivate
		}
	}
	if c.FloodReportAfter == 0 {
		c.FloodReportAfter = 10
	}
	if c.FloodInterval > c.MinInterval {
		return fmt.Errorf("swarm config: FloodInterval (%v) must not exceed MinInterval (%v), or clients that obey min interval are refused",
			c.FloodInterval, c.MinInterval)
	}
	if err := c.Watch.validate(); err != nil {
		return err
	}
	if c.HnR.MinRatio < 0 {
		return fmt.Errorf("swarm config: HnR.MinRatio must not be negative, got %v", c.HnR.MinRatio)
	}
	if c.ExpiryWorkers < 0 {
		return fmt.Errorf("swarm config: ExpiryWorkers must not be negative, got %d", c.ExpiryWorkers)
	}
	if c.ExpiryWorkers == 0 {
		c.ExpiryWorkers = 4
	}
	if c.WriteBehind == 0 {
		c.WriteBehind = DefaultWriteBehind
	}
	if c.WriteBehind > time.Second {
		return fmt.Errorf("swarm config: WriteBehind must not exceed 1s (a killed frontend loses that much of plain re-announces), got %v", c.WriteBehind)
	}
	if c.KnownPeers < 0 {
		return fmt.Errorf("swarm config: KnownPeers must not be negative, got %d", c.KnownPeers)
	}
	if c.KnownPeers == 0 {
		c.KnownPeers = 1_000_000
	}
	if c.AnnouncePipelines == 0 {
		c.AnnouncePipelines = 4
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// DefaultWriteBehind is Config.WriteBehind's default: the most it may
// be, the most a plain re-announce's record may lag. At the bench's 1.5
// announces per torrent per second a longer wait lets each refresh.lua
// call carry more peers and lets more queued refreshes ride along with a
// view read of their torrent (writeBehind.takeAlong): fewer script calls
// for the same writes.
const DefaultWriteBehind = time.Second

// Defaults of Config.MaxPeersPerOwner.
const (
	DefaultMaxPeersPrivate = 5
	DefaultMaxPeersOpen    = 20
)

// WithDefaults returns the configuration with defaults filled in as New
// fills them, or the error New would give: for settings that depend on
// the store's intervals (orphan cleanup's window), checked before
// anything starts.
func (c Config) WithDefaults() (Config, error) {
	err := c.validate()
	return c, err
}

// Store is the Redis swarm store. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	owner  string // this store's id in the sweep and repair leases
	cfg    Config
	clock  Clock
	logger *slog.Logger

	passkeys  passkeyCache
	whitelist whitelistCache
	deny      denyCache
	windows   windowCache
	addresses addressSeen
	pending   pending
	flushMu   sync.Mutex
	frontend  frontendState
	feed      feedBuffer

	counters counters

	// announces carries announce scripts in shared pipelines; nil sends
	// each alone.
	announces *coalescer
	// writeBehind answers plain re-announces and writes them behind; nil
	// when Config.WriteBehind is off.
	writeBehind *writeBehind

	lifecycle sync.Mutex
	started   bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
	listener  *expiryListener

	// feedHook, when set (tests only), runs between a feed batch's
	// delivery and its settling: a kill -9 there is what the feed must
	// survive.
	feedHook func(FeedBatch)

	// pruneHook, when set (tests only), runs in pruneIndex between the
	// read of the torrents and the removal of their entries.
	pruneHook func()
}

var _ bittorrent.Swarms = (*Store)(nil)

// New returns a Store over rdb (a *redis.Client, *redis.ClusterClient or
// any other UniversalClient). Announce and Scrape work at once; Start
// runs the expiry listener, the sweep, the batched flush and the repair.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("swarm: nil Redis client")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{rdb: rdb, owner: lease.NewOwner(), cfg: cfg, clock: cfg.Clock, logger: cfg.Logger}
	s.passkeys = newPasskeyCache(maxCachedPasskeys, maxCachedMisses)
	s.pending.reset()
	s.frontend.init(s.nowMillis())
	s.feed.init()
	if cfg.AnnouncePipelines > 0 {
		s.announces = newCoalescer(s, announceScript, cfg.AnnouncePipelines)
	}
	if cfg.WriteBehind > 0 {
		s.writeBehind = newWriteBehind(s)
	}
	return s, nil
}

// Config returns the store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

func (s *Store) nowMillis() int64 { return s.clock.Now().UnixMilli() }

// Announce records the peer and returns up to NumWant other peers: one
// script round trip when the passkey and whitelist are cached. Refusals
// are *bittorrent.ClientError; other errors are internal.
func (s *Store) Announce(ctx context.Context, req *bittorrent.AnnounceRequest) (*bittorrent.AnnounceResponse, error) {
	var a pendingAnnounce
	defer s.announceEnds(&a)
	if resp, done, err := s.prepareAnnounce(ctx, req, &a, nil); done {
		return resp, err
	}
	var reply []any
	var err error
	if s.announces != nil {
		cmd, err := s.announces.run(ctx, a.call.keys, a.call.args)
		if err == nil {
			reply, err = cmdList(cmd)
		}
		if err != nil {
			return nil, fmt.Errorf("swarm.Announce: %w", err)
		}
	} else if reply, err = s.runScriptList(ctx, "swarm.Announce", announceScript, a.call.keys, a.call.args...); err != nil {
		return nil, err
	}
	return s.finishAnnounce(ctx, &a, reply)
}

// AnnounceBatch answers several announces, each as Announce does and as
// atomic, with the announce.lua calls they need sent in one pipeline: one
// round trip for a batch the UDP listener read at once, rather than one
// go-redis call and a wake-up each. results[i] answers reqs[i].
func (s *Store) AnnounceBatch(ctx context.Context, reqs []*bittorrent.AnnounceRequest, results []bittorrent.AnnounceResult) {
	pending := make([]pendingAnnounce, len(reqs))
	defer func() {
		for i := range pending {
			s.announceEnds(&pending[i])
		}
	}()
	reads := make([]*viewRead, len(reqs))
	calls := make([]scriptCall, 0, len(reqs))
	waiting := make([]int, 0, len(reqs))
	for i, req := range reqs {
		resp, done, err := s.prepareAnnounce(ctx, req, &pending[i], &reads[i])
		switch {
		case done:
			results[i] = bittorrent.AnnounceResult{Resp: resp, Err: err}
			continue
		case reads[i] != nil && reads[i].follower:
			continue // answered once the reads are in
		case reads[i] != nil:
			calls = append(calls, reads[i].sc)
		default:
			calls = append(calls, pending[i].call)
		}
		waiting = append(waiting, i)
	}
	// A view read refresh.lua could not answer from (the peer changed
	// elsewhere, say) goes through announce.lua in one more round trip.
	var again []int
	for j, cmd := range s.runScriptsPipelined(ctx, announceScript, calls) {
		i := waiting[j]
		if rd := reads[i]; rd != nil {
			resp, ok := s.writeBehind.finishRead(rd, cmd, pending[i].numWant, pending[i].now)
			if ok {
				results[i] = bittorrent.AnnounceResult{Resp: resp}
				continue
			}
			if err := s.announceCall(ctx, reqs[i], &pending[i]); err != nil {
				results[i] = bittorrent.AnnounceResult{Err: err}
				continue
			}
			again = append(again, i)
			continue
		}
		results[i] = s.announceResult(ctx, &pending[i], cmd)
	}
	for i, rd := range reads {
		if rd == nil || !rd.follower {
			continue
		}
		if resp, ok := s.writeBehind.follow(ctx, rd, pending[i].numWant, pending[i].now); ok {
			results[i] = bittorrent.AnnounceResult{Resp: resp}
			continue
		}
		if err := s.announceCall(ctx, reqs[i], &pending[i]); err != nil {
			results[i] = bittorrent.AnnounceResult{Err: err}
			continue
		}
		again = append(again, i)
	}
	if len(again) == 0 {
		return
	}
	calls = calls[:0]
	for _, i := range again {
		calls = append(calls, pending[i].call)
	}
	for j, cmd := range s.runScriptsPipelined(ctx, announceScript, calls) {
		results[again[j]] = s.announceResult(ctx, &pending[again[j]], cmd)
	}
}

// announceResult reads one pipelined announce.lua reply.
func (s *Store) announceResult(ctx context.Context, a *pendingAnnounce, cmd *redis.Cmd) bittorrent.AnnounceResult {
	reply, err := cmdList(cmd)
	if err != nil {
		return bittorrent.AnnounceResult{Err: fmt.Errorf("swarm.Announce: %w", err)}
	}
	resp, err := s.finishAnnounce(ctx, a, reply)
	return bittorrent.AnnounceResult{Resp: resp, Err: err}
}

var _ bittorrent.BatchAnnouncer = (*Store)(nil)

// pendingAnnounce is an announce between its checks and announce.lua's
// reply: the call to make and what its reply is read with.
type pendingAnnounce struct {
	req     *bittorrent.AnnounceRequest
	userID  string
	now     int64
	numWant int
	call    scriptCall
	// counted: callBegins counted it in flight at now (announceEnds)
	counted bool
}

// announceEnds ends the count callBegins made for a, once its reply was
// handled, its refresh queued, or it was refused: Announce and
// AnnounceBatch defer it, the one place each.
func (s *Store) announceEnds(a *pendingAnnounce) {
	if a.counted {
		a.counted = false
		s.callEnds(a.now)
	}
}

// prepareAnnounce checks an announce and answers it when it needs no
// announce.lua call (a refusal, or a plain re-announce answered from a
// view: done); otherwise it fills a with the call to make. Given read
// (a batch), a plain re-announce whose view must be read first is left
// in *read, to be sent with the batch, instead of read here.
func (s *Store) prepareAnnounce(ctx context.Context, req *bittorrent.AnnounceRequest, a *pendingAnnounce, read **viewRead) (
	resp *bittorrent.AnnounceResponse, done bool, err error) {
	s.pending.addStat(statRequests, 1)
	if req == nil {
		return nil, true, errors.New("swarm.Announce: nil request")
	}
	if !req.Addr.IsValid() || req.Addr.Port() == 0 {
		return nil, true, &bittorrent.ClientError{Reason: "invalid peer address or port"}
	}
	if req.Event > bittorrent.EventStopped {
		return nil, true, &bittorrent.ClientError{Reason: "invalid event"}
	}
	if err := s.denied(ctx, req.InfoHash, req.PeerID); err != nil {
		return nil, true, err
	}
	userID, err := s.admit(ctx, req.Passkey, req.PeerID)
	if err != nil {
		return nil, true, err
	}
	numWant := min(max(req.NumWant, 0), s.cfg.MaxNumWant)
	var now int64
	if s.feedOn() && s.accounting(userID) {
		// Its script may stamp the user's record (announce.lua, or a
		// view read's refresh.lua): in flight for "fed up to" from
		// this time on, until the caller's one deferred callEnds
		// (announceEnds).
		now, a.counted = s.callBegins(), true
	} else {
		now = s.nowMillis()
	}
	s.watchAddress(ctx, userID, req.Addr.Addr(), now)
	a.req, a.userID, a.now, a.numWant = req, userID, now, numWant
	if s.writeBehind != nil && read != nil {
		resp, rd, ok := s.writeBehind.answerOrRead(ctx, req, userID, numWant, now)
		if ok && rd == nil {
			return resp, true, nil
		}
		if rd != nil {
			*read = rd
			return nil, false, nil
		}
	} else if s.writeBehind != nil {
		if resp, ok := s.writeBehind.answer(ctx, req, userID, numWant, now); ok {
			return resp, true, nil
		}
	}
	if err := s.announceCall(ctx, req, a); err != nil {
		return nil, true, err
	}
	return nil, false, nil
}

// announceCall fills a.call, announce.lua's call for req (a's user, time
// and numwant set).
func (s *Store) announceCall(ctx context.Context, req *bittorrent.AnnounceRequest, a *pendingAnnounce) error {
	userID, now, numWant := a.userID, a.now, a.numWant
	private := "0"
	if s.cfg.Private {
		private = "1"
	}
	timeout := s.cfg.PeerTimeout.Milliseconds()
	accounting, windowUp, windowDown := "0", 100, 100
	if s.accounting(userID) {
		accounting = "1"
		var err error
		if windowUp, windowDown, err = s.windowRates(ctx, now); err != nil {
			return err
		}
		// The script may stamp the user's record with this frontend's id.
		if err = s.ensureBeat(ctx); err != nil {
			return err
		}
	}
	// The writer's stamp is sent only by a frontend that delivers the
	// feed: one with no outbox is never registered, so a record stamped
	// with its id would be found by no backstop ("": no stamp).
	writer := ""
	if accounting == "1" && s.feedOn() {
		writer = s.owner
	}
	a.call.keys = btstore.AnnounceKeys(req.InfoHash, req.PeerID, userID)
	a.call.args = []any{now, req.PeerID[:], peerEntry(req.PeerID, req.Addr), req.Uploaded, req.Downloaded, req.Left,
		int(req.Event), numWant, private, userID,
		timeout, s.cfg.PeerRetention.Milliseconds(),
		s.openRetentionMillis(), s.cfg.HnR.MinSeedTime.Milliseconds(), s.cfg.HnR.MinRatio, now + timeout,
		compactLen(req.PeerFamily), s.cfg.ReaperClaimWindow.Milliseconds(), max(s.cfg.MaxPeersPerOwner, 0),
		s.cfg.FloodInterval.Milliseconds(), s.cfg.FloodWindow.Milliseconds(), max(s.cfg.FloodReportAfter, 0),
		s.lastAcceptedHere(req, userID), accounting, windowUp, windowDown, writer, s.cfg.Watch.LedgerEntries}
	switch {
	case userID == "":
		// Open mode: announce.lua reads its last arguments for a user
		// only; each is a string Redis reads into the script's ARGV.
		a.call.args = a.call.args[:23]
	case accounting == "0":
		// The writer's stamp and the ledger's size are read only with
		// accounting (user_feed, user_ledger).
		a.call.args = a.call.args[:26]
	}
	return nil
}

// finishAnnounce reads announce.lua's reply to a's call.
func (s *Store) finishAnnounce(ctx context.Context, a *pendingAnnounce, reply []any) (*bittorrent.AnnounceResponse, error) {
	req, userID, now, timeout := a.req, a.userID, a.now, s.cfg.PeerTimeout.Milliseconds()
	var err error
	code := replyInt(reply[0])
	if s.writeBehind != nil && code != 1 && code != codeFlood {
		s.writeBehind.peers.forget(peerKey{hash: req.InfoHash, peer: req.PeerID}, 0)
	}
	switch code {
	case 1:
	case codeUnregistered:
		if len(reply) > 1 {
			return nil, &bittorrent.ClientError{Reason: "torrent deleted: " + replyString(reply[1])}
		}
		return nil, errUnregistered
	case codePeerTaken:
		return nil, &bittorrent.ClientError{Reason: "peer_id is in use by another user in this swarm"}
	case codeFlood:
		return nil, s.flood(ctx, req, userID, reply)
	case codePeerLimit:
		s.counters.peerLimitRefused.Add(1)
		if s.cfg.Private {
			return nil, &bittorrent.ClientError{Reason: fmt.Sprintf(
				"your account has %d peers on this torrent already: stop one, or wait for old ones to time out", s.cfg.MaxPeersPerOwner)}
		}
		return nil, &bittorrent.ClientError{Reason: fmt.Sprintf(
			"your address has %d peers on this torrent already: stop one, or wait for old ones to time out", s.cfg.MaxPeersPerOwner)}
	default:
		return nil, fmt.Errorf("swarm.Announce: script returned code %d", code)
	}
	accounting := s.accounting(userID)
	if len(reply) < announceHeader {
		return nil, fmt.Errorf("swarm.Announce: %w (%d elements)", errBadReply, len(reply))
	}
	credit, width, err := parseCredit(reply[announceHeader:], accounting)
	if err != nil {
		return nil, fmt.Errorf("swarm.Announce: %w", err)
	}
	if len(reply) != announceHeader+width {
		return nil, fmt.Errorf("swarm.Announce: %w (%d elements, a credit reply of %d)", errBadReply, len(reply), width)
	}
	resp := &bittorrent.AnnounceResponse{
		Interval:    s.cfg.Interval,
		MinInterval: s.cfg.MinInterval,
		Complete:    replyInt(reply[1]),
		Incomplete:  replyInt(reply[2]),
		Downloaded:  replyInt(reply[3]),
	}
	packed, _ := reply[9].(string)
	resp.Peers, err = unpackPeers(packed)
	if err != nil {
		return nil, fmt.Errorf("swarm.Announce: %w", err)
	}

	if replyInt(reply[4]) == 1 {
		// The swarm had no peer: index it for the sweep now rather than
		// in the batched flush, so a crash cannot leave a swarm whose
		// peers only the keyspace events would ever remove. A plain ZADD,
		// not LT: an entry still there is stale (the swarm was empty, so
		// no deadline of its is older than this one), and a sweep that
		// emptied the swarm and read that stale score settles the entry
		// only if the score is unchanged (due_settle.lua). Keeping the
		// stale score would let that settle drop this live swarm.
		err := s.rdb.ZAdd(ctx, btstore.DueKey(btstore.DueShard(req.InfoHash)),
			redis.Z{Score: float64(now + timeout), Member: btstore.HexInfoHash(req.InfoHash)}).Err()
		if err != nil {
			// The announce itself is recorded; Repair re-indexes swarms.
			s.logger.Warn("swarm: indexing a new swarm for expiry failed", "info_hash", btstore.HexInfoHash(req.InfoHash), "error", err)
		}
	}
	if s.writeBehind != nil {
		changed := replyInt(reply[5]) != 0 || replyInt(reply[6]) != 0 || replyInt(reply[7]) != 0
		s.writeBehind.accepted(req, userID, now, changed)
	}
	s.recordAnnounce(ctx, req, userID, now, reply, &credit)
	return resp, nil
}

// accounting tells whether a user's announces are credited (private
// mode, accounting on).
func (s *Store) accounting(userID string) bool { return userID != "" && !s.cfg.NoAccounting }

// lastAcceptedHere is the time (ms) of the peer's last announce this
// frontend accepted, for flood control in announce.lua (0: unknown, or
// flood control off).
func (s *Store) lastAcceptedHere(req *bittorrent.AnnounceRequest, userID string) int64 {
	if s.writeBehind == nil || s.cfg.FloodInterval <= 0 {
		return 0
	}
	if known, ok := s.writeBehind.peers.get(peerKey{hash: req.InfoHash, peer: req.PeerID}); ok && known.user == userID {
		return known.last
	}
	return 0
}

// announceHeader is how many elements announce.lua's reply has before
// its credit reply (credit_reply.go).
const announceHeader = 12

// recordAnnounce batches the global side effects of one announce (reply:
// announce.lua's, credit its credit reply read).
func (s *Store) recordAnnounce(ctx context.Context, req *bittorrent.AnnounceRequest, userID string, now int64, reply []any,
	credit *creditReply) {
	hash := req.InfoHash
	dSeeders, dLeechers, snatched := replyInt(reply[5]), replyInt(reply[6]), replyInt(reply[7])
	torrentID := replyString(reply[8])
	seeders, leechers := replyInt(reply[1]), replyInt(reply[2])
	var update *userUpdate
	if userID != "" && credit.bits > 0 {
		update = &userUpdate{
			key:     userTorrent{user: userID, torrent: torrentID},
			hash:    hash,
			bits:    credit.bits,
			version: credit.version,
		}
	}
	moved := credit.moved
	full := s.pending.addAnnounce(hash, dSeeders, dLeechers, snatched, userID,
		s.movedBy(userID, moved[0], moved[1], moved[2], moved[3]), update)
	if credit.row.Seq != 0 && s.feedOn() {
		// Held before it is counted stamped, and both before the
		// announce's call ends (feedUpTo): a round that saw the stamp
		// takes the row.
		t := seenTorrent{id: torrentID, seeders: seeders, leechers: leechers, snatches: replyInt(reply[3]), at: now}
		if seeders > 0 {
			t.lastAction = now // announce.lua's torrent_counts moved last_action to now
		}
		row := credit.row
		row.UserID = userID
		s.holdRow(hash, now, row, t)
		s.stamped()
	}
	if full {
		s.flushIfIdle(ctx)
	}
	s.reportToken(ctx, credit.tokenEvent, hash, torrentID, userID, credit.tokenUsed)
	// the peer is among the leechers after the announce unless it left or seeds
	leeching := req.Event != bittorrent.EventStopped && req.Left != 0
	if f, ok := credit.watch(leechers, replyInt(reply[10]), replyInt(reply[11]), leeching); ok {
		s.watchTransfer(hash, torrentID, userID, now, moved, f)
	}
	if seeders+leechers == 0 && torrentID == "" {
		// the last peer of an unregistered torrent stopped: it may be an
		// orphan a window from now (a rare announce, so one more write)
		s.markOrphanDue(ctx, hash)
	}
}

// reportToken hands a token event of an announce script's reply (event:
// 0 none, tokenUsed, tokenEnded; used: the token's first use, ms) to
// Config.OnToken.
func (s *Store) reportToken(ctx context.Context, event int64, hash bittorrent.InfoHash, torrentID, userID string, used int64) {
	if event == 0 || s.cfg.OnToken == nil {
		return
	}
	kind := TokenUsed
	if event == tokenEnded {
		kind = TokenEnded
	}
	s.cfg.OnToken(ctx, TokenEvent{Kind: kind, InfoHash: hash, TorrentID: torrentID, UserID: userID,
		Used: time.UnixMilli(used).UTC(), At: s.clock.Now().UTC()})
}

// markOrphanDue tells orphan cleanup to look at a torrent a protection
// window after now. A lost hint (Redis unreachable, a kill -9 before it)
// costs only promptness: cleanup's backstop walk finds the torrent.
func (s *Store) markOrphanDue(ctx context.Context, hash bittorrent.InfoHash) {
	if err := btstore.MarkTorrentDue(ctx, s.rdb, hash, s.nowMillis()); err != nil {
		s.logger.Warn("swarm: recording a possible orphan for cleanup failed; its backstop walk finds it", "info_hash",
			btstore.HexInfoHash(hash), "error", err)
	}
}

func (s *Store) openRetentionMillis() int64 {
	if s.cfg.OpenTorrentRetention < 0 {
		return 0
	}
	return s.cfg.OpenTorrentRetention.Milliseconds()
}

// Scrape returns one entry per hash, in order, in one pipelined round
// trip. Unknown torrents, and in private mode unregistered ones, get zero
// counts; in private mode the passkey must be valid.
func (s *Store) Scrape(ctx context.Context, passkey string, hashes []bittorrent.InfoHash) ([]bittorrent.ScrapeEntry, error) {
	s.pending.addStat(statRequests, 1)
	if s.cfg.Private {
		if _, err := s.userForPasskey(ctx, passkey); err != nil {
			return nil, err
		}
	}
	s.pending.addStat(statScrapes, 1)
	entries := make([]bittorrent.ScrapeEntry, len(hashes))
	if len(hashes) == 0 {
		return entries, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(hashes))
	for i, hash := range hashes {
		cmds[i] = pipe.HMGet(ctx, btstore.TorrentKey(hash), "seeders", "leechers", "snatches", "id")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("swarm.Scrape: %w", err)
	}
	deny, err := s.denyLists(ctx)
	if err != nil {
		return nil, err
	}
	for i, cmd := range cmds {
		v := cmd.Val()
		if s.cfg.Private && v[3] == nil {
			continue
		}
		if _, denied := deny.torrents[hashes[i]]; denied {
			continue
		}
		entries[i] = bittorrent.ScrapeEntry{
			Complete:   replyInt(v[0]),
			Incomplete: replyInt(v[1]),
			Downloaded: replyInt(v[2]),
		}
	}
	return entries, nil
}

// counters are the store's own activity counts, for metrics and tests.
type counters struct {
	expiredByEvent atomic.Int64
	expiredBySweep atomic.Int64
	eventsReceived atomic.Int64
	eventsDropped  atomic.Int64
	flushFailures  atomic.Int64

	peerLimitRefused atomic.Int64
	floodRefused     atomic.Int64
	floodReported    atomic.Int64
	denied           atomic.Int64
	cheats           atomic.Int64
	// feedRowsDropped counts the feed rows dropped past
	// Config.FeedBufferRows (feedbuf.go); feedDropsLogged is what the
	// feed loop last logged of it.
	feedRowsDropped atomic.Int64
	feedDropsLogged atomic.Int64
}

// FeedRowsDropped counts the feed rows this Store dropped from memory past
// Config.FeedBufferRows: their records are delivered by its own scan.
func (s *Store) FeedRowsDropped() int64 { return s.counters.feedRowsDropped.Load() }

// PeerLimitRefused counts the announces this Store refused because their
// owner had Config.MaxPeersPerOwner peers on the torrent.
func (s *Store) PeerLimitRefused() int64 { return s.counters.peerLimitRefused.Load() }

// ExpiryStats counts this Store's expiry work since New.
type ExpiryStats struct {
	ExpiredByEvent int64 // peers removed on a keyspace expiry event
	ExpiredBySweep int64 // peers removed by the sweep
	EventsReceived int64 // timeout-key expiry events received
	EventsDropped  int64 // events dropped because the workers were behind (the sweep removes those peers)
	FlushFailures  int64 // batched writes that failed and were kept for the next flush
}

// ExpiryStats returns the store's expiry counters.
func (s *Store) ExpiryStats() ExpiryStats {
	return ExpiryStats{
		ExpiredByEvent: s.counters.expiredByEvent.Load(),
		ExpiredBySweep: s.counters.expiredBySweep.Load(),
		EventsReceived: s.counters.eventsReceived.Load(),
		EventsDropped:  s.counters.eventsDropped.Load(),
		FlushFailures:  s.counters.flushFailures.Load(),
	}
}
