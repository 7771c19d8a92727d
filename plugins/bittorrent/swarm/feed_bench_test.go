package swarm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// BenchmarkFeed measures the feed's Redis cost per row in a tracker's
// steady state, where every crediting announce falls in a new feed round:
// one op is one crediting re-announce on each of feedBenchTorrents
// torrents (one user each, so one row per torrent, as most torrents have
// between two rounds), the flush that indexes them, and one feed round
// that reads, delivers (to nothing: the outbox is measured by its own
// benchmark) and settles every row. redis-µs/announce is redis-server's
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
			store, err := swarm.New(backend.Client, swarm.Config{Private: true, Logger: quietLogger, WriteBehind: -1})
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
