package swarm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

const (
	benchTorrents    = 200
	benchSeeders     = 25 // per torrent
	benchLeechers    = 25 // per torrent
	benchNumWant     = 50
	benchParallelism = 8 // goroutines per GOMAXPROCS, so Redis is kept busy
)

// BenchmarkAnnounce measures steady-state announces (event none,
// numwant 50) from parallel callers against 200 swarms of 25 seeders and
// 25 leechers, in open and private mode, on each real backend, with plain
// re-announces written behind (the default) and through announce.lua
// each ("/direct"). The store is started, so its batched flush and
// write-behind run as in production; redis-µs/announce is redis-server's
// CPU (INFO cpu) per announce, the queue's last write included.
func BenchmarkAnnounce(b *testing.B) {
	for _, backend := range redistest.Backends() {
		// "/direct": every announce through announce.lua (no write-behind);
		// private-noacct is private with accounting off: side by side
		// with private, what crediting and the feed's mark cost;
		// private-watch is private with the ledger and every cheat signal
		// on (the plugin's defaults): side by side with private, what
		// they cost.
		for _, variant := range []string{"open", "private", "private-noacct", "private-watch", "open/direct", "private/direct",
			"private-watch/direct"} {
			mode := variant
			private := strings.HasPrefix(variant, "private")
			writeBehind := time.Duration(0)
			if strings.HasSuffix(variant, "/direct") {
				writeBehind = -1
			}
			ctx := context.Background()
			if err := redistest.Flush(ctx, backend); err != nil {
				b.Fatal(err)
			}
			// One user holds every peer here: no per-owner bound.
			cfg := swarm.Config{Private: private, Logger: quietLogger, MaxPeersPerOwner: -1,
				WriteBehind: writeBehind, NoAccounting: variant == "private-noacct"}
			if strings.HasPrefix(variant, "private-watch") {
				cfg.Watch = swarm.WatchConfig{LedgerEntries: 20, NoLeecher: true, MaxUploadRate: 1 << 30, DownloadFactor: 3,
					MaxAddresses: 5}
			}
			store, err := swarm.New(backend.Client, cfg)
			if err != nil {
				b.Fatal(err)
			}
			hashes := make([]bittorrent.InfoHash, benchTorrents)
			for i := range hashes {
				hashes[i] = infoHash(fmt.Sprint("bench-", i))
				if private {
					if err := store.RegisterTorrent(ctx, hashes[i], fmt.Sprint(i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			if private {
				if err := store.AddUser(ctx, pk("benchpasskey"), "benchuser"); err != nil {
					b.Fatal(err)
				}
				if err := store.AddClient(ctx, "-BN", "bench"); err != nil {
					b.Fatal(err)
				}
			}
			// Counters only grow (one clock for every peer), so each
			// re-announce reports transfer, as a real swarm's do.
			var counter atomic.Uint64
			benchRequest := func(torrent, peer int) *bittorrent.AnnounceRequest {
				moved := counter.Add(1000)
				req := request(hashes[torrent], peerID("-BN", peer), peer, numWant(benchNumWant), transfer(moved, moved))
				if peer < benchSeeders {
					req.Left = 0
				}
				if private {
					req.Passkey = pk("benchpasskey")
				}
				return req
			}
			for t := range benchTorrents {
				for p := range benchSeeders + benchLeechers {
					if _, err := store.Announce(ctx, benchRequest(t, p)); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := store.Start(ctx); err != nil {
				b.Fatal(err)
			}

			b.Run(backend.Name+"/"+mode, func(b *testing.B) {
				measureAnnounces(b, backend, store, func(rng *rand.Rand) *bittorrent.AnnounceRequest {
					return benchRequest(rng.IntN(benchTorrents), rng.IntN(benchSeeders+benchLeechers))
				})
			})
			if err := store.Stop(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAnnounceJoins measures what hoard-bench announce's uniform
// load costs: there every announce picks a torrent and a peer at random
// (10,000 torrents, 100,000 peers), so nearly every one is a new peer
// joining a small swarm, and nothing is written behind. Here: open mode,
// 2,000 torrents of 10 peers to start, every announce a new peer (a
// quarter seeding), numwant 50, on each backend.
func BenchmarkAnnounceJoins(b *testing.B) {
	const torrents, startPeers = 2000, 10
	for _, backend := range redistest.Backends() {
		ctx := context.Background()
		if err := redistest.Flush(ctx, backend); err != nil {
			b.Fatal(err)
		}
		store, err := swarm.New(backend.Client, swarm.Config{Logger: quietLogger, MaxPeersPerOwner: -1, WriteBehind: -1})
		if err != nil {
			b.Fatal(err)
		}
		hashes := make([]bittorrent.InfoHash, torrents)
		for i := range hashes {
			hashes[i] = infoHash(fmt.Sprint("joins-", i))
		}
		var next atomic.Int64
		join := func(torrent int) *bittorrent.AnnounceRequest {
			peer := int(next.Add(1))
			req := request(hashes[torrent], peerID("-JN", peer), peer, numWant(benchNumWant))
			if peer%4 == 0 {
				req.Left = 0
			}
			return req
		}
		for t := range torrents {
			for range startPeers {
				if _, err := store.Announce(ctx, join(t)); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := store.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Run(backend.Name, func(b *testing.B) {
			measureAnnounces(b, backend, store, func(rng *rand.Rand) *bittorrent.AnnounceRequest {
				return join(rng.IntN(torrents))
			})
		})
		if err := store.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}

// measureAnnounces announces b.N requests from benchParallelism
// goroutines per CPU, flushes, and reports redis-server's CPU per
// announce, the peers each answer carried and the script's µs per call;
// the announces and the flush are one callgrind part
// (countRedisInstructions).
func measureAnnounces(b *testing.B, backend redistest.Backend, store *swarm.Store, request func(rng *rand.Rand) *bittorrent.AnnounceRequest) {
	ctx := context.Background()
	var peersSeen atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	resetStats(b, backend.Client)
	cpuBefore := redisCPUSeconds(b, backend.Client)
	b.ResetTimer()
	stopCount := countRedisInstructions(b)
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			resp, err := store.Announce(ctx, request(rng))
			if err != nil {
				b.Error(err)
				return
			}
			peersSeen.Add(int64(len(resp.Peers)))
		}
	})
	if err := store.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	stopCount()
	b.ReportMetric((redisCPUSeconds(b, backend.Client)-cpuBefore)*1e6/float64(b.N), "redis-µs/announce")
	b.ReportMetric(float64(peersSeen.Load())/float64(b.N), "peers/op")
	b.ReportMetric(redisMicrosPerCall(b, backend.Client), "redis-µs/script")
}

// BenchmarkTrivialScript is the floor BenchmarkAnnounce compares with: a
// one-line script run as hoard runs its scripts (luascript: an FCALL),
// with the same parallelism, on the same backends, in the same run.
func BenchmarkTrivialScript(b *testing.B) {
	trivial := luascript.FromSource("return 1")
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			if err := trivial.Load(ctx, backend.Client); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(benchParallelism)
			b.ReportAllocs()
			resetStats(b, backend.Client)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:{bench-%d}:trivial", rand.IntN(1000))
				for pb.Next() {
					if _, err := luascript.Run(ctx, backend.Client, trivial, []string{key}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(redisMicrosPerCall(b, backend.Client), "redis-µs/script")
		})
	}
}

// redisMicrosPerCall reads how long the server spent per script call
// since the last CONFIG RESETSTAT, summed over a cluster's masters.
func redisMicrosPerCall(b *testing.B, client redis.UniversalClient) float64 {
	b.Helper()
	st := scriptStats(commandStats(b, client))
	if st.calls == 0 {
		return 0
	}
	return st.usec / st.calls
}

// scriptStats sums the script calls' lines of stats: FCALL, and EVALSHA
// and EVAL where a server has no functions.
func scriptStats(stats map[string]commandStat) commandStat {
	var sum commandStat
	for name, st := range stats {
		if luascript.IsScriptCall(name) {
			sum.calls += st.calls
			sum.usec += st.usec
		}
	}
	return sum
}

// commandStat is one command's calls and µs in INFO commandstats.
type commandStat struct{ calls, usec float64 }

// commandStats reads INFO commandstats (since the last CONFIG RESETSTAT),
// summed over a cluster's masters: a script's commands count on their own
// lines as well as inside FCALL's.
func commandStats(b *testing.B, client redis.UniversalClient) map[string]commandStat {
	b.Helper()
	ctx := context.Background()
	stats := map[string]commandStat{}
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
			if !ok {
				continue
			}
			command, fields, _ := strings.Cut(rest, ":")
			st := stats[command]
			for _, field := range strings.Split(fields, ",") {
				name, value, _ := strings.Cut(field, "=")
				n, _ := strconv.ParseFloat(value, 64)
				switch name {
				case "calls":
					st.calls += n
				case "usec":
					st.usec += n
				}
			}
			stats[command] = st
		}
		return nil
	}
	var err error
	if cluster, ok := client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, c)
		})
	} else {
		err = read(ctx, client.(*redis.Client))
	}
	if err != nil {
		b.Fatal(err)
	}
	return stats
}

// redisCPUSeconds is redis-server's used_cpu_sys + used_cpu_user, summed
// over a cluster's masters.
func redisCPUSeconds(b *testing.B, client redis.UniversalClient) float64 {
	b.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	total := 0.0
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				v, _ := strconv.ParseFloat(value, 64)
				mu.Lock()
				total += v
				mu.Unlock()
			}
		}
		return nil
	}
	var err error
	if cluster, ok := client.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, read)
	} else {
		err = read(ctx, client.(*redis.Client))
	}
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// resetStats zeroes the servers' command statistics.
func resetStats(b *testing.B, client redis.UniversalClient) {
	b.Helper()
	ctx := context.Background()
	reset := func(ctx context.Context, c *redis.Client) error { return c.ConfigResetStat(ctx).Err() }
	if cluster, ok := client.(*redis.ClusterClient); ok {
		if err := cluster.ForEachMaster(ctx, reset); err != nil {
			b.Fatal(err)
		}
		return
	}
	if err := reset(ctx, client.(*redis.Client)); err != nil {
		b.Fatal(err)
	}
}

// reportAnnounceCosts reports Redis's cost per announce since cpuBefore
// (the benchmark's timed part): its CPU, the scripts' calls and time, and
// the commands the scripts ran or were sent alone (INFO and the stats
// reset left out).
func reportAnnounceCosts(b *testing.B, client redis.UniversalClient, cpuBefore float64) {
	b.Helper()
	stats := commandStats(b, client)
	commands := 0.0
	for name, st := range stats {
		if !luascript.IsScriptCall(name) && name != "info" && name != "config|resetstat" && !strings.HasPrefix(name, "function|") {
			commands += st.calls
		}
	}
	scripts := scriptStats(stats)
	b.ReportMetric((redisCPUSeconds(b, client)-cpuBefore)*1e6/float64(b.N), "redis-µs/announce")
	b.ReportMetric(scripts.usec/float64(b.N), "script-µs/announce")
	b.ReportMetric(scripts.calls/float64(b.N), "scripts/announce")
	b.ReportMetric(commands/float64(b.N), "commands/announce")
}
