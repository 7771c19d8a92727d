package swarm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// driftClient is what one simulated client announced, as the tracker
// must end up recording it.
type driftClient struct {
	hash     bittorrent.InfoHash
	torrent  int
	id       bittorrent.PeerID
	addr     netip.AddrPort
	user     int
	active   bool
	left     uint64
	up, down uint64 // this session's cumulative counters
	last     int64  // ms of its last announce
	finished bool   // it reported left 0 at least once
	seen     bool
	// its last announce went to the frontend that is killed, and had
	// this event
	viaKilled bool
	lastEvent bittorrent.Event
}

func driftAddr(n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}), uint16(1024+n%60000))
}

// TestNothingDriftsUnderMixedLoad runs events and plain re-announces of
// many peers through two frontends on one Redis: a store in the test and
// a frontend process (this test binary again). Mid-way, between two
// announces and with refreshes queued there, the process is told to
// write its queue and is killed with SIGKILL at once: what it had not
// written is lost, and only the plain re-announces it answered may be
// (docs/bittorrent.md). Then the load goes on through the survivor,
// every live client announces once more, the survivor stops, and the test
// compares every torrent's seeders, leechers and snatches, every peer
// record, role entry and deadline (and that no timeout key is left), and every user's record
// on each torrent with what the clients announced: equal. 1,500 peers by
// default; HOARD_TEST_LONG=1: 100,000 on the single Redis, with the
// killed frontend a store in the test abandoned mid-way (its queue lost
// as in a kill; the process's loopback calls would make the run many
// times longer), and the default size, with the process, on the cluster
// (the cluster changes how the same scripts are routed, not what they
// do; 100,000 peers on it under -race took most of CI's run).
func TestNothingDriftsUnderMixedLoad(t *testing.T) {
	const users, workers = 40, 4
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		// maxStepMs bounds the time between steps, small enough that
		// torrents get plain re-announces within a view's age (hot), so
		// write-behind is exercised.
		torrents, peers, steps, maxStepMs := 12, 1_500, 12_000, 40
		long := os.Getenv("HOARD_TEST_LONG") != "" && b.Name != "cluster"
		if long {
			torrents, peers, steps, maxStepMs = 200, 100_000, 400_000, 2
		}
		ctx := context.Background()
		clock := swarm.NewFakeClock(epoch)
		cfg := driftConfig(clock)
		// The long run's frontend is a store in the test, abandoned rather
		// than killed: a call to the process costs a loopback round trip
		// and JSON under -race, and the long run makes 200,000 of them.
		var killed *frontendProcess
		if long {
			killed = inProcessFrontend(t, b.Client, clock)
		} else {
			killed = startFrontendProcess(t, b.URL)
		}
		conns := make([]*frontendConn, workers)
		for w := range conns {
			conns[w] = killed.dial(t)
		}
		survivor, err := swarm.New(b.Client, cfg)
		require.NoError(t, err)
		require.NoError(t, survivor.Start(ctx))
		t.Cleanup(func() { _ = survivor.Stop() })

		hashes := make([]bittorrent.InfoHash, torrents)
		for i := range hashes {
			hashes[i] = infoHash(fmt.Sprint("drift-", i))
			require.NoError(t, survivor.RegisterTorrent(ctx, hashes[i], fmt.Sprint("t", i)))
		}
		for u := range users {
			require.NoError(t, survivor.AddUser(ctx, pk(fmt.Sprintf("drift%03d", u)), fmt.Sprint("u", u)))
		}
		require.NoError(t, survivor.AddClient(ctx, "-TR", "Transmission"))

		clients := make([]*driftClient, peers)
		for i := range clients {
			c := &driftClient{torrent: i % torrents, id: peerID("-TR", i), addr: driftAddr(i), user: i % users}
			c.hash = hashes[c.torrent]
			clients[i] = c
		}
		// expected transfer per user and torrent: the sum of each
		// session's counters
		var expMu sync.Mutex
		expUp, expDown := map[string]uint64{}, map[string]uint64{}

		// announce sends c's announce to the survivor, or to the process
		// on conn when conn is not nil.
		announce := func(conn *frontendConn, c *driftClient, ev bittorrent.Event) {
			req := &bittorrent.AnnounceRequest{InfoHash: c.hash, PeerID: c.id, Addr: c.addr, Uploaded: c.up,
				Downloaded: c.down, Left: c.left, Event: ev, NumWant: 30, Passkey: pk(fmt.Sprintf("drift%03d", c.user))}
			var resp *bittorrent.AnnounceResponse
			var err error
			if conn == nil {
				resp, err = survivor.Announce(ctx, req)
			} else {
				var reply frontendReply
				reply, err = conn.call(frontendCall{Now: clock.Now().UnixMilli(), Req: req})
				resp = reply.Resp
			}
			require.NoError(t, err)
			require.GreaterOrEqual(t, resp.Complete+resp.Incomplete, int64(0))
			c.last, c.viaKilled, c.lastEvent = clock.Now().UnixMilli(), conn != nil, ev
		}
		// step moves one client on: a start, a stop, a completion (with
		// or without the event), or a plain re-announce that reports more
		// transfer, through store.
		step := func(store *frontendConn, c *driftClient, rng *rand.Rand) {
			key := fmt.Sprint(c.user, "/", c.torrent)
			if !c.active {
				c.active, c.seen, c.up, c.down = true, true, 0, 0
				if c.left == 0 && !c.finished {
					c.left = 1 << 20
					if rng.IntN(4) == 0 {
						c.left = 0 // a seeder from the start
					}
				}
				announce(store, c, bittorrent.EventStarted)
				return
			}
			du, dd := uint64(rng.IntN(5000)), uint64(rng.IntN(5000))
			c.up, c.down = c.up+du, c.down+dd
			expMu.Lock()
			expUp[key] += du
			expDown[key] += dd
			expMu.Unlock()
			ev := bittorrent.EventNone
			switch r := rng.IntN(100); {
			case r < 4:
				ev, c.active = bittorrent.EventStopped, false
			case r < 7 && c.left > 0:
				ev, c.left, c.finished = bittorrent.EventCompleted, 0, true
			case r < 9 && c.left > 0:
				c.left, c.finished = 0, true // left reaching 0 without the event
			case r < 20 && c.left > 1:
				c.left -= uint64(rng.IntN(int(c.left-1))) + 1 // still leeching
			}
			announce(store, c, ev)
		}

		// Time stands still during an announce (workers hold steady's read
		// lock), so each client knows the time its announce was stamped.
		var steady sync.RWMutex
		var dead bool // under steady
		var queuedAtKill, lostAtKill int
		var answeredByKilled int64
		// kill, with steady held (no announce in flight), has the process
		// write its queue and SIGKILLs it at once, unless nothing is
		// queued there; then it checks that only plain re-announces
		// answered there were lost, at most those queued.
		kill := func() {
			reply, err := conns[0].call(frontendCall{Now: clock.Now().UnixMilli(), Stats: true})
			require.NoError(t, err)
			if reply.Stats.Queued == 0 {
				return // nothing to lose: the next step tries again
			}
			queuedAtKill, answeredByKilled = reply.Stats.Queued, reply.Stats.Answered
			require.NoError(t, conns[0].send(frontendCall{Now: clock.Now().UnixMilli(), Flush: true}))
			killed.kill(t)
			dead = true
			pipe := b.Client.Pipeline()
			var sent []*driftClient
			var lasts []*redis.StringCmd
			for _, c := range clients {
				if c.viaKilled {
					sent = append(sent, c)
					lasts = append(lasts, pipe.HGet(ctx, btstore.PeerKey(c.hash, c.id), "last_announce"))
				}
			}
			_, err = pipe.Exec(ctx)
			require.NoError(t, err)
			for i, c := range sent {
				last, err := lasts[i].Int64()
				require.NoError(t, err, "peer %x announced to the killed frontend has a record", c.id)
				if last == c.last {
					continue
				}
				lostAtKill++
				require.Less(t, last, c.last, "peer %x: its record is older, not newer", c.id)
				require.Equal(t, bittorrent.EventNone, c.lastEvent, "peer %x: only a plain re-announce may be lost", c.id)
			}
			require.LessOrEqual(t, lostAtKill, queuedAtKill, "at most the queued refreshes are lost")
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w)+1, 27))
				for i := range steps / workers {
					c := clients[(rng.IntN(peers/workers))*workers+w]
					toKilled := rng.IntN(2) == 0
					steady.RLock()
					var conn *frontendConn
					if toKilled && !dead {
						conn = conns[w]
					}
					step(conn, c, rng)
					flush := w == 0 && i%97 == 0 && !dead
					steady.RUnlock()
					if flush {
						// the killed frontend's own write-behind ticks
						_, err := conns[0].call(frontendCall{Now: clock.Now().UnixMilli(), Flush: true})
						require.NoError(t, err)
					}
					steady.Lock()
					clock.Advance(time.Duration(rng.IntN(maxStepMs)) * time.Millisecond)
					if w == 0 && i >= steps/workers/2 && !dead {
						kill()
					}
					steady.Unlock()
				}
			}()
		}
		wg.Wait()
		require.True(t, dead, "the frontend process was killed with refreshes queued, or the test tests nothing")
		t.Logf("%d plain re-announces answered from views (%d by the killed frontend); SIGKILL with %d refreshes queued there: %d lost",
			answeredByKilled+survivor.WriteBehindStats().Answered, answeredByKilled, queuedAtKill, lostAtKill)

		// quiesce: every live client announces once more, then the
		// survivor stops (writing what it queued)
		for _, c := range clients {
			if c.active {
				clock.Advance(time.Millisecond)
				announce(nil, c, bittorrent.EventNone)
			}
		}
		require.NoError(t, survivor.Stop())

		timeout := survivor.Config().PeerTimeout.Milliseconds()
		snatched := map[string]bool{}
		for _, c := range clients {
			if c.finished {
				snatched[fmt.Sprint(c.user, "/", c.torrent)] = true
			}
		}
		for ti, hash := range hashes {
			keys := btstore.KeysOf(hash)
			wantSeeders, wantLeechers := map[string]string{}, map[string]string{}
			wantSnatches := 0
			for u := range users {
				if snatched[fmt.Sprint(u, "/", ti)] {
					wantSnatches++
				}
			}
			for _, c := range clients {
				if c.torrent != ti || !c.active {
					continue
				}
				entry := string(c.id[:])
				if c.left == 0 {
					wantSeeders[entry] = peerEntryOf(c)
				} else {
					wantLeechers[entry] = peerEntryOf(c)
				}
			}
			require.Equal(t, wantSeeders, b.Client.HGetAll(ctx, keys.Seeders).Val(), "torrent %d seeders", ti)
			require.Equal(t, wantLeechers, b.Client.HGetAll(ctx, keys.Leechers).Val(), "torrent %d leechers", ti)
			rec := b.Client.HMGet(ctx, keys.Torrent, "seeders", "leechers", "snatches").Val()
			require.Equal(t, []any{strconv.Itoa(len(wantSeeders)), strconv.Itoa(len(wantLeechers)), strconv.Itoa(wantSnatches)},
				rec, "torrent %d record", ti)
		}
		for _, c := range clients {
			if !c.seen {
				continue
			}
			keys := btstore.KeysOf(c.hash)
			rec := b.Client.HMGet(ctx, btstore.PeerKey(c.hash, c.id), "uploaded", "downloaded", "left", "last_announce", "active").Val()
			active := "0"
			if c.active {
				active = "1"
			}
			require.Equal(t, []any{strconv.FormatUint(c.up, 10), strconv.FormatUint(c.down, 10), strconv.FormatUint(c.left, 10),
				strconv.FormatInt(c.last, 10), active}, rec, "peer %x record", c.id)
			member := string(c.id[:]) + fmt.Sprint("u", c.user)
			score, err := b.Client.ZScore(ctx, keys.Deadlines, member).Result()
			if c.active {
				require.NoError(t, err, "peer %x (%+v) deadline: %v", c.id, *c, b.Client.HGetAll(ctx, btstore.PeerKey(c.hash, c.id)).Val())
				require.Equal(t, float64(c.last+timeout), score, "peer %x deadline", c.id)
				n := b.Client.Exists(ctx, btstore.TimeoutKey(c.hash, c.id, fmt.Sprint("u", c.user))).Val()
				require.Zero(t, n, "peer %x: no timeout key (the sweep expires peers)", c.id)
			} else {
				require.Error(t, err, "a stopped peer has no deadline")
			}
		}
		for u := range users {
			for ti, hash := range hashes {
				key := fmt.Sprint(u, "/", ti)
				activePeers := 0
				for _, c := range clients {
					if c.user == u && c.torrent == ti && c.active {
						activePeers++
					}
				}
				rec := b.Client.HMGet(ctx, btstore.UserTorrentKey(hash, fmt.Sprint("u", u)), "uploaded", "downloaded", "peers").Val()
				got := []uint64{0, 0, 0}
				for i, v := range rec {
					if v != nil {
						got[i], _ = strconv.ParseUint(v.(string), 10, 64)
					}
				}
				require.Equal(t, []uint64{expUp[key], expDown[key], uint64(activePeers)}, got, "user %d on torrent %d", u, ti)
			}
		}
	})
}

func peerEntryOf(c *driftClient) string {
	a := c.addr.Addr().As4()
	return string([]byte{6}) + string(c.id[:]) + string(a[:]) + string([]byte{byte(c.addr.Port() >> 8), byte(c.addr.Port())})
}
