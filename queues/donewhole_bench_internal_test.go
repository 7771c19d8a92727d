package queues

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// BenchmarkMultiDoneScripts: 32 callers each claim multi=100 batches with
// claim_plain.lua, then report each batch whole, in order, as seesaw
// does, with done_plain.lua (what a frontend with
// Options.PreBatchFrontends runs, and the build before) or
// done_plain_whole.lua (the default), called directly: the done scripts
// alone, without the engine's counters and log, whose flushes follow the
// part's wall time (BenchmarkMultiClaimDone's spread). b.N is claims of
// 100 items. With HOARD_BENCH_CALLGRIND_PID the claims and the dones are
// dumped as two parts per script (docs/warrior-path.md).
func BenchmarkMultiDoneScripts(b *testing.B) {
	const callers, multi = 32, 100
	for _, backend := range redistest.Backends() {
		for _, done := range []*luascript.Script{donePlainScript, donePlainWholeScript} {
			b.Run(backend.Name+"/"+strings.TrimSuffix(done.File(), ".lua"), func(b *testing.B) {
				ctx := context.Background()
				const slug = "bench"
				rounds := (b.N + callers - 1) / callers
				e, cfg, keys := newPlainBenchProject(ctx, b, backend, slug, rounds*callers*multi)
				claimed := make([][][]any, callers)
				const now = int64(1_800_000_000_000)
				b.ResetTimer()
				dump := redistest.CountRedisInstructions(b)
				eachBenchCaller(b, claimed, func(downloader string, mine *[][]any) error {
					record := "1 " + strconv.FormatInt(now, 10) + " " + downloader + " 127.0.0.1 - -"
					deadline := strconv.FormatInt(now+21_600_000, 10)
					for range rounds {
						reply, err := e.runScript(ctx, "bench", claimPlainScript, keys.plain, cfg.version, multi, record, deadline)
						if err != nil {
							return err
						}
						names, ok := reply.(string)
						if !ok || strings.Count(names, "\n") != multi-1 {
							return fmt.Errorf("claim_plain.lua answered %v", reply)
						}
						args := []any{downloader}
						for _, name := range strings.Split(names, "\n") {
							args = append(args, name)
						}
						*mine = append(*mine, args)
					}
					return nil
				})
				claimsWall := dump()
				dump = redistest.CountRedisInstructions(b)
				eachBenchCaller(b, claimed, func(downloader string, mine *[][]any) error {
					for _, args := range *mine {
						reply, err := e.runScript(ctx, "bench", done, plainKeys(keys.donePlain, multi), args...)
						if err != nil {
							return err
						}
						// done_plain_whole.lua answers a whole batch
						// "<at> <log_length>"; done_plain.lua {1, log_length, at, 100}.
						if _, whole := reply.(string); whole != (done == donePlainWholeScript) {
							return fmt.Errorf("%s answered %v", done.File(), reply)
						}
						if code, _, err := scriptListReply("bench", reply); done == donePlainScript && (err != nil || code != 1) {
							return fmt.Errorf("done_plain.lua answered %v (%v)", reply, err)
						}
					}
					return nil
				})
				donesWall := dump()
				b.StopTimer()
				endPlainBench(ctx, b, backend, slug, claimsWall, donesWall, rounds*callers*multi)
			})
		}
	}
}
