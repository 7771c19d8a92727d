package swarm_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

func TestAnnounceCountsSeedersLeechersAndAnnounces(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("counts")
		resp := f.announce(hash, peerID("-TR", 1), 1, event(bittorrent.EventStarted))
		require.Equal(t, int64(0), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)
		require.Equal(t, 30*time.Minute, resp.Interval)
		require.Equal(t, 15*time.Minute, resp.MinInterval)
		require.Empty(t, resp.Peers, "a lone leecher gets no peers, not itself")

		resp = f.announce(hash, peerID("-TR", 2), 2, seeding)
		require.Equal(t, int64(1), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)

		// The leecher finishes: it moves from leechers to seeders.
		resp = f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventCompleted))
		require.Equal(t, int64(2), resp.Complete)
		require.Equal(t, int64(0), resp.Incomplete)
		require.Equal(t, int64(1), resp.Downloaded)

		// A seeder that needs data again (new files) is a leecher again.
		resp = f.announce(hash, peerID("-TR", 2), 2)
		require.Equal(t, int64(1), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)
		resp = f.announce(hash, peerID("-TR", 2), 2, seeding)
		require.Equal(t, int64(2), resp.Complete)
		require.Equal(t, int64(0), resp.Incomplete)

		info := f.torrent(hash)
		require.Equal(t, int64(5), info.Announces)
		require.Equal(t, int64(2), info.Seeders)
		require.Equal(t, int64(0), info.Leechers)
		require.Equal(t, int64(2), info.Snatches, "peer 2's left went from above 0 to 0: its first snatch")
		require.Equal(t, epoch, info.Created.UTC())
		require.Empty(t, info.ID, "open mode registers nothing")
	})
}

func TestCompletedCountsOneSnatchPerPeer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("snatches")
		f.announce(hash, peerID("-TR", 1), 1, event(bittorrent.EventStarted))
		f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventCompleted))
		resp := f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventCompleted))
		require.Equal(t, int64(1), resp.Downloaded, "a repeated completed must not count twice")

		// Stopping and coming back with the same peer id is the same peer.
		f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventStopped))
		f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventStarted))
		resp = f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventCompleted))
		require.Equal(t, int64(1), resp.Downloaded)

		resp = f.announce(hash, peerID("-TR", 2), 2, seeding, event(bittorrent.EventCompleted))
		require.Equal(t, int64(2), resp.Downloaded, "another peer's completed counts")
		require.Equal(t, int64(2), f.stats().Snatches)
	})
}

func TestStoppedRemovesThePeer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		hash := infoHash("stopped")
		f.announce(hash, peerID("-TR", 1), 1, seeding)
		f.announce(hash, peerID("-TR", 2), 2)
		resp := f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventStopped))
		require.Equal(t, int64(0), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)
		require.Empty(t, resp.Peers, "a stopping peer gets no peers")

		resp = f.announce(hash, peerID("-TR", 2), 2)
		require.Empty(t, resp.Peers, "the stopped seeder must not be handed out")
		n, err := b.Client.ZCard(ctx, btstore.DeadlinesKey(hash)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		exists, err := b.Client.Exists(ctx, btstore.TimeoutKey(hash, peerID("-TR", 1), "")).Result()
		require.NoError(t, err)
		require.Zero(t, exists)
		active, err := b.Client.HGet(ctx, btstore.PeerKey(hash, peerID("-TR", 1)), "active").Result()
		require.NoError(t, err)
		require.Equal(t, "0", active, "the record stays, inactive")
		ttl, err := b.Client.PTTL(ctx, btstore.PeerKey(hash, peerID("-TR", 1))).Result()
		require.NoError(t, err)
		require.Equal(t, 24*time.Hour, ttl.Round(time.Hour), "for PeerRetention")
		ttl, err = b.Client.PTTL(ctx, btstore.PeerKey(hash, peerID("-TR", 2))).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "an active peer's record does not expire")

		// The stopped peer comes back: its record is kept again.
		f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventStarted))
		ttl, err = b.Client.PTTL(ctx, btstore.PeerKey(hash, peerID("-TR", 1))).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl)
		f.announce(hash, peerID("-TR", 1), 1, seeding, event(bittorrent.EventStopped))

		// A stopped from a peer never seen changes nothing.
		resp = f.announce(hash, peerID("-TR", 9), 9, event(bittorrent.EventStopped))
		require.Equal(t, int64(1), resp.Incomplete)
		exists, err = b.Client.Exists(ctx, btstore.PeerKey(hash, peerID("-TR", 9))).Result()
		require.NoError(t, err)
		require.Zero(t, exists)

		st := f.stats()
		require.Equal(t, int64(0), st.Seeders)
		require.Equal(t, int64(1), st.Leechers)
	})
}

func TestPeerSelection(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{MaxNumWant: 8})
		hash := infoHash("selection")
		seeders := map[bittorrent.PeerID]bool{}
		leechers := map[bittorrent.PeerID]bool{}
		for i := range 10 {
			f.announce(hash, peerID("-SD", i), i, seeding)
			seeders[peerID("-SD", i)] = true
		}
		for i := range 20 {
			f.announce(hash, peerID("-LC", i), 100+i)
			leechers[peerID("-LC", i)] = true
		}

		// A seeder gets only leechers, never more than asked or the cap.
		me := peerID("-SD", 3)
		resp := f.announce(hash, me, 3, seeding, numWant(5))
		require.Len(t, resp.Peers, 5)
		for _, p := range resp.Peers {
			require.True(t, leechers[p.ID], "a seeder got a non-leecher %q", p.ID)
		}
		resp = f.announce(hash, me, 3, seeding, numWant(500))
		require.Len(t, resp.Peers, 8, "numwant is capped by MaxNumWant")
		require.NotContains(t, peerIDs(resp.Peers), me)

		// A leecher gets seeders first, then leechers, never itself.
		me = peerID("-LC", 7)
		resp = f.announce(hash, me, 107, numWant(8))
		require.Len(t, resp.Peers, 8)
		for _, p := range resp.Peers {
			require.True(t, seeders[p.ID], "with 10 seeders a leecher asking 8 gets only seeders")
		}
		for range 20 {
			resp = f.announce(hash, me, 107, numWant(8))
			require.NotContains(t, peerIDs(resp.Peers), me)
			ids := map[bittorrent.PeerID]bool{}
			for _, p := range resp.Peers {
				require.False(t, ids[p.ID], "a peer handed out twice")
				ids[p.ID] = true
			}
		}
		resp = f.announce(hash, me, 107, numWant(0))
		require.Empty(t, resp.Peers)

		// Addresses come back as announced.
		small := infoHash("selection-small")
		f.announce(small, peerID("-SD", 1), 1, seeding)
		resp = f.announce(small, peerID("-LC", 1), 2, numWant(50))
		require.Equal(t, []bittorrent.Peer{{ID: peerID("-SD", 1), Addr: addr(1)}}, resp.Peers)

		// A leecher in a swarm of leechers gets all the others, not itself.
		only := infoHash("selection-leechers")
		for i := range 4 {
			f.announce(only, peerID("-LC", i), i)
		}
		resp = f.announce(only, peerID("-LC", 0), 0, numWant(50))
		require.ElementsMatch(t, []bittorrent.PeerID{peerID("-LC", 1), peerID("-LC", 2), peerID("-LC", 3)}, peerIDs(resp.Peers))
	})
}

func TestAddressChangeAndIPv6(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("ipv6")
		v6 := netip.MustParseAddrPort("[2001:db8::1]:51413")
		_, err := f.store.Announce(context.Background(), &bittorrent.AnnounceRequest{
			InfoHash: hash, PeerID: peerID("-TR", 1), Addr: v6, Left: 0,
		})
		require.NoError(t, err)
		resp := f.announce(hash, peerID("-TR", 2), 2)
		require.Equal(t, []bittorrent.Peer{{ID: peerID("-TR", 1), Addr: v6}}, resp.Peers)

		// The seeder moves to IPv4 (mapped in v6, as a dual-stack socket
		// reports it): it stays one peer, at its new address.
		mapped := netip.AddrPortFrom(netip.MustParseAddr("::ffff:192.0.2.7"), 6881)
		_, err = f.store.Announce(context.Background(), &bittorrent.AnnounceRequest{
			InfoHash: hash, PeerID: peerID("-TR", 1), Addr: mapped, Left: 0,
		})
		require.NoError(t, err)
		resp = f.announce(hash, peerID("-TR", 2), 2)
		require.Equal(t, []bittorrent.Peer{{ID: peerID("-TR", 1), Addr: netip.MustParseAddrPort("192.0.2.7:6881")}}, resp.Peers)
		require.Equal(t, int64(1), resp.Complete)
	})
}

// A UDP reply carries one family only, so the store picks among that
// family's peers: an IPv4 client in a mostly-IPv6 swarm still gets the
// IPv4 peers there are, and an IPv6 client gets no IPv4 ones.
func TestPeerFamilyPicksOnlyThatFamily(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("families")
		for i := 1; i <= 10; i++ {
			v6 := netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}), 6881)
			_, err := f.store.Announce(context.Background(), &bittorrent.AnnounceRequest{
				InfoHash: hash, PeerID: peerID("-TR", i), Addr: v6, Left: 0,
			})
			require.NoError(t, err)
		}
		f.announce(hash, peerID("-TR", 11), 11, seeding) // the one IPv4 seeder

		resp, err := f.store.Announce(context.Background(), &bittorrent.AnnounceRequest{
			InfoHash: hash, PeerID: peerID("-LT", 1), Addr: addr(12), Left: 1, NumWant: 6,
			PeerFamily: bittorrent.IPv4Only,
		})
		require.NoError(t, err)
		require.Equal(t, []bittorrent.Peer{{ID: peerID("-TR", 11), Addr: addr(11)}}, resp.Peers)

		resp, err = f.store.Announce(context.Background(), &bittorrent.AnnounceRequest{
			InfoHash: hash, PeerID: peerID("-LT", 2),
			Addr: netip.MustParseAddrPort("[2001:db8::99]:6881"), Left: 1, NumWant: 50,
			PeerFamily: bittorrent.IPv6Only,
		})
		require.NoError(t, err)
		require.Len(t, resp.Peers, 10, "all ten IPv6 seeders, and neither the IPv4 seeder nor the IPv4 leecher")
		for _, p := range resp.Peers {
			require.True(t, p.Addr.Addr().Is6(), p.Addr.String())
		}
	})
}

func TestBadRequestsAreRefused(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("bad")
		require.Contains(t, f.refuse(hash, peerID("-TR", 1), 1, func(r *bittorrent.AnnounceRequest) {
			r.Addr = netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), 0)
		}), "port")
		require.Contains(t, f.refuse(hash, peerID("-TR", 1), 1, event(bittorrent.Event(9))), "event")
		_, err := f.store.Torrent(context.Background(), hash)
		require.ErrorIs(t, err, swarm.ErrNotFound, "a refused announce writes nothing")
	})
}

func TestLastActionMovesOnlyWhileSeeded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("last-action")
		f.announce(hash, peerID("-TR", 1), 1)
		require.True(t, f.torrent(hash).LastAction.IsZero(), "never seeded")

		f.clock.Advance(time.Minute)
		f.announce(hash, peerID("-TR", 2), 2, seeding)
		seededAt := epoch.Add(time.Minute)
		require.Equal(t, seededAt, f.torrent(hash).LastAction.UTC())

		// Any announce while it has a seeder moves it (a plain
		// re-announce once its refresh is written).
		f.clock.Advance(time.Minute)
		f.announce(hash, peerID("-TR", 1), 1)
		f.flush()
		seededAt = seededAt.Add(time.Minute)
		require.Equal(t, seededAt, f.torrent(hash).LastAction.UTC())

		// The seeder stops: it was seeding until now.
		f.clock.Advance(time.Minute)
		f.announce(hash, peerID("-TR", 2), 2, seeding, event(bittorrent.EventStopped))
		seededAt = seededAt.Add(time.Minute)
		require.Equal(t, seededAt, f.torrent(hash).LastAction.UTC())

		// Without seeders, announces no longer move it.
		f.clock.Advance(time.Hour)
		f.announce(hash, peerID("-TR", 1), 1)
		f.announce(hash, peerID("-TR", 3), 3, event(bittorrent.EventStarted))
		f.flush()
		require.Equal(t, seededAt, f.torrent(hash).LastAction.UTC())
		require.Equal(t, epoch, f.torrent(hash).Created.UTC())
	})
}

func TestScrape(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		a, c := infoHash("scrape-a"), infoHash("scrape-c")
		f.announce(a, peerID("-TR", 1), 1, seeding)
		f.announce(a, peerID("-TR", 2), 2)
		f.announce(a, peerID("-TR", 2), 2, seeding, event(bittorrent.EventCompleted))
		f.announce(a, peerID("-TR", 3), 3)
		f.announce(c, peerID("-TR", 1), 1)
		entries, err := f.store.Scrape(ctx, "", []bittorrent.InfoHash{a, infoHash("unknown"), c})
		require.NoError(t, err)
		require.Equal(t, []bittorrent.ScrapeEntry{
			{Complete: 2, Incomplete: 1, Downloaded: 1},
			{},
			{Complete: 0, Incomplete: 1},
		}, entries)
		entries, err = f.store.Scrape(ctx, "", nil)
		require.NoError(t, err)
		require.Empty(t, entries)
		st := f.stats()
		require.Equal(t, int64(2), st.Scrapes)
		require.Equal(t, int64(7), st.Requests)
	})
}

func TestGlobalCountersAndIndexes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		big, small := infoHash("big"), infoHash("small")
		for i := range 5 {
			f.announce(big, peerID("-SD", i), i, seeding)
		}
		for i := range 3 {
			f.announce(big, peerID("-LC", i), 10+i)
		}
		f.announce(big, peerID("-LC", 0), 10, seeding, event(bittorrent.EventCompleted))
		f.announce(small, peerID("-SD", 0), 0, seeding)
		f.announce(small, peerID("-LC", 0), 10)
		f.announce(small, peerID("-LC", 1), 11)
		f.announce(small, peerID("-LC", 1), 11, event(bittorrent.EventStopped))

		st := f.stats()
		require.Equal(t, swarm.Stats{Announces: 13, Requests: 13, Seeders: 7, Leechers: 3, Snatches: 1}, st)

		top, err := f.store.Top(ctx, btstore.IndexSeeders, 10)
		require.NoError(t, err)
		require.Equal(t, []swarm.Ranked{{InfoHash: big, Count: 6}, {InfoHash: small, Count: 1}}, top)
		top, err = f.store.Top(ctx, btstore.IndexLeechers, 1)
		require.NoError(t, err)
		require.Equal(t, []swarm.Ranked{{InfoHash: big, Count: 2}}, top)
		top, err = f.store.Top(ctx, btstore.IndexSnatches, 10)
		require.NoError(t, err)
		require.Equal(t, []swarm.Ranked{{InfoHash: big, Count: 1}}, top)
		_, err = f.store.Top(ctx, btstore.Index("bogus"), 10)
		require.ErrorIs(t, err, swarm.ErrInvalid)

		// A frontend that died with an unflushed batch: Repair rebuilds
		// the global view from the torrents.
		require.NoError(t, b.Client.Del(ctx, btstore.StatsKey).Err())
		require.NoError(t, b.Client.Del(ctx, btstore.IndexKey(btstore.IndexSeeders)).Err())
		require.NoError(t, b.Client.ZAdd(ctx, btstore.IndexKey(btstore.IndexLeechers),
			redis.Z{Score: 40, Member: "ffffffffffffffffffffffffffffffffffffffff"}).Err())
		report, err := f.store.Repair(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, report.Torrents)
		require.Equal(t, 2, report.IndexFixed, "both seeder entries were missing")
		require.Equal(t, 1, report.IndexRemoved, "the entry of a torrent that does not exist")
		st = f.stats()
		require.Equal(t, int64(7), st.Seeders)
		require.Equal(t, int64(3), st.Leechers)
		require.Equal(t, int64(1), st.Snatches)
		top, err = f.store.Top(ctx, btstore.IndexSeeders, 10)
		require.NoError(t, err)
		require.Equal(t, []swarm.Ranked{{InfoHash: big, Count: 6}, {InfoHash: small, Count: 1}}, top)
		top, err = f.store.Top(ctx, btstore.IndexLeechers, 10)
		require.NoError(t, err)
		require.Len(t, top, 2)
	})
}

// Announces sent in shared pipelines (one pipeline, so batches form) and
// announces sent alone count the same.
func TestConcurrentAnnouncesKeepCountsExact(t *testing.T) {
	for _, mode := range []struct {
		name      string
		pipelines int
	}{{"coalesced", 1}, {"alone", -1}} {
		t.Run(mode.name, func(t *testing.T) { concurrentAnnounces(t, mode.pipelines) })
	}
}

func concurrentAnnounces(t *testing.T, pipelines int) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{AnnouncePipelines: pipelines})
		ctx := context.Background()
		hashes := []bittorrent.InfoHash{infoHash("race-a"), infoHash("race-b")}
		const workers, peers = 8, 20
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for p := range peers {
					id := peerID("-TR", w*1000+p)
					for _, hash := range hashes {
						for _, req := range []*bittorrent.AnnounceRequest{
							request(hash, id, p, event(bittorrent.EventStarted)),
							request(hash, id, p, seeding, event(bittorrent.EventCompleted)),
							request(hash, id, p, seeding, event(bittorrent.EventCompleted)),
						} {
							if _, err := f.store.Announce(ctx, req); err != nil {
								t.Error(err)
								return
							}
						}
						if p%2 == 0 { // half of them leave again
							if _, err := f.store.Announce(ctx, request(hash, id, p, seeding, event(bittorrent.EventStopped))); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}
			})
		}
		wg.Wait()
		for _, hash := range hashes {
			info := f.torrent(hash)
			require.Equal(t, int64(workers*peers/2), info.Seeders)
			require.Equal(t, int64(0), info.Leechers)
			require.Equal(t, int64(workers*peers), info.Snatches)
			require.Equal(t, int64(workers*peers*3+workers*peers/2), info.Announces)
		}
		st := f.stats()
		require.Equal(t, int64(len(hashes)*workers*peers/2), st.Seeders)
		require.Equal(t, int64(0), st.Leechers)
		require.Equal(t, int64(len(hashes)*workers*peers), st.Snatches)
	})
}

// The peer record keeps what the peer moved since its previous announce
// (up_delta, down_delta) beside the totals it reported; a started event
// opens a session, so it moves nothing, and a counter that went backwards
// (a client restart) counts as nothing.
func TestPeerRecordKeepsTransferDeltas(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		ctx := context.Background()
		hash := infoHash("deltas")
		peer := peerID("-TR", 1)
		deltas := func() []any {
			v, err := b.Client.HMGet(ctx, btstore.PeerKey(hash, peer), "up_delta", "down_delta", "uploaded", "downloaded").Result()
			require.NoError(t, err)
			return v
		}
		f.announce(hash, peer, 1, event(bittorrent.EventStarted), transfer(500, 700))
		require.Equal(t, []any{"0", "0", "500", "700"}, deltas())
		f.clock.Advance(time.Minute)
		f.announce(hash, peer, 1, transfer(1500, 1000))
		f.flush() // a plain re-announce is written behind
		require.Equal(t, []any{"1000", "300", "1500", "1000"}, deltas())
		f.clock.Advance(time.Minute)
		f.announce(hash, peer, 1, transfer(100, 1200))
		f.flush()
		require.Equal(t, []any{"0", "200", "100", "1200"}, deltas())
	})
}

// After Stop, the shared pipelines are gone and an announce (from a
// listener still draining) goes out alone.
func TestAnnounceAfterStopGoesOutAlone(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, swarm.Config{})
		hash := infoHash("after-stop")
		f.announce(hash, peerID("-TR", 1), 1, seeding)
		require.NoError(t, f.store.Stop())
		require.NoError(t, f.store.Stop(), "Stop twice is safe")
		resp := f.announce(hash, peerID("-TR", 2), 2)
		require.Equal(t, int64(1), resp.Complete)
		require.Equal(t, int64(1), resp.Incomplete)
		require.Equal(t, []bittorrent.PeerID{peerID("-TR", 1)}, peerIDs(resp.Peers))
	})
}
