package swarm

import (
	"context"
	"errors"
	"fmt"
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
// may be, leaving room below the one second the tracker promises for the
// read itself.
const maxViewAge = 750 * time.Millisecond

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
}

// refreshPeerReply is how many elements refresh.lua answers per peer in
// private mode; open mode, with no user to credit, answers its status
// alone (refreshOpenPeerReply).
const (
	refreshPeerReply     = 11
	refreshOpenPeerReply = 1
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
		view.mu.Unlock()
	}
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
// peer's newer announce replaces its older one.
type refreshQueue struct {
	mu       sync.Mutex
	torrents map[bittorrent.InfoHash]map[bittorrent.PeerID]queuedRefresh
	size     int
}

// add queues a refresh; false when the queue is full.
func (q *refreshQueue) add(hash bittorrent.InfoHash, peer bittorrent.PeerID, r queuedRefresh) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	peers := q.torrents[hash]
	if peers == nil {
		if q.size >= maxQueuedRefreshes {
			return false
		}
		if q.torrents == nil {
			q.torrents = make(map[bittorrent.InfoHash]map[bittorrent.PeerID]queuedRefresh)
		}
		peers = make(map[bittorrent.PeerID]queuedRefresh, 4)
		q.torrents[hash] = peers
	}
	if _, ok := peers[peer]; !ok {
		if q.size >= maxQueuedRefreshes {
			return false
		}
		q.size++
	}
	peers[peer] = r
	return true
}

// putBack requeues a refresh whose write failed, unless a newer one of
// the peer is queued.
func (q *refreshQueue) putBack(hash bittorrent.InfoHash, peer bittorrent.PeerID, r queuedRefresh) {
	q.mu.Lock()
	newer := q.torrents[hash][peer].at > r.at
	q.mu.Unlock()
	if !newer {
		q.add(hash, peer, r)
	}
}

// takeTorrent moves up to limit of the torrent's queued refreshes into
// call, leaving out peer skip's: its refresh, if queued, is taken too
// (call.replaced), since the refresh call carries a newer one of it.
func (q *refreshQueue) takeTorrent(call *refreshCall, skip bittorrent.PeerID, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	queued := q.torrents[call.hash]
	if r, ok := queued[skip]; ok {
		call.replaced = &r
		delete(queued, skip)
		q.size--
	}
	for id, r := range queued {
		if len(call.ids) >= limit {
			break
		}
		call.ids = append(call.ids, id)
		call.peers = append(call.peers, r)
		delete(queued, id)
		q.size--
	}
	if queued != nil && len(queued) == 0 {
		delete(q.torrents, call.hash)
	}
}

func (q *refreshQueue) take() map[bittorrent.InfoHash]map[bittorrent.PeerID]queuedRefresh {
	q.mu.Lock()
	defer q.mu.Unlock()
	taken := q.torrents
	q.torrents, q.size = nil, 0
	return taken
}

func (q *refreshQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.size
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
	keys, args := w.refreshKeysArgs(req.InfoHash, w.s.cfg.MaxNumWant, rd.call.peers, rd.call.ids)
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
	v := w.views.of(hash, true)
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.staleLocked(now) {
		return v.copyLocked(), false, nil
	}
	call := w.readCall(hash, id, r)
	keys, args := w.refreshKeysArgs(hash, w.s.cfg.MaxNumWant, call.peers, call.ids)
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
	if replyInt(reply[7]) == codeDropped {
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
// Redis and Lua.
func (w *writeBehind) refreshKeysArgs(hash bittorrent.InfoHash, sample int, peers []queuedRefresh, ids []bittorrent.PeerID) ([]string, []any) {
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
	accounting := "0"
	if !w.s.cfg.NoAccounting {
		accounting = "1"
	}
	args := make([]any, 0, 8+10*len(peers))
	args = append(args, timeout, claimWindow, sample, "1", w.s.cfg.HnR.MinSeedTime.Milliseconds(), w.s.cfg.HnR.MinRatio,
		accounting, "") // ARGV[8]: unused since s40 (refresh.lua)
	users := make([]string, len(peers))
	for i, r := range peers {
		users[i] = r.user
		args = append(appendRefreshPeer(args, ids[i], r, timeout), r.user, r.windowUp, r.windowDown)
	}
	return btstore.RefreshKeys(hash, ids, users), args
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
}

// drain writes every queued refresh: one refresh.lua call per torrent
// (per maxRefreshPeersPerCall of its peers), in pipelines. It reads no
// view: a view read on the way cost the sticky load more Redis
// instructions (the entries of every drained torrent, into Lua and back)
// than the reads it saved the announces (docs/bittorrent-storage.md).
// Failed writes are queued again.
func (w *writeBehind) drain(ctx context.Context) error {
	w.drainMu.Lock()
	defer w.drainMu.Unlock()
	taken := w.queue.take()
	if len(taken) == 0 {
		return nil
	}
	calls := make([]refreshCall, 0, len(taken))
	for hash, peers := range taken {
		call := refreshCall{hash: hash}
		for id, r := range peers {
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
		n, err := w.write(ctx, chunk)
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
func (w *writeBehind) write(ctx context.Context, calls []refreshCall) (int, error) {
	scripts := make([]scriptCall, len(calls))
	for i := range calls {
		c := &calls[i]
		keys, args := w.refreshKeysArgs(c.hash, 0, c.peers, c.ids)
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
			err = w.apply(c, reply)
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
// (applyPeers).
func (w *writeBehind) apply(c *refreshCall, reply []any) error {
	if replyInt(reply[0]) == codeUnregistered {
		for _, id := range c.ids {
			w.peers.forget(peerKey{hash: c.hash, peer: id}, 0)
		}
		w.views.invalidate(c.hash)
		return nil
	}
	return w.applyPeers(c, reply)
}

// applyPeers takes the per-peer results of a refresh.lua reply: the
// user-side effects go into the batch the flush writes, and dropped
// peers are forgotten, so their next announce runs announce.lua.
func (w *writeBehind) applyPeers(c *refreshCall, reply []any) error {
	stride := refreshPeerReply
	if !w.s.cfg.Private {
		stride = refreshOpenPeerReply
	}
	if len(reply) != 7+stride*len(c.peers) {
		return fmt.Errorf("refresh.lua: %w (%d elements for %d peers)", errBadReply, len(reply), len(c.peers))
	}
	torrentID := replyString(reply[4])
	for j, r := range c.peers {
		res := reply[7+stride*j : 7+stride*(j+1)]
		switch replyInt(res[0]) {
		case codeDropped:
			w.dropped.Add(1)
			w.peers.forget(peerKey{hash: c.hash, peer: c.ids[j]}, r.at)
		case codeRefreshed:
			if stride == refreshOpenPeerReply {
				continue // no user: no credit, totals, token, feed or cheat
			}
			var update *userUpdate
			if bits := replyInt(res[1]); r.user != "" && bits >= 0 {
				update = &userUpdate{key: userTorrent{user: r.user, torrent: torrentID}, hash: c.hash,
					bits: bits, version: replyInt(res[2])}
			}
			w.s.pending.addRefresh(c.hash, r.user, transfer{replyInt(res[3]), replyInt(res[4]), replyInt(res[5]),
				replyInt(res[6])}, update, replyInt(res[9]) == 1)
			w.s.reportToken(context.Background(), replyInt(res[7]), c.hash, torrentID, r.user, replyInt(res[8]))
			w.s.watchTransfer(c.hash, torrentID, r.user, r.at, transfer{replyInt(res[3]), replyInt(res[4]),
				replyInt(res[5]), replyInt(res[6])}, res[10])
		}
	}
	return nil
}

// loop writes the queue every Config.WriteBehind until ctx ends.
func (w *writeBehind) loop(ctx context.Context) {
	defer w.s.wg.Done()
	ticker := time.NewTicker(w.s.cfg.WriteBehind)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := w.drain(ctx); err != nil && ctx.Err() == nil {
				w.s.logger.Warn("swarm: writing plain re-announces failed", "error", err)
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
	Dropped    int64 // refreshes refresh.lua dropped (the peer had changed elsewhere)
	Queued     int   // refreshes waiting now
}

// WriteBehindStats returns the store's write-behind counters (zero when
// Config.WriteBehind is off).
func (s *Store) WriteBehindStats() WriteBehindStats {
	if s.writeBehind == nil {
		return WriteBehindStats{}
	}
	w := s.writeBehind
	return WriteBehindStats{Answered: w.answered.Load(), ViewReads: w.viewReads.Load(), AlongPeers: w.alongPeers.Load(),
		DrainCalls: w.drainCalls.Load(), DrainPeers: w.drainPeers.Load(), Dropped: w.dropped.Load(), Queued: w.queue.len()}
}
