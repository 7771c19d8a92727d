package main

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/btloadgen"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

// The unique-IP metrics' memory: Redis bytes per registered (metric, IP)
// pair and in total for --ips distinct IPs, each announcing on one of
// --torrents torrents (so 8 pairs per IP: 4 global, 4 on its torrent).

type ipmetricsBenchOptions struct {
	ips      int
	torrents int
	ipv6     float64
	geoipDB  []string
	batch    int
}

const maxBenchIPs = 5_000_000

func benchIPMetricsCommand() *cobra.Command {
	var o ipmetricsBenchOptions
	cmd := &cobra.Command{
		Use:   "ipmetrics-memory",
		Short: "Redis bytes per registered (metric, IP) pair of the unique-IP metrics, and the total for --ips distinct IPs",
		Long: `Starts a redis-server, registers --ips distinct IPs (a share of them IPv6),
each on one of --torrents torrents and located with the city database when
one is installed, through the same scripts the tracker runs, and reports
used_memory per (metric, IP) pair, split into global and per-torrent
markers (MEMORY USAGE of a sample) and counters. For comparison it writes
a sample in btstat's layout (one string key per metric and IP, with a TTL)
and reports its bytes per pair.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchIPMetrics(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.ips, "ips", 1_000_000, "distinct IPs to register")
	f.IntVar(&o.torrents, "torrents", 10_000, "torrents the IPs announce on (one each)")
	f.Float64Var(&o.ipv6, "ipv6", 0.2, "fraction of the IPs that are IPv6")
	f.StringSliceVar(&o.geoipDB, "geoip-db", nil, "city database(s) to locate the IPs (default: DB-IP's from make deps, when installed)")
	f.IntVar(&o.batch, "batch", 1000, "registrations per pipeline")
	return cmd
}

func benchIPMetrics(ctx context.Context, o ipmetricsBenchOptions) error {
	switch {
	case o.ips < 1000 || o.ips > maxBenchIPs:
		return fmt.Errorf("--ips must be between 1000 and %d", maxBenchIPs)
	case o.torrents < 1 || o.torrents > maxBenchTorrents:
		return fmt.Errorf("--torrents must be between 1 and %d", maxBenchTorrents)
	case o.ipv6 < 0 || o.ipv6 > 1:
		return errors.New("--ipv6 must be between 0 and 1")
	case o.batch < 1 || o.batch > 10000:
		return errors.New("--batch must be between 1 and 10000")
	}
	dir, err := os.MkdirTemp("", "hoard-bench-ipmetrics-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rs, rdb, stopRedis, err := startBenchRedis(ctx, dir, quiet)
	if err != nil {
		return err
	}
	defer stopRedis()

	var locator ipmetrics.Locator = ipmetrics.NoGeo{}
	geo := o.geoipDB
	if len(geo) == 0 {
		geo = defaultGeoDB()
	}
	if len(geo) > 0 {
		db, err := ipmetrics.OpenGeoDB(geo...)
		if err != nil {
			return err
		}
		defer db.Close()
		locator = db
	}
	fmt.Printf("bench ipmetrics-memory: redis-server %s; %d IPs (%.0f%% IPv6) on %d torrents; geoip_db %v\n",
		rs.URL(), o.ips, 100*o.ipv6, o.torrents, geo)

	ipOf := func(i int) netip.Addr {
		if float64(i%1000) < o.ipv6*1000 {
			// A /48 per IP spread by a hash, in 2001::/16 and 2a00::/16
			// (space the databases place).
			v4 := btloadgen.PeerIP(2, uint64(i)).As4()
			var b [16]byte
			b[0], b[1] = 0x20, 0x01
			if i%2 == 1 {
				b[0], b[1] = 0x2a, 0x00
			}
			copy(b[2:6], v4[:])
			binary.BigEndian.PutUint32(b[12:], uint32(i))
			return netip.AddrFrom16(b)
		}
		// A bijection of i over the 32-bit space: distinct, spread.
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(i)*2654435761)
		return netip.AddrFrom4(b)
	}
	hashOf := func(i int) bittorrent.InfoHash { return sha1.Sum([]byte("ipm-bench-" + strconv.Itoa(i%o.torrents))) }

	// btstat's layout for comparison (under its own 9-byte prefix, as long
	// as ours), first and then flushed: one string
	// key with a TTL per (metric, IP), the global four and the four per
	// torrent, in an empty Redis.
	const oldSample = 20000
	oldBefore, err := benchUsedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	for from := 0; from < oldSample; from += 1000 {
		_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := from; i < from+1000; i++ {
				ip := ipOf(i).String()
				loc := locator.Locate(ipOf(i))
				h := hashOf(i)
				for _, m := range []string{"users", "countries." + loc.Country + ".users",
					"countries." + loc.Country + ".cities." + loc.City + ".users",
					"countries." + loc.Country + ".postcodes." + loc.Postcode + ".users"} {
					pipe.Set(ctx, "btstat:0{ipm:0}:"+m+"."+ip, "1", ipmetrics.DefaultWindow)
					pipe.Set(ctx, "btstat:0{"+fmt.Sprintf("%x", h[:])+"}:"+m+"."+ip, "1", ipmetrics.DefaultWindow)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	oldAfter, err := benchUsedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	oldPerPair := float64(oldAfter-oldBefore) / float64(oldSample*8)
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return err
	}
	before, err := benchUsedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	store := ipmetrics.NewStore(rdb, nil, 0)
	start := time.Now()
	var counted int
	places := map[string]bool{}
	for from := 0; from < o.ips; from += o.batch {
		regs := make([]ipmetrics.Registration, 0, o.batch)
		for i := from; i < min(from+o.batch, o.ips); i++ {
			ip := ipOf(i)
			loc := locator.Locate(ip)
			places[loc.Country+"/"+loc.City] = true
			regs = append(regs, ipmetrics.Registration{IP: ip, Hash: hashOf(i), Loc: loc, Global: true, Torrent: true})
		}
		n, err := store.Register(ctx, regs)
		if err != nil {
			return err
		}
		counted += n
	}
	elapsed := time.Since(start)
	after, err := benchUsedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	// The scripts' replies may sum to less than 8 per IP: go-redis
	// retries a pipeline that timed out (a loaded machine), and the
	// scripts that had already run answer 0 the second time. Redis's
	// counts are what must be exact.
	users, err := store.Users(ctx, nil, "")
	if err != nil {
		return err
	}
	if users != int64(o.ips) {
		return fmt.Errorf("users counted %d, want %d", users, o.ips)
	}

	// MEMORY USAGE of a sample of markers, and of every counter hash.
	sample := min(o.ips, 2000)
	var globalMarkers, torrentMarkers int64
	for k := range sample {
		i := k * (o.ips / sample)
		g, err := rdb.MemoryUsage(ctx, btstore.IPMGlobalMarkersKey(ipOf(i)), 0).Result()
		if err != nil {
			return err
		}
		t, err := rdb.MemoryUsage(ctx, btstore.IPMTorrentMarkersKey(hashOf(i), ipOf(i)), 0).Result()
		if err != nil {
			return err
		}
		globalMarkers += g
		torrentMarkers += t
	}
	gPerIP, tPerIP := float64(globalMarkers)/float64(sample), float64(torrentMarkers)/float64(sample)
	month := ipmetrics.LastMonths(time.Now(), 1)[0]
	var counters int64
	for shard := range btstore.IPMShards {
		for _, k := range []string{btstore.IPMGlobalTotalKey(shard), btstore.IPMGlobalMonthKey(shard, month)} {
			n, err := rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return err
			}
			counters += n
		}
	}
	var torrentCounters int64
	for i := range min(o.torrents, 200) {
		for _, k := range []string{btstore.IPMTorrentTotalKey(hashOf(i)), btstore.IPMTorrentMonthKey(hashOf(i), month)} {
			n, err := rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return err
			}
			torrentCounters += n
		}
	}
	torrentCountersAll := float64(torrentCounters) / float64(min(o.torrents, 200)) * float64(o.torrents)

	pairs := float64(8 * o.ips)
	perPair := float64(after-before) / pairs
	fmt.Printf("registered %d IPs x 8 metrics in %s (%.0f registrations/s, 2 scripts each); users counted: %d; scripts answered %d new pairs; %d distinct country/city places\n",
		o.ips, elapsed.Round(time.Millisecond), float64(o.ips)/elapsed.Seconds(), users, counted, len(places))
	fmt.Printf("used_memory grew %.1f MiB: %.1f bytes per (metric, IP) pair, %.0f bytes per IP\n",
		float64(after-before)/(1<<20), perPair, float64(after-before)/float64(o.ips))
	fmt.Printf("  global markers (HASH per IP, 4 fields): %.0f bytes per IP = %.1f per pair (MEMORY USAGE, %d sampled)\n", gPerIP, gPerIP/4, sample)
	fmt.Printf("  torrent markers (HASH per IP and torrent, 4 fields): %.0f bytes = %.1f per pair\n", tPerIP, tPerIP/4)
	fmt.Printf("  counters: %.1f MiB global (%d shards x all time and month), ~%.1f MiB on the %d torrents\n",
		float64(counters)/(1<<20), btstore.IPMShards, torrentCountersAll/(1<<20), o.torrents)
	fmt.Printf("at 1M distinct IPs (8 pairs each): %.0f MiB\n", perPair*8e6/(1<<20))
	fmt.Printf("btstat's layout (one string key with a TTL per metric and IP, text IPs), %d IPs x 8 metrics in an empty Redis: %.1f bytes per pair (%.0f MiB per 1M IPs x 8)\n",
		oldSample, oldPerPair, oldPerPair*8e6/(1<<20))
	return nil
}

func benchUsedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}
