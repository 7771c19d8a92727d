package swarm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// BenchmarkFeed measures the feed's Redis cost per row in a tracker's
// steady state, where every crediting announce falls in a new feed round:
// one op is one crediting re-announce on each of feedBenchTorrents
// torrents (one user each, so one row per torrent, as most torrents have
// between two rounds), the flush, and one feed round that delivers (to
// nothing: the outbox is measured by its own benchmark) every row the
// frontend holds. redis-µs/announce is redis-server's
// CPU for the announces and the flush, redis-µs/row for the round; next to
// BenchmarkAnnounce's private-noacct, they are what the feed adds.
func BenchmarkFeed(b *testing.B) {
	const feedBenchTorrents = 500
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			if err := redistest.Flush(ctx, backend); err != nil {
				b.Fatal(err)
			}
			store, err := swarm.New(backend.Client, swarm.Config{Private: true, Logger: quietLogger, WriteBehind: -1,
				OnFeed: func(context.Context, []swarm.FeedBatch) error { return nil }})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = store.Stop() }()
			if err := store.AddClient(ctx, "-BN", "bench"); err != nil {
				b.Fatal(err)
			}
			hashes := make([]bittorrent.InfoHash, feedBenchTorrents)
			for i := range hashes {
				hashes[i] = infoHash(fmt.Sprint("feed-bench-", i))
				if err := store.RegisterTorrent(ctx, hashes[i], fmt.Sprint(i)); err != nil {
					b.Fatal(err)
				}
				if err := store.AddUser(ctx, pk(fmt.Sprint("feedbench", i)), fmt.Sprint("u", i)); err != nil {
					b.Fatal(err)
				}
			}
			moved := uint64(0)
			wave := func(opts ...announceOpt) {
				moved += 1000
				for i, hash := range hashes {
					req := request(hash, peerID("-BN", i), i, append(opts, transfer(moved, moved))...)
					req.Passkey = pk(fmt.Sprint("feedbench", i))
					if _, err := store.Announce(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				if err := store.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			rows := 0
			round := func() {
				n, err := store.FeedRound(ctx, func(context.Context, []swarm.FeedBatch) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				rows += n
			}
			wave(event(bittorrent.EventStarted))
			wave()
			round()
			rows = 0
			var announceCPU, roundCPU float64
			b.ResetTimer()
			for b.Loop() {
				before := redisCPUSeconds(b, backend.Client)
				wave()
				mid := redisCPUSeconds(b, backend.Client)
				round()
				announceCPU += mid - before
				roundCPU += redisCPUSeconds(b, backend.Client) - mid
			}
			if rows != b.N*feedBenchTorrents {
				b.Fatalf("the rounds delivered %d rows, want %d", rows, b.N*feedBenchTorrents)
			}
			b.ReportMetric(announceCPU*1e6/float64(b.N*feedBenchTorrents), "redis-µs/announce")
			b.ReportMetric(roundCPU*1e6/float64(rows), "redis-µs/row")
		})
	}
}

// BenchmarkFeedSticky is hoard-bench announce-private's load in the swarm
// alone, on an injected clock, with accounting on ("acct": the ledger and
// the signals at the plugin's defaults; "acct-noledger": the same without
// the ledger, so the ledger's share reads off as the difference) and off
// ("noacct"): 2,000 registered torrents of 10 peers each (a quarter
// seeding) over 500 users, every announce a plain re-announce of a
// random peer with its counters grown, each torrent announced to 1.5
// times a second, the
// write-behind queue written every 500 ms and a feed round (delivering to
// nothing: the outbox has its own benchmark) every second of that clock.
// scripts/announce and commands/announce do not swing with the machine's
// load; redis-µs/announce is redis-server's CPU per announce, the feed's
// rounds included, and process-µs/announce this process's (the plugin's
// side: the store, the feed's rounds, the GC; the benchmark's own
// requests too, the same in every variant). Run redis-server under
// callgrind (HOARD_TEST_REDIS_URL) for instructions per announce
// (docs/bittorrent-site.md).
func BenchmarkFeedSticky(b *testing.B) {
	const torrents, peersEach, users = 2000, 10, 500
	step := time.Second * 2 / 3 / torrents
	for _, backend := range redistest.Backends() {
		for _, variant := range []string{"acct", "acct-noledger", "noacct", "acct-churn", "noacct-churn"} {
			// -churn: one announce in 20 is a peer stopping, and a
			// stopped peer's next one starts it again, as swarms churn;
			// a stopped peer's record then counts down to its expiry,
			// so the store holds keys with a TTL, as every running
			// tracker's does (without churn only accounting's
			// many-addresses keys have one).
			churn := strings.HasSuffix(variant, "-churn")
			variant := strings.TrimSuffix(variant, "-churn")
			ctx := context.Background()
			if err := redistest.Flush(ctx, backend); err != nil {
				b.Fatal(err)
			}
			clock := swarm.NewFakeClock(epoch)
			cfg := swarm.Config{Private: true, Logger: quietLogger, Clock: clock, MaxPeersPerOwner: -1,
				NoAccounting: variant == "noacct"}
			if variant != "noacct" {
				cfg.Watch = swarm.WatchConfig{LedgerEntries: 20, NoLeecher: true, MaxUploadRate: 1 << 30, DownloadFactor: 3,
					MaxAddresses: 5}
			}
			if variant == "acct-noledger" {
				cfg.Watch.LedgerEntries = 0 // what the ledger costs: acct less this
			}
			if variant != "noacct" {
				// A frontend with an outbox: it stamps records and holds
				// the rows its rounds deliver (to nothing here).
				cfg.OnFeed = func(context.Context, []swarm.FeedBatch) error { return nil }
			}
			store, err := swarm.New(backend.Client, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := store.AddClient(ctx, "-ST", "sticky"); err != nil {
				b.Fatal(err)
			}
			for u := range users {
				if err := store.AddUser(ctx, pk(fmt.Sprint("sticky", u)), fmt.Sprint("u", u)); err != nil {
					b.Fatal(err)
				}
			}
			hashes := make([]bittorrent.InfoHash, torrents)
			for i := range hashes {
				hashes[i] = infoHash(fmt.Sprint("sticky-", i))
				if err := store.RegisterTorrent(ctx, hashes[i], fmt.Sprint(i)); err != nil {
					b.Fatal(err)
				}
			}
			moved := uint64(0)
			stopped := make([]bool, torrents*peersEach)
			timed := false // the set-up announces every peer into its swarm
			churnRNG := rand.New(rand.NewPCG(3, 4))
			announce := func(torrent, peer int) {
				moved += 1000
				n := torrent*peersEach + peer
				req := request(hashes[torrent], peerID("-ST", n), n, numWant(50), transfer(moved, moved))
				switch {
				case !churn || !timed:
				case stopped[n]:
					req.Event, stopped[n] = bittorrent.EventStarted, false
				case churnRNG.IntN(20) == 0:
					req.Event, stopped[n] = bittorrent.EventStopped, true
				}
				req.Passkey = pk(fmt.Sprint("sticky", n%users))
				if peer < peersEach/4 {
					req.Left = 0
				}
				if _, err := store.Announce(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			rows := 0
			round := func() {
				n, err := store.FeedRound(ctx, func(context.Context, []swarm.FeedBatch) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				rows += n
			}
			for t := range torrents {
				for p := range peersEach {
					announce(t, p)
				}
			}
			clock.Advance(time.Second)
			if err := store.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			round()
			name := variant
			if churn {
				name += "-churn"
			}
			b.Run(backend.Name+"/"+name, func(b *testing.B) {
				timed = true
				rng := rand.New(rand.NewPCG(1, 2))
				rows = 0
				resetStats(b, backend.Client)
				cpuBefore := redisCPUSeconds(b, backend.Client)
				ownBefore := processCPUSeconds(b)
				b.ReportAllocs()
				b.ResetTimer()
				stopCount := countRedisInstructions(b)
				var sinceWrite, sinceRound time.Duration
				for range b.N {
					announce(rng.IntN(torrents), rng.IntN(peersEach))
					clock.Advance(step)
					if sinceWrite += step; sinceWrite >= 500*time.Millisecond {
						sinceWrite = 0
						if err := store.Flush(ctx); err != nil {
							b.Fatal(err)
						}
					}
					if sinceRound += step; sinceRound >= time.Second {
						sinceRound = 0
						round()
					}
				}
				if err := store.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				round()
				b.StopTimer()
				b.ReportMetric((processCPUSeconds(b)-ownBefore)*1e6/float64(b.N), "process-µs/announce")
				stopCount()
				reportAnnounceCosts(b, backend.Client, cpuBefore)
				b.ReportMetric(float64(rows)/float64(b.N), "rows/announce")
			})
			if err := store.Stop(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// processCPUSeconds is this process's CPU time (user and system, every
// goroutine's and the GC's): the plugin's side of an announce, Redis's
// left out.
func processCPUSeconds(b *testing.B) float64 {
	b.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
}
