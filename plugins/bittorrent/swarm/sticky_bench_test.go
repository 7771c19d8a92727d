package swarm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// BenchmarkAnnounceSticky is hoard-bench announce's load in the swarm
// alone, on an injected clock: 2,000 torrents of 10 peers each (a quarter
// seeding), every announce a plain re-announce of a random peer on its
// own torrent, numwant 50, each torrent announced to 1.5 times a second
// (the bench's 10,000 torrents at 15,000 announces/s), the write-behind
// loop ticking DrainTicks times per DefaultWriteBehind of that clock and
// the batch flushed every DefaultWriteBehind. Every announce reports
// transfer, but in "/write-behind-idle" (hoard-bench announce's load: its
// peers' counters do not move) and "/slow-idle", which is that at 0.9
// announces per torrent and second (hoard-bench's new-connection mode:
// about 9,000/s over 10,000 torrents, so most re-announces find their
// view past its age). "/direct" sends every announce through
// announce.lua. One caller, so redis-µs/announce is
// redis-server's CPU per announce with no pipeline sharing it; script-µs
// is its time inside FCALL per announce, scripts/announce how many
// script calls each announce cost and commands/announce how many Redis
// commands (inside scripts or not): the last two do not swing with the
// machine's load.
func BenchmarkAnnounceSticky(b *testing.B) {
	const torrents, peersEach = 2000, 10
	for _, backend := range redistest.Backends() {
		for _, variant := range []string{"write-behind", "write-behind-idle", "slow-idle", "direct"} {
			perTorrentPerSecond := 1.5
			if variant == "slow-idle" {
				perTorrentPerSecond = 0.9
			}
			step := time.Duration(float64(time.Second) / perTorrentPerSecond / torrents)
			idle := variant == "write-behind-idle" || variant == "slow-idle"
			ctx := context.Background()
			if err := redistest.Flush(ctx, backend); err != nil {
				b.Fatal(err)
			}
			clock := swarm.NewFakeClock(epoch)
			cfg := swarm.Config{Logger: quietLogger, Clock: clock, MaxPeersPerOwner: -1}
			if variant == "direct" {
				cfg.WriteBehind = -1
			}
			store, err := swarm.New(backend.Client, cfg)
			if err != nil {
				b.Fatal(err)
			}
			hashes := make([]bittorrent.InfoHash, torrents)
			for i := range hashes {
				hashes[i] = infoHash(fmt.Sprint("sticky-", i))
			}
			moved := uint64(0)
			announce := func(torrent, peer int) {
				if !idle {
					moved += 1000
				}
				req := request(hashes[torrent], peerID("-ST", torrent*peersEach+peer), torrent*peersEach+peer,
					numWant(benchNumWant), transfer(moved, moved))
				if peer < peersEach/4 {
					req.Left = 0
				}
				if _, err := store.Announce(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			for t := range torrents {
				for p := range peersEach {
					announce(t, p)
				}
			}
			clock.Advance(time.Second)
			b.Run(backend.Name+"/"+variant, func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				if err := store.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				resetStats(b, backend.Client)
				cpuBefore := redisCPUSeconds(b, backend.Client)
				stopCount := countRedisInstructions(b)
				paths := store.WriteBehindStats()
				b.ReportAllocs()
				b.ResetTimer()
				var sinceTick, sinceFlush time.Duration
				for range b.N {
					announce(rng.IntN(torrents), rng.IntN(peersEach))
					clock.Advance(step)
					// The store's loops, on the injected clock: the
					// write-behind's ticks and the batch's flush.
					if sinceTick += step; sinceTick >= swarm.DefaultWriteBehind/swarm.DrainTicks {
						sinceTick = 0
						if err := swarm.DrainDue(ctx, store); err != nil {
							b.Fatal(err)
						}
					}
					if sinceFlush += step; sinceFlush >= swarm.DefaultWriteBehind {
						sinceFlush = 0
						if err := swarm.FlushBatch(ctx, store); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := store.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				stopCount()
				reportAnnounceCosts(b, backend.Client, cpuBefore)
				reportWriteBehindPaths(b, paths, store.WriteBehindStats())
			})
			if err := store.Stop(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// countRedisInstructions brackets a benchmark's timed part for callgrind:
// with HOARD_BENCH_CALLGRIND_PID naming a redis-server started under
// `valgrind --tool=callgrind --instr-atstart=no` (and HOARD_TEST_REDIS_URL
// pointing at it), it turns instrumentation on and zeroes the counters
// now, and the returned func dumps them and reports the part's wall time
// (wall-s), by which Redis's idle timers are subtracted. Instruction
// counts do not move with the machine's load, as CPU time does (method:
// docs/bittorrent-storage.md). Without the variable it does nothing.
func countRedisInstructions(b *testing.B) func() {
	dump := redistest.CountRedisInstructions(b)
	return func() {
		if wall := dump(); wall > 0 {
			b.ReportMetric(wall.Seconds(), "wall-s")
		}
	}
}

// reportWriteBehindPaths reports where the timed part's plain
// re-announces went, per announce: view reads (refresh.lua writing the
// announce and reading the view), the queue's refresh.lua calls and the
// peers they wrote; what is left was answered from a view alone.
func reportWriteBehindPaths(b *testing.B, before, after swarm.WriteBehindStats) {
	n := float64(b.N)
	b.ReportMetric(float64(after.ViewReads-before.ViewReads)/n, "view-reads/announce")
	b.ReportMetric(float64(after.AlongPeers-before.AlongPeers)/n, "along-peers/announce")
	b.ReportMetric(float64(after.DrainCalls-before.DrainCalls)/n, "drain-calls/announce")
	b.ReportMetric(float64(after.DrainPeers-before.DrainPeers)/n, "drain-peers/announce")
	b.ReportMetric(float64(after.DrainReads-before.DrainReads)/n, "drain-reads/announce")
}
