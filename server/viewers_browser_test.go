package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// seeded completes n fresh items of slug for downloader at the clock's time.
func seeded(t *testing.T, engine *queues.Engine, slug, downloader string, n int, perItem int64, tag string) {
	t.Helper()
	items := make([]queues.QueueItem, n)
	for i := range items {
		items[i] = queues.QueueItem{Name: fmt.Sprintf("page:%s-%d", tag, i)}
	}
	ctx := t.Context()
	_, err := engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, items)
	require.NoError(t, err)
	res, err := engine.Claim(ctx, queues.ClaimRequest{Project: slug, Downloader: downloader, Count: n})
	require.NoError(t, err)
	names := make([]string, len(res.Items))
	for i, it := range res.Items {
		names[i] = it.Name
	}
	require.Len(t, names, n)
	_, err = engine.Done(ctx, queues.DoneRequest{Project: slug, Downloader: downloader, Items: names,
		Bytes: map[string]int64{"data": int64(n) * perItem}})
	require.NoError(t, err)
}

type pageSeen struct {
	ItemsPerMinute string            `json:"items_per_minute"`
	BytesPerSecond string            `json:"bytes_per_second"`
	ETA            string            `json:"eta"`
	ETABasis       string            `json:"eta_basis"`
	Queues         [][]string        `json:"queues"`
	HeldBack       []string          `json:"held_back"`
	DownloadersNow [][]string        `json:"downloaders_now"`
	DownloaderLink string            `json:"downloader_link"`
	Explains       map[string]string `json:"explains"`
	OverflowX      int               `json:"overflow_x"`
	Screenshot     string            `json:"screenshot"`
}

// TestRatesAndETAInChromium is issue 25's proof for the page: a young
// project (4 minutes old, a limit group holding items back, items reserved
// for one downloader) and one with 30 days of history (written through an
// injected clock), each at desktop and phone size in headless Chromium,
// show their pace now, an ETA with its basis, the queues' ETAs, what is
// held back and why, each downloader's pace, and what IRSR, the reclaim
// serve rate and RTT mean; the downloader page lists the nickname's work
// in both projects. Set HOARD_SCREENSHOT_DIR to keep the screenshots.
func TestRatesAndETAInChromium(t *testing.T) {
	node := requireBrowser(t)
	// A redis-server of its own, in parallel with the other browser tests
	// (mostly waiting on Chromium); the page is the same on a cluster.
	b := redistest.Parallel(t)
	ctx := t.Context()
	// On a ten-minute boundary, so the "now" window (whole five-minute
	// buckets, 10 to 15 minutes) is exactly the last five two-minute steps
	// below whatever the wall clock says: truncated to the minute, the
	// window caught 5 to 8 steps and the rate read 1.85 or 2.00 by the
	// minute the test ran in.
	now := time.Now().UTC().Truncate(10 * time.Minute)
	clock := queues.NewFakeClock(now.Add(-30 * 24 * time.Hour))
	engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet, Clock: clock})
	_, err := engine.CreateProject(ctx, "veteran", queues.SettingsPatch{Title: ptr("Veteran project"), MaxMulti: ptr(100)})
	require.NoError(t, err)
	// 30 days: a batch every 3 hours, by three downloaders in turn.
	who := []string{"alice", "bob", "carol"}
	for step := 0; clock.Now().Before(now.Add(-time.Hour)); step++ {
		seeded(t, engine, "veteran", who[step%3], 1+step%7, 3<<20, fmt.Sprintf("v%d", step))
		clock.Advance(3 * time.Hour)
	}
	clock.Advance(now.Add(-time.Hour).Sub(clock.Now()))
	// The last hour: 4 items every 2 minutes; the young project starts 4
	// minutes before now.
	young := false
	for step := 0; clock.Now().Before(now); step++ {
		seeded(t, engine, "veteran", who[step%2], 4, 5<<20, fmt.Sprintf("h%d", step))
		if !young && !clock.Now().Before(now.Add(-4*time.Minute)) {
			_, err := engine.CreateProject(ctx, "young", queues.SettingsPatch{Title: ptr("Young project")})
			require.NoError(t, err)
			_, err = engine.SetLimitGroups(ctx, "young", []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 2, Burst: 1}})
			require.NoError(t, err)
			young = true
		}
		if young {
			seeded(t, engine, "young", "alice", 3, 200<<10, fmt.Sprintf("y%d", step))
		}
		clock.Advance(2 * time.Minute)
	}
	clock.Advance(now.Sub(clock.Now()))
	queue := func(slug string, target queues.Target, prefix string, n int) {
		items := make([]queues.QueueItem, n)
		for i := range items {
			items[i] = queues.QueueItem{Name: fmt.Sprintf("%s:%05d", prefix, i)}
		}
		_, err := engine.Enqueue(ctx, slug, target, items)
		require.NoError(t, err)
	}
	queue("veteran", queues.Target{Queue: queues.QueueTodo}, "url", 40000)
	queue("veteran", queues.Target{Queue: queues.QueueSecondary}, "url2", 2500)
	queue("young", queues.Target{Queue: queues.QueueTodo}, "plain", 300)
	queue("young", queues.Target{Queue: queues.QueueTodo}, "user", 120)
	queue("young", queues.Target{Downloader: "bob"}, "mine", 5)

	srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Logger: quiet,
		ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { _ = srv.Stop() })
	base := "http://" + srv.Addr()

	dir := os.Getenv("HOARD_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	dir, err = filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	line, runErr := runNodeScript(t, ctx, node, "rates.mjs", nodeScriptBound, nil, dir, base+"/downloaders/alice/",
		"young="+base+"/young/", "veteran="+base+"/veteran/")
	t.Logf("rates.mjs: %s", line)
	var res struct {
		OK         bool                           `json:"ok"`
		Projects   map[string]map[string]pageSeen `json:"projects"`
		Downloader map[string]struct {
			Nick string     `json:"nick"`
			Rows [][]string `json:"rows"`
		} `json:"downloader"`
		Errors []string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &res), line)
	require.Empty(t, res.Errors)
	require.True(t, res.OK, line)
	require.NoError(t, runErr)

	for _, size := range []string{"desktop", "phone"} {
		v := res.Projects["veteran"][size]
		// 2 items a minute over the last 10-15 minutes, 10 MiB a minute.
		require.Equal(t, "2.00/min", v.ItemsPerMinute, size)
		require.Equal(t, "170.7 KiB/s", v.BytesPerSecond, size)
		// 42,500 items at 2 a minute: 14 d 18 h.
		require.Equal(t, "14 d 18 h", v.ETA, size)
		require.Contains(t, v.ETABasis, "at the pace of the last 1 h")
		require.Equal(t, [][]string{{"to do", "40,000", "13 d 21 h"}, {"secondary", "2,500", "14 d 18 h"}}, v.Queues, size)
		require.Empty(t, v.HeldBack, "nothing is held back in veteran")
		require.Contains(t, v.Explains["irsr"], "share of warriors' requests that got an item")
		require.Contains(t, v.Explains["reclaim_serve_rate"], "reclaimed")
		require.Contains(t, v.Explains["rtt"], "from handing an item out to its done")
		require.Contains(t, v.Explains["item_fail_rate"], "failed over failed plus done")
		require.Contains(t, v.Explains["filter_rate"], "filtered over filtered plus queued")
		require.Equal(t, "/downloaders/alice/", v.DownloaderLink)

		y := res.Projects["young"][size]
		// 6 items in the 4 minutes it has existed: 1.5 a minute.
		require.Equal(t, "1.50/min", y.ItemsPerMinute, size)
		require.Len(t, y.HeldBack, 2, "%v", y.HeldBack)
		require.Contains(t, y.HeldBack[0], "120 items belong to limit group “users”, handed out at most 2.00/min")
		require.Contains(t, y.HeldBack[0], "at least 1 h")
		require.Contains(t, y.HeldBack[1], "5 items are reserved for named downloaders")
		require.Equal(t, "alice", y.DownloadersNow[0][0])
		require.Equal(t, "1.50/min", y.DownloadersNow[0][1])

		d := res.Downloader[size]
		require.Equal(t, "alice", d.Nick)
		require.Len(t, d.Rows, 2, "alice worked in both projects")
	}
	for _, name := range []string{"young", "veteran"} {
		for _, size := range []string{"desktop", "phone"} {
			t.Logf("screenshot: %s", res.Projects[name][size].Screenshot)
		}
	}
}
