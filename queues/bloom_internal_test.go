package queues

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// BenchmarkBloomAddScript times single bloom_add.lua calls inside Redis
// (SLOWLOG with every command logged), with the default filter (10M items
// at 1e-6: 36 MB of bits, k = 20), so bits land all over a string too big

// per-script budget; "1000-items" is the largest batch a script takes.
// Reported: the script's time in Redis (p50 and max), items per script and
// the cost per item, from which bloomScriptBudget is chosen.
func BenchmarkBloomAddScript(b *testing.B) {
	backend := redistest.Backends()[0]
	for _, budget := range []int{2048, 4096, 8192, 1 << 30} {
		name := fmt.Sprintf("budget-%d", budget)
		if budget == 1<<30 {
			name = "1000-items"
		}
		b.Run(name, func(b *testing.B) {
			defer func(was int) { bloomScriptBudget = was }(bloomScriptBudget)
			bloomScriptBudget = budget
			ctx := context.Background()
			require.NoError(b, redistest.Flush(ctx, backend))
			e := NewEngine(backend.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			secret := "bench_secret"
			_, err := e.CreateProject(ctx, "bloom", SettingsPatch{BackfeedSecret: &secret})
			require.NoError(b, err)
			// The first batch creates the 36 MB generation; keep it out.
			_, err = e.Backfeed(ctx, "bloom", secret, []string{"warm-up"})
			require.NoError(b, err)
			var durations []time.Duration
			items, scripts := 0, 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch := make([]string, 2000)
				for j := range batch {
					batch[j] = fmt.Sprintf("url:https://example.org/b%d/i%06d", i, j)
				}
				b.StopTimer()
				took := slowlogScripts(ctx, b, backend.Client, func() {
					b.StartTimer()
					res, err := e.Backfeed(ctx, "bloom", secret, batch)
					b.StopTimer()
					require.NoError(b, err)
					require.Equal(b, len(batch), res.New)
				})
				b.StartTimer()
				durations = append(durations, took...)
				items += len(batch)
				scripts += len(took)
			}
			b.StopTimer()
			slices.Sort(durations)
			var total time.Duration
			for _, d := range durations {
				total += d
			}
			b.ReportMetric(float64(durations[len(durations)/2].Microseconds())/1000, "script-ms-p50")
			b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds())/1000, "script-ms-p99")
			b.ReportMetric(float64(durations[len(durations)-1].Microseconds())/1000, "script-ms-max")
			b.ReportMetric(float64(items)/float64(scripts), "items/script")
			b.ReportMetric(float64(total.Microseconds())/float64(items), "script-us/item")
		})
	}
}

// slowlogScripts runs fn with SLOWLOG logging every command (on every
// master of a cluster), and returns how long each script call took inside
// Redis. Redis 7 logs the commands a script calls too, so fn must stay well
// under slowlog-max-len of them.
func slowlogScripts(ctx context.Context, tb testing.TB, rdb redis.UniversalClient, fn func()) []time.Duration {
	var took []time.Duration
	for _, entry := range slowlogEntries(ctx, tb, rdb, fn) {
		if len(entry.Args) > 0 && luascript.IsScriptCall(entry.Args[0]) {
			took = append(took, entry.Duration)
		}
	}
	return took
}

// loadOnEveryNode loads script's function on every master.
func loadOnEveryNode(ctx context.Context, tb testing.TB, rdb redis.UniversalClient, script *luascript.Script) {
	require.NoError(tb, script.Load(ctx, rdb))
}

// slowlogEntries runs fn with SLOWLOG logging every command, and returns
// what it logged.
func slowlogEntries(ctx context.Context, tb testing.TB, rdb redis.UniversalClient, fn func()) []redis.SlowLog {
	eachNode := func(do func(ctx context.Context, node *redis.Client) error) {
		if cluster, ok := rdb.(*redis.ClusterClient); ok {
			require.NoError(tb, cluster.ForEachMaster(ctx, do))
			return
		}
		require.NoError(tb, do(ctx, rdb.(*redis.Client)))
	}
	eachNode(func(ctx context.Context, node *redis.Client) error {
		if err := node.ConfigSet(ctx, "slowlog-max-len", "100000").Err(); err != nil {
			return err
		}
		if err := node.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
			return err
		}
		return node.Do(ctx, "SLOWLOG", "RESET").Err()
	})
	fn()
	var entries []redis.SlowLog
	var mu sync.Mutex
	eachNode(func(ctx context.Context, node *redis.Client) error {
		if err := node.ConfigSet(ctx, "slowlog-log-slower-than", "10000").Err(); err != nil {
			return err
		}
		got, err := node.SlowLogGet(ctx, -1).Result()
		mu.Lock()
		entries = append(entries, got...)
		mu.Unlock()
		return err
	})
	return entries
}

// TestBackfeedSecretIsNeverACommandArgument: SLOWLOG (and MONITOR) show
// every command's arguments, so the secret must not be one, nor part of
// one, in the check before the body or in the scripts.
func TestBackfeedSecretIsNeverACommandArgument(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		e := NewEngine(b.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		secret := "s3cret_only_the_grab_knows"
		_, err := e.CreateProject(ctx, "sekrit", SettingsPatch{BackfeedSecret: &secret})
		require.NoError(t, err)
		var res BackfeedResult
		entries := slowlogEntries(ctx, t, b.Client, func() {
			require.NoError(t, e.CheckBackfeedSecret(ctx, "sekrit", secret))
			res, err = e.Backfeed(ctx, "sekrit", secret, []string{"url:a", "url:b"})
			require.NoError(t, err)
			_, err = e.Backfeed(ctx, "sekrit", "wrong_"+secret, []string{"url:c"})
			require.Equal(t, CodeBlocked, CodeOf(err))
		})
		require.Equal(t, 2, res.New)
		scripts := 0
		for _, entry := range entries {
			if luascript.IsScriptCall(entry.Args[0]) {
				scripts++
			}
			for _, arg := range entry.Args {
				require.NotContains(t, arg, secret, "SLOWLOG entry %v", entry.Args)
			}
		}
		require.GreaterOrEqual(t, scripts, 2, "both backfeeds ran bloom_add.lua while SLOWLOG logged everything")
	})
}

// TestBackfeedScriptsStayWithinTheBudget: a large batch is split into
// scripts of bloomBatchSize items each (the budget over each item's bits),
// and every item still lands once, in the queue and in the filter.
func TestBackfeedScriptsStayWithinTheBudget(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		e := NewEngine(b.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		secret, capacity := "secret_123", 100_000
		_, err := e.CreateProject(ctx, "split", SettingsPatch{BackfeedSecret: &secret, BloomCapacity: &capacity})
		require.NoError(t, err)
		shape, err := newBloomShape(capacity, DefaultBloomFPRate, 0)
		require.NoError(t, err)
		// Every script's items carry one generation's locations: the first
		// script starts generation 1, and the rest fit in it, so none
		// carries the next generation's.
		perScript := bloomBatchSize(shape.cost())
		require.Less(t, perScript, MaxBloomBatch, "the default shape is budget-bound, not capped at MaxBloomBatch")
		require.LessOrEqual(t, perScript*(shape.cost()+bloomItemOverhead), bloomScriptBudget)

		items := make([]string, 1000)
		for i := range items {
			items[i] = fmt.Sprintf("url:https://example.org/%04d", i)
		}
		// Loaded first: otherwise the first call's FCALL answered "Function
		// not found" and its second FCALL would be counted as two scripts when this test runs
		// before any other has loaded bloom_add.lua on this server.
		loadOnEveryNode(ctx, t, b.Client, bloomAddScript)
		var res BackfeedResult
		took := slowlogScripts(ctx, t, b.Client, func() {
			res, err = e.Backfeed(ctx, "split", secret, items)
			require.NoError(t, err)
		})
		require.Equal(t, BackfeedResult{Received: 1000, New: 1000}, res)
		want := (len(items) + perScript - 1) / perScript
		require.Len(t, took, want, "1,000 items, %d a script", perScript)

		length, err := b.Client.LLen(ctx, QueueKey("split", QueueBackfeed)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1000, length)
		res, err = e.Backfeed(ctx, "split", secret, items)
		require.NoError(t, err)
		require.Equal(t, 1000, res.Duplicate, "every item is in the filter")
		// Within one script, an item twice is queued once.
		res, err = e.Backfeed(ctx, "split", secret, []string{"url:twice", "url:once", "url:twice"})
		require.NoError(t, err)
		require.Equal(t, BackfeedResult{Received: 3, New: 2, Duplicate: 1}, res)
	})
}

// A batch goes without the next generation's bit locations when the newest
// generation has room for all of it. If the count moved on meanwhile (another
// frontend filled it), bloom_add.lua refuses such a batch before any write,
// and bloomAdd re-reads the count and sends the locations.
func TestBloomBatchWithoutNextGenerationIsRefusedWhenItCouldStartOne(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, backend redistest.Backend) {
		ctx := context.Background()
		e := NewEngine(backend.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		slug := "bloom-next"
		_, err := e.CreateProject(ctx, slug, SettingsPatch{BackfeedSecret: ptrTo("secret_123"), BloomCapacity: ptrTo(1000)})
		require.NoError(t, err)
		first := make([]string, 995)
		for i := range first {
			first[i] = fmt.Sprintf("a%d", i)
		}
		res, err := e.Backfeed(ctx, slug, "secret_123", first)
		require.NoError(t, err)
		require.Equal(t, 995, res.New)
		shapes, count, err := e.readBloomShapes(ctx, slug, 1000)
		require.NoError(t, err)
		require.Len(t, shapes, 1)
		require.Equal(t, 995, count)
		state, err := e.limitGroups(ctx, slug, false)
		require.NoError(t, err)

		// 995 + 7 > 1000: this batch could start generation 2, and carries no
		// locations for it.
		items := []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7"}
		keys := []string{ConfigKey(slug), BloomMetaKey(slug), StatsKey(slug), ClaimsKey(slug), DoneKey(slug), ReleasedKey(slug), RecentDoneKey(slug),
			BloomKey(slug, 1), BloomKey(slug, 2), QueueKey(slug, QueueBackfeed), QueuedKey(slug)}
		// It also says 3 items were filtered: a refused batch counts none.
		args := []any{"", "", 1, shapes[0].String(), "", state.version, state.filtersVersion, 3}
		args = appendBloomBatch(args, shapes[:1], items, nil, nil)
		code, _, err := e.runScriptList(ctx, "test", bloomAddScript, keys, args...)
		require.NoError(t, err)
		require.EqualValues(t, codeStaleFilter, code)
		queued, err := backend.Client.LLen(ctx, QueueKey(slug, QueueBackfeed)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 995, queued, "nothing written")
		filtered, err := backend.Client.HGet(ctx, StatsKey(slug), "items_filtered").Result()
		require.ErrorIs(t, err, redis.Nil, "no filtered count written, got %q", filtered)
		_, count, err = e.readBloomShapes(ctx, slug, 1000)
		require.NoError(t, err)
		require.Equal(t, 995, count)

		// Through bloomAdd: 3 fit without the locations, then 7 more start
		// generation 2 with them; every item is new once.
		res, err = e.Backfeed(ctx, slug, "secret_123", items[:3])
		require.NoError(t, err)
		require.Equal(t, 3, res.New)
		res, err = e.Backfeed(ctx, slug, "secret_123", append(items[3:], "c1", "c2", "c3", "a1"))
		require.NoError(t, err)
		require.Equal(t, BackfeedResult{Received: 8, New: 7, Duplicate: 1}, res, "a1 is known to the filter: its places are not looked up")
		shapes, count, err = e.readBloomShapes(ctx, slug, 1000)
		require.NoError(t, err)
		require.Len(t, shapes, 2)
		require.Equal(t, 5, count, "2 of the 7 filled generation 1, 5 went into generation 2")
	})
}

func ptrTo[T any](v T) *T { return &v }

// TestBackfeedScriptsTakeTurns: an engine runs bloom_add.lua
// bloomScriptsInFlight calls at a time, so a warrior's script waits behind
// that many, not one per concurrent backfeed. A backfeed whose turn does
// not come before its context ends fails, having queued nothing; once the
// turn is free it runs.
func TestBackfeedScriptsTakeTurns(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		e := NewEngine(b.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		secret := "secret_123"
		_, err := e.CreateProject(ctx, "turns", SettingsPatch{BackfeedSecret: &secret})
		require.NoError(t, err)
		for range bloomScriptsInFlight {
			e.bloomTurns <- struct{}{}
		}
		waiting, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := e.Backfeed(waiting, "turns", secret, []string{"url:a", "url:b"})
			done <- err
		}()
		cancel()
		err = <-done
		require.Equal(t, CodeUnavailable, CodeOf(err))
		require.ErrorIs(t, err, context.Canceled)
		length, err := b.Client.LLen(ctx, QueueKey("turns", QueueBackfeed)).Result()
		require.NoError(t, err)
		require.Zero(t, length, "a backfeed that never had its turn queued nothing")

		for range bloomScriptsInFlight {
			<-e.bloomTurns
		}
		res, err := e.Backfeed(ctx, "turns", secret, []string{"url:a", "url:b"})
		require.NoError(t, err)
		require.Equal(t, 2, res.New)
		require.Empty(t, e.bloomTurns, "every turn is given back")
	})
}
