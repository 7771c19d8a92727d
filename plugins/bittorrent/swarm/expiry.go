package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"

	"github.com/hoardproject/hoard/internal/lease"
)

const (
	// sweepSwarmBatch is how many due swarms one sweep round reads from
	// a shard, and sweepPeerBatch how many due peers per swarm.
	sweepSwarmBatch = 100
	sweepPeerBatch  = 100
	// maxSweepRounds bounds one sweep of one shard, so a huge backlog is
	// worked off over several ticks instead of one endless call.
	maxSweepRounds = 200
	// expiryQueueSize is how many expiry events may wait for a worker;
	// beyond it events are dropped and the sweep removes those peers.
	expiryQueueSize = 10_000
	// listenerRefresh is how often a cluster's masters are re-read, so a
	// failover's new master is subscribed to.
	listenerRefresh = 30 * time.Second
)

// expireMembers runs expire.lua for some of a swarm's deadline members
// and batches its global effects. It returns how many peers it removed
// and the swarm's next deadline (0: no peer left).
func (s *Store) expireMembers(ctx context.Context, hash bittorrent.InfoHash, members []string) (removed, next int64, err error) {
	reply, err := s.runScriptList(ctx, "swarm.expire", expireScript, btstore.ExpireKeys(hash, members), s.expireArgs(members)...)
	if err != nil {
		return 0, 0, err
	}
	removed, next = s.recordExpiry(ctx, hash, reply)
	return removed, next, nil
}

func (s *Store) expireArgs(members []string) []any {
	args := make([]any, 0, 5+len(members))
	args = append(args, s.nowMillis(), s.openRetentionMillis(), s.cfg.HnR.MinSeedTime.Milliseconds(), s.cfg.HnR.MinRatio,
		s.cfg.PeerRetention.Milliseconds())
	for _, member := range members {
		args = append(args, member)
	}
	return args
}

// recordExpiry reads expire.lua's reply and batches its global effects.
func (s *Store) recordExpiry(ctx context.Context, hash bittorrent.InfoHash, reply []any) (removed, next int64) {
	if len(reply) < 5 {
		return 0, 0
	}
	removed, next = replyInt(reply[0]), replyInt(reply[3])
	torrentID := replyString(reply[4])
	var updates []userUpdate
	for i := 5; i+2 < len(reply); i += 3 {
		updates = append(updates, userUpdate{
			key:     userTorrent{user: replyString(reply[i]), torrent: torrentID},
			hash:    hash,
			bits:    replyInt(reply[i+1]),
			version: replyInt(reply[i+2]),
		})
	}
	if removed > 0 || len(updates) > 0 {
		if s.pending.addExpiry(hash, replyInt(reply[1]), replyInt(reply[2]), updates) {
			s.flushIfIdle(ctx)
		}
	}
	if removed > 0 && next == 0 && torrentID == "" {
		s.markOrphanDue(ctx, hash) // an unregistered torrent's swarm emptied
	}
	return removed, next
}

// Sweep removes every peer whose deadline has passed, from every swarm
// the due index says has one, and returns how many it removed. The
// background sweep runs it shard by shard (one frontend per shard at a
// time); calling it directly ignores those leases.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	total := 0
	for shard := range btstore.DueShards {
		n, err := s.sweepShard(ctx, shard)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// sweepShard works off one shard of the due index in rounds of
// sweepSwarmBatch swarms: read their due peers (one pipeline), expire them
// (one pipeline of expire.lua, one call per swarm), then settle each
// swarm's entry at its next deadline or remove it (one pipeline).
func (s *Store) sweepShard(ctx context.Context, shard int) (int, error) {
	dueKey := btstore.DueKey(shard)
	removed := 0
	for range maxSweepRounds {
		now := s.nowMillis()
		due, err := s.rdb.ZRangeByScoreWithScores(ctx, dueKey, &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now, 10), Count: sweepSwarmBatch,
		}).Result()
		if err != nil {
			return removed, fmt.Errorf("swarm.Sweep: %w", err)
		}
		if len(due) == 0 {
			return removed, nil
		}

		type dueSwarm struct {
			hash  bittorrent.InfoHash
			hex   string
			score float64
			peers *redis.StringSliceCmd
		}
		swarms := make([]dueSwarm, 0, len(due))
		pipe := s.rdb.Pipeline()
		for _, z := range due {
			hexMember, _ := z.Member.(string)
			hash, ok := btstore.ParseHexInfoHash(hexMember)
			if !ok {
				pipe.ZRem(ctx, dueKey, z.Member) // not written by this store
				continue
			}
			swarms = append(swarms, dueSwarm{hash: hash, hex: hexMember, score: z.Score,
				peers: pipe.ZRangeByScore(ctx, btstore.DeadlinesKey(hash), &redis.ZRangeBy{
					Min: "-inf", Max: strconv.FormatInt(now, 10), Count: sweepPeerBatch,
				})})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return removed, fmt.Errorf("swarm.Sweep: reading due peers: %w", err)
		}

		calls := make([]scriptCall, len(swarms))
		for i, sw := range swarms {
			var members []string
			for _, member := range sw.peers.Val() {
				if len(member) >= len(bittorrent.PeerID{}) {
					members = append(members, member)
				}
			}
			calls[i] = scriptCall{keys: btstore.ExpireKeys(sw.hash, members), args: s.expireArgs(members)}
		}
		settles := make([]scriptCall, 0, len(swarms))
		more := false
		var firstErr error
		for i, cmd := range s.runScriptsPipelined(ctx, expireScript, calls) {
			reply, err := cmdList(cmd)
			if err != nil {
				firstErr = firstError(firstErr, err)
				continue
			}
			n, next := s.recordExpiry(ctx, swarms[i].hash, reply)
			removed += int(n)
			s.counters.expiredBySweep.Add(n)
			if next != 0 && next <= now {
				more = true // more due peers than one batch
			}
			settles = append(settles, scriptCall{
				keys: []string{dueKey},
				args: []any{swarms[i].hex, int64(swarms[i].score), next},
			})
		}
		for _, cmd := range s.runScriptsPipelined(ctx, dueSettleScript, settles) {
			if err := cmd.Err(); err != nil {
				firstErr = firstError(firstErr, err)
			}
		}
		if firstErr != nil {
			return removed, fmt.Errorf("swarm.Sweep: %w", firstErr)
		}
		if len(due) < sweepSwarmBatch && !more {
			return removed, nil
		}
		if err := ctx.Err(); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// sweepLoop sweeps every SweepInterval. Each shard is swept by one
// frontend at a time: the others find its lease taken and skip it.
func (s *Store) sweepLoop(ctx context.Context) {
	defer s.wg.Done()
	ticker := time.NewTicker(s.cfg.SweepInterval)
	defer ticker.Stop()
	leaseTTL := s.cfg.SweepInterval * 9 / 10
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		for shard := range btstore.DueShards {
			ok, err := lease.Take(ctx, s.rdb, btstore.DueLeaseKey(shard), s.owner, leaseTTL)
			if err != nil || !ok {
				continue
			}
			if _, err := s.sweepShard(ctx, shard); err != nil && ctx.Err() == nil {
				s.logger.Warn("swarm: sweep failed", "shard", shard, "error", err)
			}
		}
	}
}

// expiryListener subscribes to expired-key events on every master and
// hands timeout keys to workers that run expire.lua for the peer.
type expiryListener struct {
	s       *Store
	channel string
	work    chan string

	mu      sync.Mutex
	subs    map[string]*redis.PubSub // by node address
	refused map[string]bool          // nodes that refused CONFIG: asked once, logged once
	wg      sync.WaitGroup
}

func newExpiryListener(s *Store) *expiryListener {
	db := 0
	if client, ok := s.rdb.(*redis.Client); ok {
		db = client.Options().DB
	}
	return &expiryListener{
		s:       s,
		channel: "__keyevent@" + strconv.Itoa(db) + "__:expired",
		work:    make(chan string, expiryQueueSize),
		subs:    make(map[string]*redis.PubSub),
		refused: make(map[string]bool),
	}
}

// start subscribes on every master (or the one server) and starts the
// workers and the refresh. On error the caller cancels loopCtx and calls
// close.
func (l *expiryListener) start(ctx, loopCtx context.Context) error {
	if err := l.subscribeAll(ctx, loopCtx); err != nil {
		return err
	}
	for range l.s.cfg.ExpiryWorkers {
		l.wg.Add(1)
		go l.worker(loopCtx)
	}
	l.wg.Add(1)
	go l.refreshLoop(loopCtx)
	return nil
}

// subscribeAll subscribes on each master not subscribed yet and, on a
// cluster, drops subscriptions of nodes that are no longer masters.
func (l *expiryListener) subscribeAll(ctx, loopCtx context.Context) error {
	cluster, ok := l.s.rdb.(*redis.ClusterClient)
	if !ok {
		addr := "server"
		if client, ok := l.s.rdb.(*redis.Client); ok {
			addr = client.Options().Addr
		}
		return l.subscribe(ctx, loopCtx, addr, l.s.rdb)
	}
	var mu sync.Mutex
	masters := map[string]bool{}
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		addr := master.Options().Addr
		mu.Lock()
		masters[addr] = true
		mu.Unlock()
		return l.subscribe(ctx, loopCtx, addr, master)
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for addr, sub := range l.subs {
		if !masters[addr] {
			_ = sub.Close()
			delete(l.subs, addr)
		}
	}
	return nil
}

// subscriber is what a single server or one cluster master offers.
type subscriber interface {
	redis.Cmdable
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

func (l *expiryListener) subscribe(ctx, loopCtx context.Context, addr string, node subscriber) error {
	l.mu.Lock()
	_, known := l.subs[addr]
	l.mu.Unlock()
	if known {
		return nil
	}
	l.ensureNotifications(ctx, node, addr)
	sub := node.Subscribe(ctx, l.channel)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return fmt.Errorf("swarm: subscribing to expiry events on %s: %w", addr, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if loopCtx.Err() != nil { // stopping: close has run or is running
		_ = sub.Close()
		return nil
	}
	l.subs[addr] = sub
	l.wg.Add(1)
	go l.read(loopCtx, sub)
	return nil
}

// read queues the timeout keys among a node's expired keys.
func (l *expiryListener) read(ctx context.Context, sub *redis.PubSub) {
	defer l.wg.Done()
	ch := sub.Channel(redis.WithChannelSize(1000))
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if !btstore.IsTimeoutEvent(msg.Payload) {
				continue
			}
			l.s.counters.eventsReceived.Add(1)
			select {
			case l.work <- msg.Payload:
			default:
				l.s.counters.eventsDropped.Add(1)
			}
		}
	}
}

func (l *expiryListener) worker(ctx context.Context) {
	defer l.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-l.work:
			hash, peer, userID, ok := btstore.ParseTimeoutKey(key, validName)
			if !ok {
				continue
			}
			member := []string{string(peer[:]) + userID}
			// An event comes once: a transient failure (a busy or failing
			// over node) is retried a few times before the peer is left to
			// the sweep, which removes it later but just as surely.
			for attempt, backoff := 0, 50*time.Millisecond; ; attempt, backoff = attempt+1, backoff*4 {
				removed, _, err := l.s.expireMembers(ctx, hash, member)
				if err == nil {
					l.s.counters.expiredByEvent.Add(removed)
					break
				}
				if ctx.Err() != nil {
					break
				}
				if attempt == 3 {
					l.s.logger.Warn("swarm: expiring a peer on its event failed; the sweep will retry",
						"info_hash", btstore.HexInfoHash(hash), "error", err)
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
			}
		}
	}
}

// refreshLoop follows a cluster's masters (a failover's new master needs
// the notification flags and a subscription of its own); on a single
// server (or a failover client, whose master may change) it re-applies
// the flags.
func (l *expiryListener) refreshLoop(ctx context.Context) {
	defer l.wg.Done()
	ticker := time.NewTicker(listenerRefresh)
	defer ticker.Stop()
	_, cluster := l.s.rdb.(*redis.ClusterClient)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if !cluster {
			l.ensureNotifications(ctx, l.s.rdb, "server")
			continue
		}
		if err := l.subscribeAll(ctx, ctx); err != nil && ctx.Err() == nil {
			l.s.logger.Warn("swarm: refreshing expiry subscriptions failed", "error", err)
		}
	}
}

// close ends every subscription; the caller cancels loopCtx first.
func (l *expiryListener) close() {
	l.mu.Lock()
	for addr, sub := range l.subs {
		_ = sub.Close()
		delete(l.subs, addr)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// ensureNotifications turns on expired-key events (flags E and x) on one
// node, keeping whatever flags are already set. It is best effort: a
// managed Redis may refuse CONFIG, in which case the operator must set
// notify-keyspace-events themselves, and until then the sweep alone
// removes expired peers (later, but just as surely). A node that refused
// once is not asked again.
func (l *expiryListener) ensureNotifications(ctx context.Context, node redis.Cmdable, addr string) {
	const param = "notify-keyspace-events"
	l.mu.Lock()
	refused := l.refused[addr]
	l.mu.Unlock()
	if refused {
		return
	}
	refuse := func(msg string, err error) {
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.refused[addr] = true
		l.mu.Unlock()
		l.s.logger.Warn(msg, "node", addr, "error", err)
	}
	current, err := node.ConfigGet(ctx, param).Result()
	if err != nil {
		refuse("swarm: cannot read notify-keyspace-events; unless it includes Ex, expired peers wait for the sweep", err)
		return
	}
	flags := current[param]
	want := flags
	if !strings.Contains(want, "E") {
		want += "E"
	}
	if !strings.ContainsAny(want, "xA") {
		want += "x"
	}
	if want == flags {
		return
	}
	if err := node.ConfigSet(ctx, param, want).Err(); err != nil {
		refuse("swarm: cannot enable expiry events (CONFIG SET notify-keyspace-events); expired peers wait for the sweep", err)
	}
}

var errAlreadyStarted = errors.New("swarm: store already started")

// Start enables expiry events where it can, subscribes to them on every
// master, and starts the event workers, the sweep, the batched flush and
// the periodic repair. They run until Stop (ctx only bounds the setup).
func (s *Store) Start(ctx context.Context) error {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	if s.started {
		return errAlreadyStarted
	}
	if err := s.convertCredit(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	listener := newExpiryListener(s)
	if err := listener.start(ctx, loopCtx); err != nil {
		cancel()
		listener.close()
		return err
	}
	hints, err := s.subscribeHints(ctx)
	if err != nil {
		cancel()
		listener.close()
		return err
	}
	s.listener, s.cancel, s.started = listener, cancel, true
	s.wg.Add(2)
	go s.hintLoop(loopCtx, hints)
	go s.flushLoop(loopCtx)
	if s.writeBehind != nil {
		s.wg.Add(1)
		go s.writeBehind.loop(loopCtx)
	}
	if !s.cfg.ExternalSweep {
		s.wg.Add(1)
		go s.sweepLoop(loopCtx)
	}
	if s.cfg.RepairInterval > 0 {
		s.wg.Add(1)
		go s.repairLoop(loopCtx)
	}
	if s.cfg.OnFeed != nil {
		s.wg.Add(1)
		go s.feedLoop(loopCtx)
	}
	return nil
}

// Stop ends the background work and flushes the batch one last time. It
// is safe to call twice, or without Start.
func (s *Store) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		s.lifecycle.Lock()
		defer s.lifecycle.Unlock()
		if s.cancel != nil {
			s.cancel()
		}
		if s.listener != nil {
			s.listener.close()
		}
		s.wg.Wait()
		if s.writeBehind != nil {
			s.writeBehind.stop()
		}
		if s.announces != nil {
			s.announces.stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = s.Flush(ctx)
		if s.stopFeed(ctx) && s.started {
			err = errors.Join(err, s.unregisterFrontend(ctx))
		}
	})
	return err
}
