package queues_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// complete queues n fresh items, has downloader claim and finish them with
// perItem bytes each, at the bundle's clock.
func (tb bundle) complete(t *testing.T, downloader string, n int, perItem int64) {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("done:%s-%d-%d", downloader, tb.clock.Now().UnixMilli(), i)
	}
	tb.enqueue(t, todo, names...)
	got := tb.claim(t, downloader, n)
	require.Len(t, got, n)
	res, err := tb.engine.Done(tb.ctx, queues.DoneRequest{Project: tb.slug, Downloader: downloader, Items: got,
		Bytes: map[string]int64{"data": int64(n) * perItem}})
	require.NoError(t, err)
	require.Equal(t, n, res.New)
}

func (tb bundle) stats(t *testing.T) queues.Stats {
	t.Helper()
	s, err := tb.engine.Stats(tb.ctx, tb.slug)
	require.NoError(t, err)
	return s
}

// TestRatesComeFromRecentHistory: completions at known times give the
// "now" window (the last 10-15 minutes), the hour the ETAs use, each
// downloader's pace, and per-queue ETAs in serve order; completions
// older than a window are not in it.
func TestRatesComeFromRecentHistory(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "rates", queues.SettingsPatch{MaxMulti: ptr(500)})
		start := tb.clock.Now() // 12:00:00, when the project was made
		at := func(d time.Duration) { tb.clock.Advance(start.Add(d).Sub(tb.clock.Now())) }
		at(time.Hour)
		tb.complete(t, "carol", 100, 1000) // 13:00: in neither window
		at(90 * time.Minute)
		tb.complete(t, "carol", 30, 1000) // 13:30: the last hour only
		at(2 * time.Hour)
		tb.complete(t, "alice", 20, 2000) // 14:00: both
		at(2*time.Hour + 7*time.Minute)
		tb.complete(t, "bob", 10, 500) // 14:07: both
		at(2*time.Hour + 7*time.Minute + 30*time.Second)
		tb.enqueue(t, todo, names("t:", 120)...)
		tb.enqueue(t, queues.Target{Queue: queues.QueueSecondary}, names("s:", 30)...)

		r := tb.stats(t).Rates
		// Now: 13:55 to 14:07:30, 750 s, 30 items.
		require.Equal(t, start.Add(115*time.Minute).UTC(), r.Now.Start)
		require.Equal(t, 750.0, r.Now.Seconds)
		require.EqualValues(t, 30, r.Now.Items)
		require.EqualValues(t, 20*2000+10*500, r.Now.Bytes)
		require.InDelta(t, 30*60/750.0, r.Now.ItemsPerMinute, 1e-9)
		require.InDelta(t, 45000/750.0, r.Now.BytesPerSecond, 1e-9)
		// Recent: 13:07 to 14:07:30, 3630 s, 60 items.
		require.Equal(t, 3630.0, r.Recent.Seconds)
		require.EqualValues(t, 60, r.Recent.Items)
		perMinute := 60 * 60 / 3630.0
		require.InDelta(t, perMinute, r.Recent.ItemsPerMinute, 1e-9)

		// ETAs: todo first, then secondary behind it.
		require.Len(t, r.Queues, 5)
		etas := map[queues.Queue]queues.QueueETA{}
		for _, q := range r.Queues {
			etas[q.Queue] = q
		}
		require.EqualValues(t, 120, etas[queues.QueueTodo].Items)
		require.InDelta(t, 120/perMinute*60, *etas[queues.QueueTodo].ETASeconds, 1e-6)
		require.InDelta(t, 150/perMinute*60, *etas[queues.QueueSecondary].ETASeconds, 1e-6)
		require.InDelta(t, 150/perMinute*60, *r.ETASeconds, 1e-6)
		require.Empty(t, r.HeldBack)

		// Each downloader's pace over the now window; carol did nothing in it.
		require.Len(t, r.Downloaders, 2)
		require.Equal(t, queues.DownloaderRate{Name: "alice", Items: 20, Bytes: 40000,
			ItemsPerMinute: 20 * 60 / 750.0, BytesPerSecond: 40000 / 750.0}, r.Downloaders[0])
		require.Equal(t, "bob", r.Downloaders[1].Name)
		require.EqualValues(t, 10, r.Downloaders[1].Items)

		// Two hours later nothing is recent: no rate, no ETA.
		at(4*time.Hour + 10*time.Minute)
		r = tb.stats(t).Rates
		require.Zero(t, r.Now.Items)
		require.Zero(t, r.Recent.Items)
		require.Nil(t, r.ETASeconds)
		require.Nil(t, r.Queues[1].ETASeconds)
		require.Empty(t, r.Downloaders)
	})
}

// TestRatesOfAYoungProjectAreItsOwn: a project 30 s old counts its rate
// over its own life (at least a minute), not over an hour it did not exist.
func TestRatesOfAYoungProjectAreItsOwn(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "young", queues.SettingsPatch{})
		tb.clock.Advance(30 * time.Second)
		tb.complete(t, "alice", 5, 100)
		tb.enqueue(t, todo, names("t:", 10)...)
		r := tb.stats(t).Rates
		require.Equal(t, 60.0, r.Now.Seconds)
		require.Equal(t, 60.0, r.Recent.Seconds)
		require.InDelta(t, 5.0, r.Recent.ItemsPerMinute, 1e-9)
		require.InDelta(t, 120.0, *r.ETASeconds, 1e-9, "10 items at 5 a minute")
	})
}

// TestHeldBackSaysWhy: items a limit group holds, items reserved for a
// downloader and a paused project are each listed with their count, and
// a group's own rate bounds the ETA.
func TestHeldBackSaysWhy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "held", queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{
			{Name: "users", Type: "user", RatePerMinute: 2, Burst: 1},
			{Name: "frozen", Type: "frozen", RatePerMinute: 0}})
		require.NoError(t, err)
		tb.complete(t, "alice", 6, 10) // 6 a minute
		tb.enqueue(t, todo, names("user:", 40)...)
		tb.enqueue(t, todo, names("frozen:", 3)...)
		tb.enqueue(t, todo, names("plain:", 4)...)
		tb.enqueue(t, queues.Target{Downloader: "bob"}, names("bob:", 2)...)

		r := tb.stats(t).Rates
		held := map[string]queues.HeldBack{}
		for _, h := range r.HeldBack {
			held[h.Kind+" "+h.Name] = h
		}
		require.Len(t, held, 3, "%+v", r.HeldBack)
		users := held["limit_group users"]
		require.EqualValues(t, 40, users.Items)
		require.Equal(t, 2.0, users.RatePerMinute)
		require.InDelta(t, 1200.0, *users.ETASeconds, 1e-9, "40 items at 2 a minute")
		frozen := held["limit_group frozen"]
		require.EqualValues(t, 3, frozen.Items)
		require.Nil(t, frozen.ETASeconds, "a group at rate 0 is never served")
		require.EqualValues(t, 2, held["reserved "].Items)
		// 47 shared items at 6 a minute would take 470 s; the users group
		// needs 1200 s.
		require.InDelta(t, 1200.0, *r.ETASeconds, 1e-9)

		paused := true
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{Paused: &paused})
		require.NoError(t, err)
		s := tb.stats(t)
		require.True(t, s.Paused)
		require.Equal(t, queues.HeldPaused, s.Rates.HeldBack[0].Kind)
		require.EqualValues(t, 49, s.Rates.HeldBack[0].Items)
	})
}

// TestAvailability: open with work; closed when paused, when only a limit
// group's exhausted items are left, and when the project's request limit
// is at its cap.
func TestAvailability(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "avail", queues.SettingsPatch{})
		avail := func() queues.Availability {
			a, err := tb.engine.Availability(tb.ctx, tb.slug)
			require.NoError(t, err)
			return a
		}
		require.False(t, avail().Open(), "no work")
		tb.enqueue(t, queues.Target{Downloader: "bob"}, "reserved:1")
		require.False(t, avail().Open(), "reserved items are only bob's")
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 1, Burst: 1}})
		require.NoError(t, err)
		tb.enqueue(t, todo, "user:a", "user:b")
		require.Equal(t, queues.Availability{Waiting: 2, SpareRate: true}, avail())
		require.Equal(t, []string{"user:a"}, tb.claim(t, "alice", 5))
		require.Equal(t, queues.Availability{Waiting: 0, SpareRate: true}, avail(), "the group spent its minute")
		tb.clock.Advance(time.Minute)
		require.True(t, avail().Open(), "the group has room again")

		paused := true
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{Paused: &paused})
		require.NoError(t, err)
		require.False(t, avail().Open())
		paused = false
		_, err = tb.engine.UpdateProject(tb.ctx, tb.slug, queues.SettingsPatch{Paused: &paused, RatePerMinute: ptr(1.0), RateBurst: ptr(1)})
		require.NoError(t, err)
		tb.enqueue(t, todo, "plain:1", "plain:2")
		require.True(t, avail().Open())
		tb.claim(t, "alice", 1)
		a := avail()
		require.False(t, a.SpareRate, "one request a minute, just spent")
		require.False(t, a.Open())
		tb.clock.Advance(time.Minute)
		require.True(t, avail().Open())
	})
}

// TestContributionsAcrossProjects: a downloader's work in every project,
// all time, with its recent pace; a nickname that did nothing has none,
// and a malformed one is refused.
func TestContributionsAcrossProjects(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		one := setupProject(t, b, "one", queues.SettingsPatch{Title: ptr("Project One")})
		two := setupProject(t, b, "two", queues.SettingsPatch{})
		two.engine = one.engine
		two.clock = one.clock
		one.complete(t, "alice", 3, 100)
		two.complete(t, "alice", 2, 1000)
		one.complete(t, "bob", 1, 1)
		one.clock.Advance(time.Hour) // the old work stays, the pace goes
		two.complete(t, "alice", 1, 1000)

		c, err := one.engine.Contributions(one.ctx, "alice", nil)
		require.NoError(t, err)
		require.Equal(t, "alice", c.Downloader)
		require.EqualValues(t, 6, c.Items)
		require.EqualValues(t, 300+3000, c.Bytes)
		require.Len(t, c.Projects, 2)
		require.Equal(t, "two", c.Projects[0].Project, "most bytes first")
		require.EqualValues(t, 3, c.Projects[0].Items)
		require.EqualValues(t, 1, c.Projects[0].Recent.Items, "only the last item is recent")
		require.Equal(t, "Project One", c.Projects[1].Title)
		require.Zero(t, c.Projects[1].Recent.Items)

		c, err = one.engine.Contributions(one.ctx, "alice", func(slug string) bool { return slug != "two" })
		require.NoError(t, err)
		require.Len(t, c.Projects, 1, "a project left out is not read")

		c, err = one.engine.Contributions(one.ctx, "nobody", nil)
		require.NoError(t, err)
		require.Empty(t, c.Projects)
		_, err = one.engine.Contributions(one.ctx, "<b>x</b>", nil)
		requireCode(t, err, queues.CodeInvalid)
	})
}

// BenchmarkStatsWithRates measures a whole Stats read (what stats.json
// costs a frontend once per cache period), rates included: the hour of
// minute series and the per-downloader buckets of a project with about 500
// downloaders active in the last 15 minutes, on each backend.
func BenchmarkStatsWithRates(b *testing.B) {
	for _, backend := range redistest.Backends() {
		b.Run(backend.Name, func(b *testing.B) {
			require.NoError(b, redistest.Flush(b.Context(), backend))
			clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
			engine := queues.NewEngine(backend.Client, queues.Options{Clock: clock, Logger: quietLogger})
			_, err := engine.CreateProject(b.Context(), "bench", queues.SettingsPatch{})
			require.NoError(b, err)
			clock.Advance(2 * time.Hour)
			for minute := 0; minute < 15; minute++ {
				var items []queues.QueueItem
				for d := 0; d < 500; d += 15 {
					items = append(items, queues.QueueItem{Name: fmt.Sprintf("b:%02d-%03d", minute, d+minute)})
				}
				_, err := engine.Enqueue(b.Context(), "bench", todo, items)
				require.NoError(b, err)
				for _, it := range items {
					nick := "nick" + it.Name[5:]
					_, err := engine.Claim(b.Context(), queues.ClaimRequest{Project: "bench", Downloader: nick, Count: 1})
					require.NoError(b, err)
					_, err = engine.Done(b.Context(), queues.DoneRequest{Project: "bench", Downloader: nick, Items: []string{it.Name},
						Bytes: map[string]int64{"data": 1000}})
					require.NoError(b, err)
				}
				clock.Advance(time.Minute)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := engine.Stats(b.Context(), "bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPerQueueETAIsBoundByItsLimitGroups: a queue's ETA waits for the
// limit groups holding items in it or in a queue served before it, at
// their rates, and not for a group whose items are all behind it.
func TestPerQueueETAIsBoundByItsLimitGroups(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setupProject(t, b, "qeta", queues.SettingsPatch{})
		_, err := tb.engine.SetLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{
			{Name: "users", Type: "user", RatePerMinute: 2, Burst: 1},
			{Name: "pages", Type: "page", RatePerMinute: 1, Burst: 1}})
		require.NoError(t, err)
		tb.complete(t, "alice", 6, 10) // 6 a minute
		tb.enqueue(t, todo, names("plain:", 4)...)
		tb.enqueue(t, todo, names("user:", 40)...)
		secondary := queues.Target{Queue: queues.QueueSecondary}
		tb.enqueue(t, secondary, names("more:", 6)...)
		tb.enqueue(t, secondary, names("page:", 30)...)

		r := tb.stats(t).Rates
		etas := map[queues.Queue]*float64{}
		for _, q := range r.Queues {
			etas[q.Queue] = q.ETASeconds
		}
		// todo: 44 items at 6 a minute would be 440 s; its 40 users'
		// items need 1200 s at 2 a minute. The pages group's items are in
		// secondary, behind todo: not waited for.
		require.InDelta(t, 1200.0, *etas[queues.QueueTodo], 1e-9)
		// secondary: 80 items at 6 a minute, 800 s; users 1200 s; its 30
		// pages' items at 1 a minute, 1800 s.
		require.InDelta(t, 1800.0, *etas[queues.QueueSecondary], 1e-9)
		require.InDelta(t, 1800.0, *etas[queues.QueueRedo], 1e-9, "the queues after it wait for it")
		require.InDelta(t, 1800.0, *r.ETASeconds, 1e-9)
	})
}
