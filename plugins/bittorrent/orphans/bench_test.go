package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// BenchmarkCleanupPass measures cleanup over a private
// tracker of HOARD_BENCH_TORRENTS torrents (100,000 by default; 1000000
// for the figure), 10% of them removed (unregistered and stale),
// each with a torrent record, a user record, its users set and a peer
// record; its 5,000 users each have a passkey listed, but every 100th,
// removed a window ago, whose records on the torrents (20 each at 100,000
// torrents) the pass purges. The removed torrents have their due entries,
// as UnregisterTorrent writes them. It reports the due pass (what the
// ticks of a window do: the due entries, and the passkeys walk the
// removed users wait for) and then a backstop pass (every walk, as once
// per backstop_period), each with its time and the Redis CPU it cost
// (used_cpu_sys + used_cpu_user before and after), then the announce rate
// of 16 callers against 200 live swarms for 3 s without cleanup, 3 s with
// due passes back to back and 3 s with backstop passes back to back. The
// population is written with pipelined commands, not announces. Run it
// once:
//
//	go test -run '^$' -bench CleanupPass -benchtime 1x ./plugins/bittorrent/orphans
func BenchmarkCleanupPass(b *testing.B) {
	n := 100_000
	if text := os.Getenv("HOARD_BENCH_TORRENTS"); text != "" {
		var err error
		if n, err = strconv.Atoi(text); err != nil || n < 10 {
			b.Fatalf("HOARD_BENCH_TORRENTS=%q: want a number of at least 10", text)
		}
	}
	var backend redistest.Backend
	for _, be := range redistest.Backends() {
		if be.Name == "single" {
			backend = be
		}
	}
	if backend.Client == nil {
		b.Fatal("no single redis-server backend")
	}
	ctx := context.Background()
	for range b.N {
		if err := redistest.Flush(ctx, backend); err != nil {
			b.Fatal(err)
		}
		rdb := backend.Client
		clock := swarm.NewFakeClock(epoch)
		// One user holds the live swarms' 20 peers each: no per-owner bound.
		store, err := swarm.New(rdb, swarm.Config{Private: true, Clock: clock, Logger: quietLogger, MaxPeersPerOwner: -1})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		populate(b, rdb, n, clock.Now().UnixMilli())
		b.Logf("populated %d torrents (%d orphans) in %v", n, n/10, time.Since(start).Round(time.Millisecond))
		clock.Advance(window + time.Minute)
		cleaner, err := orphans.New(rdb, orphans.Config{Store: store.Config(), Now: clock.Now, Logger: quietLogger,
			Policy: orphans.Policy{Window: window, ScanCount: 500, MaxKeysPerTick: 20_000}})
		if err != nil {
			b.Fatal(err)
		}

		// The due pass: what the ticks of a window do, the due entries
		// of the removed torrents and their users, and the passkeys walk
		// the removed users wait for.
		report, pass, cpu := timedPass(b, rdb, cleaner.DuePass)
		if report.Torrents != n/10 || report.UsersPurged != benchUsers/100 {
			b.Fatalf("pass removed %d torrent records and purged %d users, want %d and %d: %+v",
				report.Torrents, report.UsersPurged, n/10, benchUsers/100, report)
		}
		b.Logf("due pass: %v, Redis CPU %.2f s, scanned %d, removed %d records (%d torrents, %d user records, %d peer records, %d users purged)",
			pass.Round(time.Millisecond), cpu, report.Scanned, report.Removed(), report.Torrents, report.UserRecords, report.PeerRecords,
			report.UsersPurged)
		b.ReportMetric(pass.Seconds(), "pass-s")
		b.ReportMetric(cpu, "redis-cpu-s")
		// A due pass with nothing due: the steady state of each tick.
		idle, idlePass, idleCPU := timedPass(b, rdb, cleaner.DuePass)
		b.Logf("idle due pass: %v, Redis CPU %.3f s, scanned %d", idlePass.Round(time.Microsecond), idleCPU, idle.Scanned)
		b.ReportMetric(idlePass.Seconds(), "idle-pass-s")
		b.ReportMetric(idleCPU, "idle-redis-cpu-s")
		// HOARD_BENCH_BACKSTOP=0 leaves out the backstop pass and the
		// announces beside backstop passes: the six walks of before, whose
		// cost the run before this change measures (a 1M-torrent pass
		// took 10 minutes on the shared machine).
		backstopOn := os.Getenv("HOARD_BENCH_BACKSTOP") != "0"
		// The backstop pass (every backstop_period): every SCAN walk over
		// the remaining 90%, live, so it reads everything and removes
		// nothing but the peer records the due path leaves to their TTL.
		if backstopOn {
			backstopPass(b, rdb, cleaner)
		}
		quiet := announceRate(b, store, 3*time.Second, nil)
		busy := announceRate(b, store, 3*time.Second, passesBackToBack(b, cleaner.DuePass))
		b.Logf("announces/s: %.0f without cleanup, %.0f with due passes running", quiet, busy)
		b.ReportMetric(quiet, "announces/s-quiet")
		b.ReportMetric(busy, "announces/s-cleaning")
		if backstopOn {
			backstop := announceRate(b, store, 3*time.Second, passesBackToBack(b, cleaner.Pass))
			b.Logf("announces/s: %.0f with backstop passes running", backstop)
			b.ReportMetric(backstop, "announces/s-backstop")
		}
		_ = store.Stop()
	}
}

// backstopPass times one backstop pass (every walk) and reports it.
func backstopPass(b *testing.B, rdb redis.UniversalClient, cleaner *orphans.Cleaner) {
	b.Helper()
	report, pass, cpu := timedPass(b, rdb, cleaner.Pass)
	b.Logf("backstop pass: %v, Redis CPU %.2f s, scanned %d, removed %d records (%d peer records)",
		pass.Round(time.Millisecond), cpu, report.Scanned, report.Removed(), report.PeerRecords)
	b.ReportMetric(pass.Seconds(), "backstop-pass-s")
	b.ReportMetric(cpu, "backstop-redis-cpu-s")
}

// timedPass runs one pass and returns its report, time and Redis CPU.
func timedPass(b *testing.B, rdb redis.UniversalClient, pass func(context.Context) (orphans.Report, error)) (orphans.Report, time.Duration, float64) {
	b.Helper()
	cpu0 := redisCPU(b, rdb)
	t0 := time.Now()
	report, err := pass(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return report, time.Since(t0), redisCPU(b, rdb) - cpu0
}

// passesBackToBack runs pass over and over until stopped.
func passesBackToBack(b *testing.B, pass func(context.Context) (orphans.Report, error)) func(stop <-chan struct{}) int {
	return func(stop <-chan struct{}) int {
		passes := 0
		for {
			select {
			case <-stop:
				return passes
			default:
			}
			if _, err := pass(context.Background()); err != nil {
				b.Error(err)
				return passes
			}
			passes++
		}
	}
}

// populate writes n torrents in pipelines of 1000: every tenth is
// unregistered (stamped at now), the rest registered.
func populate(b *testing.B, rdb redis.UniversalClient, n int, now int64) {
	b.Helper()
	ctx := context.Background()
	const batch = 1000
	pipe := rdb.Pipeline()
	for u := range benchUsers {
		user := "u" + strconv.Itoa(u)
		if u%100 == 0 { // removed: no passkey left, marked a window ago
			pipe.HSet(ctx, btstore.UserGoneKey(user), "removed_at", now)
			pipe.ZAdd(ctx, btstore.RemovedUsersKey, redis.Z{Score: float64(now), Member: user})
			continue
		}
		pipe.Set(ctx, btstore.PasskeyKey(pkPrefix+user), user, 0)
		pipe.HSet(ctx, btstore.UserPasskeysKey(user), pkPrefix+user, now)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < n; from += batch {
		pipe := rdb.Pipeline()
		for i := from; i < min(from+batch, n); i++ {
			hash := infoHash("bench" + strconv.Itoa(i))
			user := "u" + strconv.Itoa(i%benchUsers)
			if i%benchUsers%100 == 0 {
				pipe.HSet(ctx, btstore.UserTorrentsKey(user), "t"+strconv.Itoa(i), btstore.HexInfoHash(hash))
			}
			fields := []any{"registered", now, "created", now, "announces", 2, "seeders", 0, "leechers", 0}
			if i%10 == 0 {
				fields = append(fields, "unregistered", now)
				// as UnregisterTorrent records it
				if err := btstore.MarkTorrentDue(ctx, pipe, hash, now); err != nil {
					b.Fatal(err)
				}
			} else {
				fields = append(fields, "id", "t"+strconv.Itoa(i))
				pipe.HSet(ctx, btstore.RegistryKey, btstore.HexInfoHash(hash), "t"+strconv.Itoa(i))
			}
			pipe.HSet(ctx, btstore.TorrentKey(hash), fields...)
			pipe.HSet(ctx, btstore.UserTorrentKey(hash, user), "uploaded", 10, "peers", 0, "first_announce", now, "last_announce", now, "bits", 2, "ver", now)
			pipe.SAdd(ctx, btstore.TorrentUsersKey(hash), user)
			pipe.HSet(ctx, btstore.PeerKey(hash, peerID(i)), "user", user, "last_announce", now, "first_announce", now, "active", 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// benchUsers is how many users the bench's torrents are spread over.
const benchUsers = 5000

// redisCPU reads the server's used CPU (sys + user, seconds).
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			v, _ := strconv.ParseFloat(value, 64)
			total += v
		}
	}
	return total
}

// announceRate runs 16 announcing goroutines for d against 200 live
// swarms (registered, 20 peers each) and returns announces per second;
// beside, when not nil, runs until they stop.
func announceRate(b *testing.B, store *swarm.Store, d time.Duration, beside func(stop <-chan struct{}) int) float64 {
	b.Helper()
	ctx := context.Background()
	if err := store.AddClient(ctx, "-TR", "bench"); err != nil {
		b.Fatal(err)
	}
	if err := store.AddUser(ctx, pkPrefix+"bench", "bench"); err != nil {
		b.Fatal(err)
	}
	hashes := make([]bittorrent.InfoHash, 200)
	for i := range hashes {
		hashes[i] = infoHash("live-swarm" + strconv.Itoa(i))
		if err := store.RegisterTorrent(ctx, hashes[i], "live"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var count atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				peer := g*20 + k%20
				_, err := store.Announce(ctx, &bittorrent.AnnounceRequest{
					InfoHash: hashes[(g*7+k)%len(hashes)], PeerID: peerID(peer), Passkey: pkPrefix + "bench", NumWant: 50, Left: 100,
					Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(peer >> 8), byte(peer)}), 6881),
				})
				if err != nil {
					b.Error(fmt.Errorf("announce: %w", err))
					return
				}
				count.Add(1)
			}
		}()
	}
	passes := make(chan int, 1)
	if beside != nil {
		go func() { passes <- beside(stop) }()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	if beside != nil {
		b.Logf("%d cleanup passes ran during the announces", <-passes)
	}
	return float64(count.Load()) / d.Seconds()
}
