package swarm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// A plain re-announce (no event, the same role, address and user as the
// peer's last announce this frontend accepted, within the peer's timeout)
// changes no swarm: it refreshes its peer's deadline and record and
// credits its transfer. Such announces are answered here from a
// per-frontend view of the swarm (counts and a sample of each role hash,
// at most maxViewAge old) and their refreshes are written behind:
// queued, coalesced per torrent (the newest announce of a peer wins; the
// counters are cumulative, so nothing is lost or counted twice) and
// written every Config.WriteBehind by refresh.lua, one call per torrent,
// in shared pipelines. Everything else goes through announce.lua at once.

// maxViewAge bounds how old the view a plain re-announce is answered from
// may be. A view is stamped with the time taken before its read was sent,
// so what it holds is Redis's state at that time or later, and a change
// another frontend made is missing from this frontend's answers for less
// than maxViewAge: within the one second the tracker promises, with 50 ms
// to spare for millisecond rounding. (It was 750 ms, which counted the
// read's own time on top of the age; the stamp already covers it.)
const maxViewAge = 950 * time.Millisecond

// Bounds of the write-behind state, so memory stays bounded whatever the
// load: past them a frontend forgets peers or views at random (each is
// then read or written through announce.lua again), or sends plain
// re-announces through announce.lua until the next write.
const (
	maxQueuedRefreshes = 200_000
	// a view holds up to 2 x MaxNumWant entries: tens of bytes each
	maxSwarmViews          = 65_536
	maxRefreshPeersPerCall = 64
	maxRefreshCallsPerPipe = 512
	writeBehindShards      = 64
)

// The write-behind loop ticks drainTicks times per Config.WriteBehind and
// writes a torrent's refreshes drainAfterTicks ticks after the tick its
// oldest was queued in: within 900 ms of that announce at the 1 s
// default, and not before 800 ms, so a view read of the torrent in
// between takes them along.
const (
	drainTicks      = 10
	drainAfterTicks = drainTicks - 1
)

// The codes refresh.lua answers with, named once here.
const (
	codeRefreshed = 1
	codeStale     = 0
	codeDropped   = -1
)

var refreshCodes = map[string]int64{
	"REFRESHED": codeRefreshed, "STALE": codeStale, "DROPPED": codeDropped, "UNREGISTERED": codeUnregistered,
	"TOKEN_USED": tokenUsed, "TOKEN_ENDED": tokenEnded, // user_credit's events, as announce.lua's
	"CHEAT_NO_LEECHER": cheatNoLeecher, "CHEAT_UPLOAD_RATE": cheatUploadRate, "CHEAT_OVER_DOWNLOAD": cheatOverDownload,
	// the credit reply's groups, bits of its mask (credit_reply.go)
	"CREDIT_EXTRA": creditExtra, "CREDIT_TOKEN": creditToken, "CREDIT_ROW": creditRow,
	"CREDIT_ROW_EXTRA": creditRowExtra, "CREDIT_SNATCHED": creditSnatched,
}

// refresh.lua's reply: a header of refreshHeader elements
// (refreshPrivateHeader in private mode, with the torrent's size and
// leecher_left), then per peer its status and, in private mode, its
// credit reply (credit_reply.go); open mode, with no user to credit,
// answers a peer's status alone.
const (
	refreshHeader        = 7
	refreshPrivateHeader = 9
)

var refreshScript = btstore.Script("refresh.lua", btstore.LuaCodes(refreshCodes), prelude)

// peerKey names one peer in one swarm.
type peerKey struct {
	hash bittorrent.InfoHash
	peer bittorrent.PeerID
}

// knownPeer is what this frontend accepted last from a peer.
type knownPeer struct {
	user    string
	addr    string // compact address, as its entry ends
	seeding bool
	last    int64 // ms of the last accepted announce here
}

// knownPeers is a bounded map of the peers this frontend accepted.
type knownPeers struct {
	perShard int
	shards   [writeBehindShards]struct {
		mu sync.Mutex
		m  map[peerKey]knownPeer
	}
}

func newKnownPeers(limit int) *knownPeers {
	k := &knownPeers{perShard: max(1, limit/writeBehindShards)}
	for i := range k.shards {
		k.shards[i].m = make(map[peerKey]knownPeer)
	}
	return k
}

func (k *knownPeers) shard(key peerKey) int { return int(key.hash[1]^key.peer[19]) % writeBehindShards }

func (k *knownPeers) get(key peerKey) (knownPeer, bool) {
	sh := &k.shards[k.shard(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p, ok := sh.m[key]
	return p, ok
}

func (k *knownPeers) put(key peerKey, p knownPeer) {
	sh := &k.shards[k.shard(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; !ok && len(sh.m) >= k.perShard {
		for old := range sh.m { // map order: an arbitrary peer goes
			delete(sh.m, old)
			break
		}
	}
	sh.m[key] = p
}

// forget drops a peer unless this frontend accepted an announce of it
// after notAfter (ms; 0: whatever it accepted).
func (k *knownPeers) forget(key peerKey, notAfter int64) {
	sh := &k.shards[k.shard(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p, ok := sh.m[key]; ok && (notAfter == 0 || p.last <= notAfter) {
		delete(sh.m, key)
	}
}

// swarmView is this frontend's copy of one swarm's counts and a sample of
// its peers. Its fields are replaced, never changed in place, so a copy
// taken under mu stays valid.
type swarmView struct {
	mu         sync.Mutex    // held while the view is read from Redis
	at         int64         // ms when read; 0: no copy
	readingAt  int64         // ms a batch's read of the view was taken (0: none in flight)
	readDone   chan struct{} // closed when that read is in
	gen        uint64        // counts invalidations, so a drain's read installs only over what it saw
	seeders    int64
	leechers   int64
	snatches   int64
	registered bool
	seeds      []string // peer entries
	leechs     []string
}

type swarmViews struct {
	perShard int
	shards   [writeBehindShards]struct {
		mu sync.Mutex
		m  map[bittorrent.InfoHash]*swarmView
	}
}

func newSwarmViews(limit int) *swarmViews {
	v := &swarmViews{perShard: max(1, limit/writeBehindShards)}
	for i := range v.shards {
		v.shards[i].m = make(map[bittorrent.InfoHash]*swarmView)
	}
	return v
}

// of returns the torrent's view, a new empty one when create is set and
// it has none (nil otherwise).
func (v *swarmViews) of(hash bittorrent.InfoHash, create bool) *swarmView {
	sh := &v.shards[int(hash[2])%writeBehindShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	view := sh.m[hash]
	if view == nil && create {
		if len(sh.m) >= v.perShard {
			for old := range sh.m {
				delete(sh.m, old)
				break
			}
		}
		view = &swarmView{}
		sh.m[hash] = view
	}
	return view
}

// invalidate makes the next plain re-announce of the torrent read its
// swarm again: this frontend just changed it.
func (v *swarmViews) invalidate(hash bittorrent.InfoHash) {
	if view := v.of(hash, false); view != nil {
		view.mu.Lock()
		view.at = 0
		view.gen++
		view.mu.Unlock()
	}
}

// generation returns the torrent's view and its generation, nil when it
// has none (a torrent no plain re-announce was answered for lately).
func (v *swarmViews) generation(hash bittorrent.InfoHash) (*swarmView, uint64) {
	view := v.of(hash, false)
	if view == nil {
		return nil, 0
	}
	view.mu.Lock()
	defer view.mu.Unlock()
	return view, view.gen
}

// queuedRefresh is one plain re-announce waiting to be written.
type queuedRefresh struct {
	user                 string
	addr                 string
	uploaded, downloaded uint64
	left                 uint64
	at                   int64
	// the site-wide windows' rates (percent) at the announce's time: it
	// is credited as when it was answered (100, 100 without accounting)
	windowUp, windowDown int
}

// refreshQueue holds the refreshes waiting, per torrent and peer: a
// peer's newer announce replaces its older one. Each torrent's entry
// remembers the write-behind tick it was queued in (its oldest refresh's),
// so the loop writes it only when that refresh is nearly as old as
// Config.WriteBehind allows: until then a view read of the torrent takes
// the queue along, and the one call writing it can read the view too.
type refreshQueue struct {
	mu       sync.Mutex
	torrents map[bittorrent.InfoHash]*queuedTorrent
	size     int
	// writing counts the refreshes take and takeDue handed to a drain
	// that has not finished writing them (written): len counts them, so
	// a length of 0 means written, not merely taken
	writing int
	// held counts the sets of refreshes taken out of the queue (by a
	// drain, or along with a view read) and not yet written or put back,
	// by the oldest announce time (at, ms) among each set: with the
	// queue's own entries, what a feed round must not be fed up past
	// (oldestLocked, decision 6)
	held map[int64]int
	tick int64 // the loop's ticks so far (takeDue)
	// due lists, per tick (modulo len), the torrents whose entry was made
	// then: takeDue looks at one list, not the whole queue
	due [drainAfterTicks + 1][]bittorrent.InfoHash
}

// queuedTorrent is one torrent's waiting refreshes.
type queuedTorrent struct {
	peers map[bittorrent.PeerID]queuedRefresh
	tick  int64 // the tick its oldest waiting refresh was queued in
}

// add queues a refresh; false when the queue is full. A torrent new to
// the queue is stamped with tick (the current one, or an earlier one for
// a refresh put back, so it is written at the next tick).
func (q *refreshQueue) add(hash bittorrent.InfoHash, peer bittorrent.PeerID, r queuedRefresh) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.addLocked(hash, peer, r, q.tick)
}

func (q *refreshQueue) addLocked(hash bittorrent.InfoHash, peer bittorrent.PeerID, r queuedRefresh, tick int64) bool {
	t := q.torrents[hash]
	if t == nil {
		if q.size >= maxQueuedRefreshes {
			return false
		}
		if q.torrents == nil {
			q.torrents = make(map[bittorrent.InfoHash]*queuedTorrent)
		}
		t = &queuedTorrent{peers: make(map[bittorrent.PeerID]queuedRefresh, 4), tick: tick}
		q.torrents[hash] = t
		slot := q.dueSlot(tick)
		*slot = append(*slot, hash)
	}
	if _, ok := t.peers[peer]; !ok {
		if q.size >= maxQueuedRefreshes {
			return false
		}
		q.size++
	}
	t.tick = min(t.tick, tick)
	t.peers[peer] = r
	return true
}

func (q *refreshQueue) dueSlot(tick int64) *[]bittorrent.InfoHash {
	n := int64(len(q.due))
	return &q.due[((tick%n)+n)%n]
}

// putBack requeues a refresh whose write failed, unless a newer one of
// the peer is queued; a torrent new to the queue is due at the next tick,
// as its write was.
func (q *refreshQueue) putBack(hash bittorrent.InfoHash, peer bittorrent.PeerID, r queuedRefresh) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t := q.torrents[hash]; t != nil && t.peers[peer].at > r.at {
		return
	}
	q.addLocked(hash, peer, r, q.tick+1-drainAfterTicks)
}

// takeTorrent moves up to limit of the torrent's queued refreshes into
// call, leaving out peer skip's: its refresh, if queued, is taken too
// (call.replaced), since the refresh call carries a newer one of it.
// What it took is held (call.held) until releaseCall.
func (q *refreshQueue) takeTorrent(call *refreshCall, skip bittorrent.PeerID, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.torrents[call.hash]
	if t == nil {
		return
	}
	oldest := int64(math.MaxInt64)
	if r, ok := t.peers[skip]; ok {
		call.replaced = &r
		oldest = r.at
		delete(t.peers, skip)
		q.size--
	}
	for id, r := range t.peers {
		if len(call.ids) >= limit {
			break
		}
		call.ids = append(call.ids, id)
		call.peers = append(call.peers, r)
		oldest = min(oldest, r.at)
		delete(t.peers, id)
		q.size--
	}
	if len(t.peers) == 0 {
		delete(q.torrents, call.hash)
	}
	if oldest != math.MaxInt64 {
		q.holdLocked(oldest)
		call.held, call.heldAt = true, oldest
	}
}

// releaseCall ends the hold of what takeTorrent took along into call,
// once its reply was applied or it was put back.
func (q *refreshQueue) releaseCall(call *refreshCall) {
	if !call.held {
		return
	}
	call.held = false
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(call.heldAt)
}

func (q *refreshQueue) holdLocked(at int64) {
	if q.held == nil {
		q.held = make(map[int64]int)
	}
	q.held[at]++
}

func (q *refreshQueue) releaseLocked(at int64) {
	if q.held[at]--; q.held[at] <= 0 {
		delete(q.held, at)
	}
}

// oldestLocked is the oldest announce time (ms) among the refreshes
// queued or held (taken and not yet written or put back);
// math.MaxInt64: none. A walk of the whole queue, taken once per feed
// round (feedUpTo), not on the announce's path.
func (q *refreshQueue) oldestLocked() int64 {
	oldest := int64(math.MaxInt64)
	for _, t := range q.torrents {
		for _, r := range t.peers {
			oldest = min(oldest, r.at)
		}
	}
	for at := range q.held {
		oldest = min(oldest, at)
	}
	return oldest
}

// holdTakenLocked holds the oldest announce time among taken refreshes
// until written is called with it, and returns it.
func (q *refreshQueue) holdTakenLocked(taken map[bittorrent.InfoHash]*queuedTorrent) int64 {
	oldest := int64(math.MaxInt64)
	for _, t := range taken {
		for _, r := range t.peers {
			oldest = min(oldest, r.at)
		}
	}
	if oldest != math.MaxInt64 {
		q.holdLocked(oldest)
	}
	return oldest
}

// take empties the queue and returns what it held, and the oldest
// announce time among it, held until written.
func (q *refreshQueue) take() (map[bittorrent.InfoHash]*queuedTorrent, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	taken := q.torrents
	q.writing += q.size
	q.torrents, q.size = nil, 0
	for i := range q.due {
		q.due[i] = q.due[i][:0]
	}
	return taken, q.holdTakenLocked(taken)
}

// takeDue counts a tick and takes the torrents queued drainAfterTicks
// ticks ago or earlier, as take does.
func (q *refreshQueue) takeDue() (map[bittorrent.InfoHash]*queuedTorrent, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tick++
	dueTick := q.tick - drainAfterTicks
	slot := q.dueSlot(dueTick)
	var due map[bittorrent.InfoHash]*queuedTorrent
	for _, hash := range *slot {
		// An entry made later (this one was taken and queued again) has
		// its own place in a later list.
		t := q.torrents[hash]
		if t == nil || t.tick > dueTick {
			continue
		}
		if due == nil {
			due = make(map[bittorrent.InfoHash]*queuedTorrent, len(*slot))
		}
		due[hash] = t
		delete(q.torrents, hash)
		q.size -= len(t.peers)
		q.writing += len(t.peers)
	}
	*slot = (*slot)[:0]
	return due, q.holdTakenLocked(due)
}

// written says a drain is done with n refreshes take or takeDue handed
// it (each written or put back), whose oldest announce time was oldest.
func (q *refreshQueue) written(n int, oldest int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.writing -= n
	if oldest != math.MaxInt64 {
		q.releaseLocked(oldest)
	}
}

// len counts the refreshes waiting, those a drain is writing included.
func (q *refreshQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.size + q.writing
}

// writeBehind answers plain re-announces and writes their refreshes.
type writeBehind struct {
	s       *Store
	peers   *knownPeers
	views   *swarmViews
	queue   refreshQueue
	drainMu sync.Mutex // one write of the queue at a time
	// stopMu orders stop after every answer that queued before it, so
	// Stop's last drain writes them all.
	stopMu  sync.RWMutex
	stopped bool

	// reads carries the view reads (with their announce's refresh) in
	// shared pipelines, like announce.lua's; nil sends each alone.
	reads *coalescer

	answered, dropped atomic.Int64
	// where plain re-announces went: view reads (refresh.lua with the
	// announce, answered from its reply), the queued refreshes those
	// reads took along, and the drain's refresh.lua calls and the peers
	// they wrote
	viewReads, alongPeers, drainCalls, drainPeers atomic.Int64
	// views installed from the loop's refresh.lua calls (drainDue)
	drainReads atomic.Int64
}

func newWriteBehind(s *Store) *writeBehind {
	w := &writeBehind{s: s, peers: newKnownPeers(s.cfg.KnownPeers), views: newSwarmViews(maxSwarmViews)}
	if s.cfg.AnnouncePipelines > 0 {
		w.reads = newCoalescer(s, refreshScript, s.cfg.AnnouncePipelines)
	}
	return w
}

// answer answers a plain re-announce from the view and queues its
// refresh; false: the announce must go through announce.lua.
func (w *writeBehind) answer(ctx context.Context, req *bittorrent.AnnounceRequest, userID string, numWant int, now int64) (*bittorrent.AnnounceResponse, bool) {
	w.stopMu.RLock()
	defer w.stopMu.RUnlock()
	p, ok := w.plain(ctx, req, userID, now)
	if !ok {
		return nil, false
	}
	view, written, err := w.view(ctx, req.InfoHash, now, req.PeerID, p.refresh)
	if err != nil {
		w.s.logger.Debug("swarm: no swarm view; announcing in full", "error", err)
		return nil, false
	}
	return w.respond(p, view, written, numWant, now)
}

// plainAnswer is a plain re-announce this frontend may answer from a view.
type plainAnswer struct {
	req     *bittorrent.AnnounceRequest
	key     peerKey
	known   knownPeer
	refresh queuedRefresh
}

// plain tells whether req is a plain re-announce of a peer this frontend
// accepted, and what its refresh writes. The caller holds stopMu.
func (w *writeBehind) plain(ctx context.Context, req *bittorrent.AnnounceRequest, userID string, now int64) (plainAnswer, bool) {
	if req.Event != bittorrent.EventNone || w.stopped {
		return plainAnswer{}, false
	}
	key := peerKey{hash: req.InfoHash, peer: req.PeerID}
	known, ok := w.peers.get(key)
	seeding := req.Left == 0
	if !ok || known.user != userID || known.seeding != seeding || known.addr != string(compactAddr(req.Addr)) ||
		now <= known.last || now-known.last >= w.s.cfg.PeerTimeout.Milliseconds() {
		return plainAnswer{}, false
	}
	// Flood control from this frontend's memory of the peer; a refusal is
	// announce.lua's to count and report, against the peer's record.
	if flood := w.s.cfg.FloodInterval.Milliseconds(); flood > 0 && now-known.last < flood {
		return plainAnswer{}, false
	}
	refresh := queuedRefresh{user: userID, addr: known.addr,
		uploaded: req.Uploaded, downloaded: req.Downloaded, left: req.Left, at: now, windowUp: 100, windowDown: 100}
	if w.s.accounting(userID) {
		var err error
		if refresh.windowUp, refresh.windowDown, err = w.s.windowRates(ctx, now); err != nil {
			return plainAnswer{}, false // announce.lua's path reports it
		}
	}
	return plainAnswer{req: req, key: key, known: known, refresh: refresh}, true
}

// respond answers p from view, queueing its refresh unless written. The
// caller holds stopMu.
func (w *writeBehind) respond(p plainAnswer, view viewCopy, written bool, numWant int, now int64) (*bittorrent.AnnounceResponse, bool) {
	req := p.req
	if w.s.cfg.Private && !view.registered {
		return nil, false // announce.lua refuses it, with the reason
	}
	if !written && !w.queue.add(req.InfoHash, req.PeerID, p.refresh) {
		return nil, false
	}
	p.known.last = now
	w.peers.put(p.key, p.known)
	w.answered.Add(1)
	w.s.pending.addStat(statAnnounces, 1)
	resp := &bittorrent.AnnounceResponse{
		Interval:    w.s.cfg.Interval,
		MinInterval: w.s.cfg.MinInterval,
		Complete:    view.seeders,
		Incomplete:  view.leechers,
		Downloaded:  view.snatches,
	}
	only := compactLen(req.PeerFamily)
	if numWant > 0 {
		// Sized once: appending from nil grew it 1, 2, 4, 8, ... (an
		// allocation and a copy each) on every answer.
		have := len(view.leechs)
		if req.Left != 0 {
			have += len(view.seeds)
		}
		resp.Peers = make([]bittorrent.Peer, 0, min(numWant, have))
		if req.Left == 0 {
			resp.Peers = pickEntries(resp.Peers, view.leechs, numWant, nil, only)
		} else {
			resp.Peers = pickEntries(resp.Peers, view.seeds, numWant, nil, only)
			resp.Peers = pickEntries(resp.Peers, view.leechs, numWant-len(resp.Peers), req.PeerID[:], only)
		}
	}
	return resp, true
}

// viewRead is a plain re-announce whose view must be read first, in the
// pipeline of the batch it came in (Store.AnnounceBatch): its refresh.lua
// call writes the announce and reads the view. A follower waits for a
// read already taken (by its batch or another) and is answered from the
// view it installs, so a hot torrent's view is read once, not once per
// announce.
type viewRead struct {
	p        plainAnswer
	v        *swarmView
	follower bool
	done     chan struct{} // the read a follower waits for; a leader's own, closed by finishRead
	call     refreshCall
	sc       scriptCall
}

// answerOrRead is answer for a batch: where answer would read the view
// (one round trip of its own), it returns the read to send with the
// batch instead; finishRead answers it from the reply.
func (w *writeBehind) answerOrRead(ctx context.Context, req *bittorrent.AnnounceRequest, userID string, numWant int, now int64) (
	*bittorrent.AnnounceResponse, *viewRead, bool) {
	w.stopMu.RLock()
	defer w.stopMu.RUnlock()
	p, ok := w.plain(ctx, req, userID, now)
	if !ok {
		return nil, nil, false
	}
	if err := w.beatBeforeStamp(ctx); err != nil {
		// announce.lua's path beats again and fails the announce with
		// the tracker's retryable error.
		return nil, nil, false
	}
	v := w.views.of(req.InfoHash, true)
	v.mu.Lock()
	if !v.staleLocked(now) {
		view := v.copyLocked()
		v.mu.Unlock()
		resp, ok := w.respond(p, view, false, numWant, now)
		return resp, nil, ok
	}
	if v.readingAt != 0 && now-v.readingAt < maxViewAge.Milliseconds() && now >= v.readingAt {
		done := v.readDone
		v.mu.Unlock()
		return nil, &viewRead{p: p, v: v, follower: true, done: done}, true
	}
	// A read older than maxViewAge (or from before a clock step back) is
	// taken over: this one gets a channel of its own, and each leader
	// closes only its own, so the older read coming in late neither wakes
	// this one's followers early nor closes a channel twice.
	done := make(chan struct{})
	v.readingAt, v.readDone = now, done
	v.mu.Unlock()
	rd := &viewRead{p: p, v: v, done: done, call: w.readCall(req.InfoHash, req.PeerID, p.refresh)}
	keys, args := w.refreshKeysArgs(ctx, req.InfoHash, w.s.cfg.MaxNumWant, rd.call.peers, rd.call.ids)
	rd.sc = scriptCall{script: refreshScript, keys: keys, args: args}
	return nil, rd, true
}

// follow answers a follower from the view its read installed, once the
// read is in; false: the view is still stale (the read failed), and the
// announce must go through announce.lua.
func (w *writeBehind) follow(ctx context.Context, rd *viewRead, numWant int, now int64) (*bittorrent.AnnounceResponse, bool) {
	// The read is in a pipeline already sent (this batch's, answered
	// before its followers, or another's): it comes back within the
	// client's timeouts.
	select {
	case <-rd.done:
	case <-ctx.Done():
		return nil, false
	}
	w.stopMu.RLock()
	defer w.stopMu.RUnlock()
	rd.v.mu.Lock()
	stale := rd.v.staleLocked(now)
	view := rd.v.copyLocked()
	rd.v.mu.Unlock()
	if stale {
		return nil, false
	}
	return w.respond(rd.p, view, false, numWant, now)
}

// finishRead answers a viewRead from its refresh.lua reply; false: the
// announce must go through announce.lua (the peer changed elsewhere, the
// torrent is unregistered, or the reply is bad).
func (w *writeBehind) finishRead(rd *viewRead, cmd *redis.Cmd, numWant int, now int64) (*bittorrent.AnnounceResponse, bool) {
	w.stopMu.RLock()
	defer w.stopMu.RUnlock()
	defer w.queue.releaseCall(&rd.call)
	reply, err := cmdList(cmd)
	if err != nil {
		w.putBackAlong(&rd.call)
	}
	rd.v.mu.Lock()
	close(rd.done)
	if rd.v.readDone == rd.done { // not taken over by a later read
		rd.v.readingAt, rd.v.readDone = 0, nil
	}
	var view viewCopy
	var written bool
	if err == nil {
		view, written, err = w.takeReadLocked(rd.v, &rd.call, reply, now)
	}
	rd.v.mu.Unlock()
	if err != nil {
		return nil, false
	}
	w.viewReads.Add(1)
	return w.respond(rd.p, view, written, numWant, now)
}

// stop sends later plain re-announces through announce.lua, after the
// ones being answered have been queued.
func (w *writeBehind) stop() {
	w.stopMu.Lock()
	w.stopped = true
	w.stopMu.Unlock()
	if w.reads != nil {
		w.reads.stop()
	}
}

// accepted records what announce.lua accepted: the peer is known here
// unless it left, and a swarm it changed is read again.
func (w *writeBehind) accepted(req *bittorrent.AnnounceRequest, userID string, now int64, changed bool) {
	key := peerKey{hash: req.InfoHash, peer: req.PeerID}
	if req.Event == bittorrent.EventStopped {
		w.peers.forget(key, 0)
	} else {
		w.peers.put(key, knownPeer{user: userID, addr: string(compactAddr(req.Addr)), seeding: req.Left == 0, last: now})
	}
	if changed {
		w.views.invalidate(req.InfoHash)
	}
}

// pickEntries appends up to n peers of entries, from a random start,
// skipping the entry of peer skip and, when only is not 0, entries of the
// other address family.
func pickEntries(out []bittorrent.Peer, entries []string, n int, skip []byte, only int) []bittorrent.Peer {
	if n <= 0 || len(entries) == 0 {
		return out
	}
	start := rand.IntN(len(entries))
	for i, got := 0, 0; i < len(entries) && got < n; i++ {
		entry := entries[(start+i)%len(entries)]
		if only != 0 && int(entry[0]) != only {
			continue
		}
		if skip != nil && entry[1:1+len(skip)] == string(skip) {
			continue
		}
		if peer, ok := entryPeer(entry); ok {
			out = append(out, peer)
			got++
		}
	}
	return out
}

// viewCopy is a view's fields as read under its lock.
type viewCopy struct {
	seeders, leechers, snatches int64
	registered                  bool
	seeds, leechs               []string
}

// view returns the torrent's view. When it is older than maxViewAge it
// is read again, in one refresh.lua call with the announce's refresh
// (written: true), so a torrent announced to less often than the view
// lasts costs one script per announce, as announce.lua does, but a
// leaner one. Concurrent callers wait for that one read. An error, or a
// refresh refresh.lua dropped (the peer changed elsewhere), sends the
// announce through announce.lua.
func (w *writeBehind) view(ctx context.Context, hash bittorrent.InfoHash, now int64, id bittorrent.PeerID,
	r queuedRefresh) (viewCopy, bool, error) {
	if err := w.beatBeforeStamp(ctx); err != nil {
		return viewCopy{}, false, err
	}
	v := w.views.of(hash, true)
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.staleLocked(now) {
		return v.copyLocked(), false, nil
	}
	call := w.readCall(hash, id, r)
	defer w.queue.releaseCall(&call)
	keys, args := w.refreshKeysArgs(ctx, hash, w.s.cfg.MaxNumWant, call.peers, call.ids)
	reply, err := w.readView(ctx, keys, args)
	if err != nil {
		w.putBackAlong(&call)
		return viewCopy{}, false, err
	}
	w.viewReads.Add(1)
	return w.takeReadLocked(v, &call, reply, now)
}

// readCall is a view read's refresh call: the announce's refresh first
// (its status is the one takeReadLocked checks), then its torrent's
// queued refreshes, taken along so they need no drain call of their own.
// The torrent's call would come anyway, so each refresh taken along is a
// peer more in it, not a call more.
func (w *writeBehind) readCall(hash bittorrent.InfoHash, id bittorrent.PeerID, r queuedRefresh) refreshCall {
	call := refreshCall{hash: hash, ids: []bittorrent.PeerID{id}, peers: []queuedRefresh{r}}
	w.queue.takeTorrent(&call, id, maxRefreshPeersPerCall)
	return call
}

// putBackAlong queues again what a view read took along when its call
// came back with no reply to apply; refresh.lua finds any it did write
// STALE the second time.
func (w *writeBehind) putBackAlong(call *refreshCall) {
	if call.replaced != nil {
		w.queue.putBack(call.hash, call.ids[0], *call.replaced)
	}
	for j := 1; j < len(call.ids); j++ {
		w.queue.putBack(call.hash, call.ids[j], call.peers[j])
	}
}

// staleLocked says whether the view is too old to answer from.
func (v *swarmView) staleLocked(now int64) bool {
	return v.at == 0 || now-v.at >= maxViewAge.Milliseconds() || now < v.at
}

func (v *swarmView) copyLocked() viewCopy {
	return viewCopy{seeders: v.seeders, leechers: v.leechers, snatches: v.snatches, registered: v.registered,
		seeds: v.seeds, leechs: v.leechs}
}

// takeReadLocked takes a view read's refresh.lua reply (read at now): the
// announce's effects and the view. An error, or a peer refresh.lua
// dropped (it changed elsewhere), sends the announce through
// announce.lua; an unregistered torrent's view says so.
func (w *writeBehind) takeReadLocked(v *swarmView, call *refreshCall, reply []any, now int64) (viewCopy, bool, error) {
	if replyInt(reply[0]) == codeUnregistered {
		v.at, v.registered, v.seeds, v.leechs = now, false, nil, nil
		for _, id := range call.ids[1:] { // as apply forgets the queue's
			w.peers.forget(peerKey{hash: call.hash, peer: id}, 0)
		}
		return viewCopy{}, false, nil
	}
	if err := w.applyPeers(call, reply); err != nil {
		w.putBackAlong(call)
		return viewCopy{}, false, err
	}
	w.alongPeers.Add(int64(len(call.ids) - 1))
	if replyInt(reply[w.replyHeader()]) == codeDropped { // the view read's own peer, the first
		return viewCopy{}, false, errPeerChanged
	}
	if err := v.installLocked(reply, now); err != nil {
		return viewCopy{}, false, err
	}
	return v.copyLocked(), true, nil
}

// readView runs refresh.lua for a view, through the shared pipelines
// when they run (as announce.lua's calls go).
func (w *writeBehind) readView(ctx context.Context, keys []string, args []any) ([]any, error) {
	if w.reads == nil {
		return w.s.runScriptList(ctx, "swarm: refresh.lua", refreshScript, keys, args...)
	}
	cmd, err := w.reads.run(ctx, keys, args)
	if err != nil {
		return nil, fmt.Errorf("swarm: refresh.lua: %w", err)
	}
	reply, err := cmdList(cmd)
	if err != nil {
		return nil, fmt.Errorf("swarm: refresh.lua: %w", err)
	}
	return reply, nil
}

var errPeerChanged = errors.New("the peer changed since this frontend accepted it")

// installLocked takes a refresh.lua reply's view, read at at (ms).
func (v *swarmView) installLocked(reply []any, at int64) error {
	if len(reply) < 7 {
		return fmt.Errorf("refresh.lua: %w (%d elements)", errBadReply, len(reply))
	}
	seeds, err := splitEntries(replyString(reply[5]))
	if err != nil {
		return err
	}
	leechs, err := splitEntries(replyString(reply[6]))
	if err != nil {
		return err
	}
	v.at, v.seeders, v.leechers, v.snatches = at, replyInt(reply[1]), replyInt(reply[2]), replyInt(reply[3])
	v.registered, v.seeds, v.leechs = replyString(reply[4]) != "", seeds, leechs
	return nil
}

// refreshKeysArgs builds refresh.lua's KEYS and ARGV for the given peers
// (ids[i] is peers[i]'s id) and view sample size. Open mode sends none of
// the keys and arguments only a user's record needs: each string costs
// Redis and Lua. With accounting, the call may stamp the users' records
// with this frontend's id: its callers beat first (beatBeforeStamp).
func (w *writeBehind) refreshKeysArgs(ctx context.Context, hash bittorrent.InfoHash, sample int, peers []queuedRefresh, ids []bittorrent.PeerID) ([]string, []any) {
	timeout := w.s.cfg.PeerTimeout.Milliseconds()
	claimWindow := w.s.cfg.ReaperClaimWindow.Milliseconds()
	if !w.s.cfg.Private {
		args := make([]any, 0, 4+7*len(peers))
		args = append(args, timeout, claimWindow, sample, "0")
		for i, r := range peers {
			args = appendRefreshPeer(args, ids[i], r, timeout)
		}
		return btstore.RefreshKeys(hash, ids, nil), args
	}
	accounting, writer := "0", ""
	if !w.s.cfg.NoAccounting {
		accounting = "1"
		if w.s.feedOn() {
			// Only a frontend that delivers the feed stamps (see
			// announceCall): "" leaves the records' w as it is.
			writer = w.s.owner
		}
	}
	args := make([]any, 0, 9+10*len(peers))
	args = append(args, timeout, claimWindow, sample, "1", w.s.cfg.HnR.MinSeedTime.Milliseconds(), w.s.cfg.HnR.MinRatio,
		accounting, writer, // ARGV[8]: the records' writer stamp, read only with accounting (frontends.go)
		w.s.cfg.Watch.LedgerEntries) // ARGV[9]: the ledger's size, read only with accounting (prelude's user_ledger)
	users := make([]string, len(peers))
	for i, r := range peers {
		users[i] = r.user
		args = append(appendRefreshPeer(args, ids[i], r, timeout), r.user, r.windowUp, r.windowDown)
	}
	return btstore.RefreshKeys(hash, ids, users), args
}

// beatBeforeStamp makes the frontend's heartbeat alive before refresh.lua
// calls that may stamp users' records with its id (ensureBeat). A beat
// that fails holds the calls back (the lead's decision on S5's step 2): a
// record stamped by a frontend the registry does not list alive would be
// found by no backstop if the frontend died with its rows.
func (w *writeBehind) beatBeforeStamp(ctx context.Context) error {
	if !w.s.cfg.Private || w.s.cfg.NoAccounting {
		return nil
	}
	return w.s.ensureBeat(ctx)
}

// appendRefreshPeer appends the ARGV every mode sends for one peer. The
// numbers go as numbers: go-redis writes them in decimal into its buffer,
// the same text refresh.lua compares, without a string made for each.
func appendRefreshPeer(args []any, id bittorrent.PeerID, r queuedRefresh, timeout int64) []any {
	return append(args, id[:], r.addr, r.uploaded, r.downloaded, r.left, r.at, r.at+timeout)
}

// refreshCall is one refresh.lua call of a drain or a view read, and
// what it carries.
type refreshCall struct {
	hash  bittorrent.InfoHash
	ids   []bittorrent.PeerID
	peers []queuedRefresh
	// replaced is the queued refresh of a view read's own peer (ids[0]),
	// which its newer one replaces; nil: none was queued
	replaced *queuedRefresh
	// held: what takeTorrent took along (replaced included) is held in
	// the queue's count under heldAt, its oldest announce time, until
	// releaseCall
	held   bool
	heldAt int64
	// view is the torrent's view a due drain's call reads too (nil: it
	// reads none), gen the view's generation when the call was made:
	// the reply is installed only if no change of this frontend's
	// invalidated the view since
	view *swarmView
	gen  uint64
}

// drain writes every queued refresh (Flush, Stop): one refresh.lua call
// per torrent (per maxRefreshPeersPerCall of its peers), in pipelines,
// reading no view. Failed writes are queued again.
func (w *writeBehind) drain(ctx context.Context) error {
	w.drainMu.Lock()
	defer w.drainMu.Unlock()
	taken, oldest := w.queue.take()
	return w.writeTaken(ctx, taken, oldest, 0)
}

// drainDue is the loop's tick: it writes the torrents whose oldest
// queued refresh came drainAfterTicks ticks ago, the latest it may wait
// to stay within Config.WriteBehind. Such a torrent is being announced
// to, and no view read took its queue along since it was queued, so its
// view is at least that old, past maxViewAge: the call writing its
// refreshes reads its view too (refresh.lua's sample), and the next
// re-announces find a fresh view instead of the first paying a read. On
// the bench's load (about one announce per torrent a second) that makes
// one refresh.lua call per torrent and second where there were two, a
// read and a write.
func (w *writeBehind) drainDue(ctx context.Context) error {
	w.drainMu.Lock()
	defer w.drainMu.Unlock()
	taken, oldest := w.queue.takeDue()
	return w.writeTaken(ctx, taken, oldest, w.s.nowMillis())
}

// writeTaken writes refreshes taken from the queue, oldest the oldest
// announce time among them (held by take or takeDue); readAt is not 0
// when the calls read the views of the torrents that have one (readAt,
// ms, taken before they are sent, is when those views are read).
func (w *writeBehind) writeTaken(ctx context.Context, taken map[bittorrent.InfoHash]*queuedTorrent, oldest, readAt int64) error {
	peers := 0
	for _, t := range taken {
		peers += len(t.peers)
	}
	// Released once every reply was applied (its feed rows held,
	// feedbuf.go) or its refreshes were put back.
	defer w.queue.written(peers, oldest)
	if len(taken) == 0 {
		return nil
	}
	calls := make([]refreshCall, 0, len(taken))
	for hash, t := range taken {
		call := refreshCall{hash: hash}
		if readAt != 0 {
			call.view, call.gen = w.views.generation(hash)
		}
		for id, r := range t.peers {
			if len(call.ids) == maxRefreshPeersPerCall {
				calls = append(calls, call)
				call = refreshCall{hash: hash}
			}
			call.ids = append(call.ids, id)
			call.peers = append(call.peers, r)
		}
		calls = append(calls, call)
	}
	var failed int
	var firstErr error
	for start := 0; start < len(calls); start += maxRefreshCallsPerPipe {
		chunk := calls[start:min(start+maxRefreshCallsPerPipe, len(calls))]
		n, err := w.write(ctx, chunk, readAt)
		failed += n
		firstErr = firstError(firstErr, err)
	}
	if failed > 0 {
		w.s.counters.flushFailures.Add(int64(failed))
		return fmt.Errorf("swarm: writing plain re-announces: %d of %d calls failed, queued again: %w", failed, len(calls), firstErr)
	}
	return nil
}

// write sends one pipeline of refresh calls and applies the replies.
func (w *writeBehind) write(ctx context.Context, calls []refreshCall, readAt int64) (int, error) {
	if err := w.beatBeforeStamp(ctx); err != nil {
		for i := range calls {
			for j := range calls[i].peers {
				w.queue.putBack(calls[i].hash, calls[i].ids[j], calls[i].peers[j])
			}
		}
		return len(calls), err
	}
	scripts := make([]scriptCall, len(calls))
	for i := range calls {
		c := &calls[i]
		sample := 0
		if c.view != nil {
			sample = w.s.cfg.MaxNumWant
		}
		keys, args := w.refreshKeysArgs(ctx, c.hash, sample, c.peers, c.ids)
		scripts[i] = scriptCall{keys: keys, args: args}
	}
	w.drainCalls.Add(int64(len(calls)))
	for i := range calls {
		w.drainPeers.Add(int64(len(calls[i].peers)))
	}
	failed := 0
	var firstErr error
	for i, cmd := range w.s.runScriptsPipelined(ctx, refreshScript, scripts) {
		c := &calls[i]
		reply, err := cmdList(cmd)
		if err == nil {
			err = w.apply(c, reply, readAt)
		}
		if err != nil {
			failed++
			firstErr = firstError(firstErr, err)
			for j := range c.peers {
				w.queue.putBack(c.hash, c.ids[j], c.peers[j])
			}
		}
	}
	return failed, firstErr
}

// apply takes one refresh.lua reply of the queue's: the peers' effects
// (applyPeers) and, for a call that read the view, the view (read at
// readAt).
func (w *writeBehind) apply(c *refreshCall, reply []any, readAt int64) error {
	if replyInt(reply[0]) == codeUnregistered {
		for _, id := range c.ids {
			w.peers.forget(peerKey{hash: c.hash, peer: id}, 0)
		}
		w.views.invalidate(c.hash)
		return nil
	}
	if err := w.applyPeers(c, reply); err != nil {
		return err
	}
	if c.view != nil {
		c.view.mu.Lock()
		// Not over a view this frontend's own change invalidated since
		// (its event may have landed after the read), nor over a newer one.
		if c.view.gen == c.gen && readAt >= c.view.at {
			if err := c.view.installLocked(reply, readAt); err == nil {
				w.drainReads.Add(1)
			}
		}
		c.view.mu.Unlock()
	}
	return nil
}

// replyHeader is how many elements refresh.lua's reply has before its
// first peer's.
func (w *writeBehind) replyHeader() int {
	if w.s.cfg.Private {
		return refreshPrivateHeader
	}
	return refreshHeader
}

// applyPeers takes the per-peer results of a refresh.lua reply: the
// user-side effects go into the batch the flush writes, and dropped
// peers are forgotten, so their next announce runs announce.lua. A reply
// of the wrong shape applies nothing.
func (w *writeBehind) applyPeers(c *refreshCall, reply []any) error {
	header, accounting := w.replyHeader(), w.s.cfg.Private && !w.s.cfg.NoAccounting
	// Read whole before any of it is applied: a malformed peer's part
	// must not leave the others half applied. A credit reply's width
	// depends on what it holds, so the peers are read one after another.
	// at[j] is peer j's status's place.
	var credits []creditReply
	var places [16]int
	at := places[:0]
	if w.s.cfg.Private {
		credits = make([]creditReply, len(c.peers))
	}
	next := header
	for j := range c.peers {
		if next >= len(reply) {
			return fmt.Errorf("refresh.lua: %w (%d elements for %d peers)", errBadReply, len(reply), len(c.peers))
		}
		at = append(at, next)
		next++
		if credits != nil {
			var width int
			var err error
			if credits[j], width, err = parseCredit(reply[next:], accounting); err != nil {
				return fmt.Errorf("refresh.lua: peer %d: %w", j, err)
			}
			next += width
		}
	}
	if next != len(reply) {
		return fmt.Errorf("refresh.lua: %w (%d elements for %d peers)", errBadReply, len(reply), len(c.peers))
	}
	torrentID := replyString(reply[4])
	seeders, leechers := replyInt(reply[1]), replyInt(reply[2])
	var size, leecherLeft int64
	if w.s.cfg.Private {
		size, leecherLeft = replyInt(reply[7]), replyInt(reply[8])
	}
	for j, r := range c.peers {
		switch replyInt(reply[at[j]]) {
		case codeDropped:
			w.dropped.Add(1)
			w.peers.forget(peerKey{hash: c.hash, peer: c.ids[j]}, r.at)
		case codeRefreshed:
			if credits == nil {
				continue // open mode: no user, so no credit, totals, token, feed or cheat
			}
			cr := &credits[j]
			var update *userUpdate
			if r.user != "" && cr.bits > 0 {
				update = &userUpdate{key: userTorrent{user: r.user, torrent: torrentID}, hash: c.hash,
					bits: cr.bits, version: cr.version}
			}
			w.s.pending.addRefresh(r.user, w.s.movedBy(r.user, cr.moved[0], cr.moved[1], cr.moved[2], cr.moved[3]), update)
			if cr.row.Seq != 0 && w.s.feedOn() {
				// Held before the drain releases its hold (feedUpTo).
				t := seenTorrent{id: torrentID, seeders: seeders, leechers: leechers,
					snatches: replyInt(reply[3]), at: r.at}
				if seeders > 0 {
					t.lastAction = r.at // refresh.lua moved last_action to its newest announce, this one or later
				}
				row := cr.row
				row.UserID = r.user
				w.s.holdRow(c.hash, r.at, row, t)
				w.s.stamped()
			}
			w.s.reportToken(context.Background(), cr.tokenEvent, c.hash, torrentID, r.user, cr.tokenUsed)
			if f, ok := cr.watch(leechers, size, leecherLeft, r.left != 0); ok {
				w.s.watchTransfer(c.hash, torrentID, r.user, r.at, cr.moved, f)
			}
		}
	}
	return nil
}

// loop writes the queue until ctx ends: every drainTicks-th of
// Config.WriteBehind it writes the torrents that are due (drainDue), so
// each refresh is written within drainAfterTicks ticks of its announce.
func (w *writeBehind) loop(ctx context.Context) {
	defer w.s.wg.Done()
	ticker := time.NewTicker(max(w.s.cfg.WriteBehind/drainTicks, time.Millisecond))
	defer ticker.Stop()
	// A failed write is retried at the next tick; during a Redis outage
	// that is drainTicks failures per WriteBehind, so they are logged once
	// per WriteBehind with how many there were, not one line each.
	var failures int
	var lastWarned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			err := w.drainDue(ctx)
			if err == nil || ctx.Err() != nil {
				continue
			}
			failures++
			if now.Sub(lastWarned) >= w.s.cfg.WriteBehind {
				w.s.logger.Warn("swarm: writing plain re-announces failed", "error", err, "failures", failures)
				failures, lastWarned = 0, now
			}
		}
	}
}

// dropView makes the next plain re-announce of the torrent read its swarm
// (and its registration) again.
func (s *Store) dropView(hash bittorrent.InfoHash) {
	if s.writeBehind != nil {
		s.writeBehind.views.invalidate(hash)
	}
}

// WriteBehindStats counts this Store's plain re-announces.
type WriteBehindStats struct {
	Answered   int64 // answered from a view (ViewReads included), refresh written behind unless read with it
	ViewReads  int64 // answered from a refresh.lua call that wrote the announce and read the view
	AlongPeers int64 // queued refreshes those calls wrote along with their announce's
	DrainCalls int64 // refresh.lua calls that wrote queued refreshes
	DrainPeers int64 // queued refreshes those calls carried
	DrainReads int64 // views those calls read and installed (the loop's, for torrents due)
	Dropped    int64 // refreshes refresh.lua dropped (the peer had changed elsewhere)
	Queued     int   // refreshes waiting now, those a drain is writing included
}

// WriteBehindStats returns the store's write-behind counters (zero when
// Config.WriteBehind is off).
func (s *Store) WriteBehindStats() WriteBehindStats {
	if s.writeBehind == nil {
		return WriteBehindStats{}
	}
	w := s.writeBehind
	return WriteBehindStats{Answered: w.answered.Load(), ViewReads: w.viewReads.Load(), AlongPeers: w.alongPeers.Load(),
		DrainCalls: w.drainCalls.Load(), DrainPeers: w.drainPeers.Load(), DrainReads: w.drainReads.Load(), Dropped: w.dropped.Load(), Queued: w.queue.len()}
}
