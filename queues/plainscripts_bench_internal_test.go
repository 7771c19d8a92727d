package queues

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hoardproject/hoard/internal/redistest"
)

// BenchmarkPlainScriptsDirect calls claim_plain.lua and done_plain.lua
// directly, one item per call, from 32 callers through the engine's
// batcher: the scripts alone, without the engine's counters and log,
// whose flushes and pushes follow the part's wall time and so blur
// BenchmarkMultiClaimDone's instructions per call. With
// HOARD_BENCH_CALLGRIND_PID the claims and the dones are dumped as two
// parts (docs/warrior-path.md). Both scripts' ARGV are those of the build
// before these scripts answered one item as a string, and either build's
// one-item replies are read, so this file also measures those builds.
func BenchmarkPlainScriptsDirect(b *testing.B) {
	const callers = 32
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			ctx := context.Background()
			const slug = "bench"
			rounds := (b.N + callers - 1) / callers
			e, cfg, keys := newPlainBenchProject(ctx, b, backend, slug, rounds*callers)
			claimed := make([][]string, callers)
			const now = int64(1_800_000_000_000)
			b.ResetTimer()
			dump := redistest.CountRedisInstructions(b)
			eachBenchCaller(b, claimed, func(downloader string, mine *[]string) error {
				record := "1 " + strconv.FormatInt(now, 10) + " " + downloader + " 127.0.0.1 - -"
				deadline := strconv.FormatInt(now+21_600_000, 10)
				for range rounds {
					reply, err := e.runScript(ctx, "bench", claimPlainScript, keys.plain, cfg.version, 1, record, deadline)
					if err != nil {
						return err
					}
					// This build answers the item; the build before {1, item}.
					switch r := reply.(type) {
					case string:
						*mine = append(*mine, r)
					case []any:
						if len(r) != 2 || r[0] != int64(1) {
							return fmt.Errorf("claim_plain.lua answered %v", r)
						}
						*mine = append(*mine, replyString(r[1]))
					default:
						return fmt.Errorf("claim_plain.lua answered %T", reply)
					}
				}
				return nil
			})
			claimsWall := dump()
			dump = redistest.CountRedisInstructions(b)
			eachBenchCaller(b, claimed, func(downloader string, mine *[]string) error {
				for _, item := range *mine {
					reply, err := e.runScript(ctx, "bench", donePlainScript, keys.donePlain, downloader, item)
					if err != nil {
						return err
					}
					// This build answers "<at> <log_length>"; the build
					// before {1, log_length, at, 1}.
					if _, ok := reply.(string); ok {
						continue
					}
					if code, _, err := scriptListReply("bench", reply); err != nil || code != 1 {
						return fmt.Errorf("done_plain.lua answered %v (%v)", reply, err)
					}
				}
				return nil
			})
			donesWall := dump()
			b.StopTimer()
			endPlainBench(ctx, b, backend, slug, claimsWall, donesWall, rounds*callers)
		})
	}
}

// BenchmarkCoalescedPlainScripts claims and completes b.N items one per
// request, in batches of k requests of k downloaders as the engine's
// plain batcher sends concurrent ones (plainbatch.go): k=1 is a lone call
// (claim_plain.lua, done_plain.lua), k=32 one claim_plain_many.lua and one
// done_plain_many.lua call per 32 requests. The batches are made here, one
// after another, so each size is what it says, whatever the load. With
// HOARD_BENCH_CALLGRIND_PID the claims and the dones are dumped as two
// parts per size (docs/warrior-path.md, "Coalesced one-item claims and
// dones (s43)").
func BenchmarkCoalescedPlainScripts(b *testing.B) {
	for _, backend := range redistest.Backends() {
		for _, k := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", backend.Name, k), func(b *testing.B) {
				ctx := context.Background()
				const slug = "bench"
				rounds := (b.N + k - 1) / k
				e, cfg, keys := newPlainBenchProject(ctx, b, backend, slug, rounds*k)
				downloaders := make([]string, k)
				for i := range downloaders {
					downloaders[i] = fmt.Sprintf("bench%03d", i)
				}
				// A claim time and deadline per request, as a real clock
				// gives, so the deadlines index is not one score.
				now := int64(1_800_000_000_000)
				claimed := make([]string, 0, rounds*k)
				b.ResetTimer()
				dump := redistest.CountRedisInstructions(b)
				for range rounds {
					calls := make([]*plainCall, k)
					for i := range calls {
						now++
						calls[i] = &plainCall{ctx: ctx, slug: slug, cfg: cfg,
							record:   "1 " + strconv.FormatInt(now, 10) + " " + downloaders[i] + " 127.0.0.1 - -",
							deadline: strconv.FormatInt(now+21_600_000, 10), keys: plainKeys(keys.plain, 1)}
					}
					e.plainBatches.run(calls)
					for _, c := range calls {
						item, ok := c.reply.(string)
						if c.err != nil || !ok {
							b.Fatalf("claim answered %v (%v)", c.reply, c.err)
						}
						claimed = append(claimed, item)
					}
				}
				claimsWall := dump()
				dump = redistest.CountRedisInstructions(b)
				for r := range rounds {
					calls := make([]*plainCall, k)
					for i := range calls {
						calls[i] = &plainCall{ctx: ctx, slug: slug, done: true, downloader: downloaders[i],
							item: claimed[r*k+i], keys: plainKeys(keys.donePlain, 1)}
					}
					e.plainBatches.run(calls)
					for _, c := range calls {
						if _, ok := c.reply.(string); c.err != nil || !ok {
							b.Fatalf("done answered %v (%v)", c.reply, c.err)
						}
					}
				}
				donesWall := dump()
				b.StopTimer()
				endPlainBench(ctx, b, backend, slug, claimsWall, donesWall, rounds*k)
			})
		}
	}
}

// newPlainBenchProject starts an engine on a flushed backend with a plain
// project of n items in todo, and returns the engine, its copy of the
// project's settings (checked plain) and the project's script keys.
// eachBenchCaller runs part once per caller at once, caller w as downloader
// "bench<w>" with claimed[w] its own, and fails the benchmark on the first
// error any returned.
func eachBenchCaller[T any](b *testing.B, claimed []T, part func(downloader string, mine *T) error) {
	var wg sync.WaitGroup
	errs := make(chan error, len(claimed))
	for w := range claimed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := part(fmt.Sprintf("bench%03d", w), &claimed[w]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func newPlainBenchProject(ctx context.Context, b *testing.B, backend redistest.Backend, slug string, n int) (*Engine, *plainConfig, *warriorKeys) {
	b.Helper()
	if err := redistest.Flush(ctx, backend); err != nil {
		b.Fatal(err)
	}
	e := NewEngine(backend.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if _, err := e.CreateProject(ctx, slug, SettingsPatch{}); err != nil {
		b.Fatal(err)
	}
	items := make([]QueueItem, 0, n)
	for i := range n {
		items = append(items, QueueItem{Name: fmt.Sprintf("bench/item/%09d", i)})
	}
	for len(items) > 0 {
		batch := items[:min(len(items), 10_000)]
		if _, err := e.Enqueue(ctx, slug, Target{Queue: QueueTodo}, batch); err != nil {
			b.Fatal(err)
		}
		items = items[len(batch):]
	}
	cfg := e.plainConfigs.get(ctx, e, slug)
	if cfg == nil || !cfg.plain {
		b.Fatal("the project is not plain")
	}
	return e, cfg, e.warriorKeys.get(slug)
}

// endPlainBench reports the parts' wall times (dumped to callgrind, when
// one was asked for) and checks that every item claimed was done.
func endPlainBench(ctx context.Context, b *testing.B, backend redistest.Backend, slug string, claimsWall, donesWall time.Duration, want int) {
	b.Helper()
	if claimsWall > 0 {
		b.ReportMetric(claimsWall.Seconds(), "claims-wall-s")
		b.ReportMetric(donesWall.Seconds(), "dones-wall-s")
	}
	done, err := backend.Client.SCard(ctx, DoneKey(slug)).Result()
	if err != nil {
		b.Fatal(err)
	}
	if done != int64(want) {
		b.Fatalf("%d items done, want %d", done, want)
	}
}
