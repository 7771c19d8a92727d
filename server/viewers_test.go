package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// finish has downloader claim n items of slug through the engine and
// report them done with perItem bytes each.
func (f *fixture) finish(slug, downloader string, n int, perItem int64) {
	f.t.Helper()
	res, err := f.engine.Claim(f.ctx, queues.ClaimRequest{Project: slug, Downloader: downloader, Count: n})
	require.NoError(f.t, err)
	items := make([]string, len(res.Items))
	for i, it := range res.Items {
		items[i] = it.Name
	}
	_, err = f.engine.Done(f.ctx, queues.DoneRequest{Project: slug, Downloader: downloader, Items: items,
		Bytes: map[string]int64{"data": int64(len(items)) * perItem}})
	require.NoError(f.t, err)
}

func itemNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%03d", prefix, i)
	}
	return out
}

// TestAutoProjectMovesToWhereThereIsWork: projects.json names the first
// candidate that has work, is not paused and has rate to spare; it moves
// on when that one empties or is paused, and back when it has work again;
// with none open, the file's own auto_project stays.
func TestAutoProjectMovesToWhereThereIsWork(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		path := filepath.Join(t.TempDir(), "projects.json")
		require.NoError(t, os.WriteFile(path, []byte(`{
  "auto_project": "fallback",
  "auto_project_candidates": ["elsewhere", "first", "second", "fallback"],
  "projects": [{"name": "first"}, {"name": "second"}, {"name": "fallback"}, {"name": "elsewhere"}]
}`), 0o644))
		f := newFixture(t, b, server.Config{ProjectsFile: path})
		f.project("first", queues.SettingsPatch{}, itemNames("a", 2)...)
		f.project("second", queues.SettingsPatch{RatePerMinute: ptr(1.0), RateBurst: ptr(1)}, itemNames("b", 5)...)
		f.project("fallback", queues.SettingsPatch{})
		auto := func() any {
			t.Helper()
			f.clock.Advance(11 * time.Second) // past the file's 10 s cache
			r := f.get("/projects.json")
			require.Equal(t, http.StatusOK, r.status, r.body)
			return decode(t, r.body)["auto_project"]
		}
		// "elsewhere" is not hosted here, so it cannot be judged.
		require.Equal(t, "first", auto())

		f.finish("first", "alice", 2, 10)
		require.Equal(t, "second", auto(), "first has no work left")

		_, err := f.engine.Enqueue(f.ctx, "first", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "a:new"}})
		require.NoError(t, err)
		require.Equal(t, "first", auto(), "first has work again")

		paused := true
		_, err = f.engine.UpdateProject(f.ctx, "first", queues.SettingsPatch{Paused: &paused})
		require.NoError(t, err)
		require.Equal(t, "second", auto(), "first is paused")

		// second's one request a minute is spent: no rate to spare, and
		// fallback has no work, so the file's own choice stays.
		f.finish("second", "alice", 1, 10)
		require.Equal(t, "fallback", auto())
		f.clock.Advance(time.Minute)
		require.Equal(t, "second", auto(), "second's limiter has room again")
	})
}

// TestAutoProjectCandidatesMustBeAList: a malformed candidates key is the
// operator's error, reported, never half-applied.
func TestAutoProjectCandidatesMustBeAList(t *testing.T) {
	b := redistest.Require(t)[0]
	require.NoError(t, redistest.Flush(t.Context(), b))
	path := filepath.Join(t.TempDir(), "projects.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"auto_project_candidates": "first", "projects": []}`), 0o644))
	f := newFixture(t, b, server.Config{ProjectsFile: path})
	r := f.get("/projects.json")
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
	require.Contains(t, r.body, "auto_project_candidates")
}

// TestStatsJSONHasRatesETAAndHeldBack: stats.json carries the rates, the
// per-queue ETAs, each downloader's recent pace and what a limit group
// holds back.
func TestStatsJSONHasRatesETAAndHeldBack(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		f.project("paced", queues.SettingsPatch{}, itemNames("plain", 12)...)
		_, err := f.engine.SetLimitGroups(f.ctx, "paced", []queues.LimitGroup{{Name: "users", Type: "user", RatePerMinute: 1, Burst: 1}})
		require.NoError(t, err)
		_, err = f.engine.Enqueue(f.ctx, "paced", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "user:x"}, {Name: "user:y"}})
		require.NoError(t, err)
		f.clock.Advance(2 * time.Minute)
		f.finish("paced", "alice", 6, 1000)

		r := f.get("/paced/stats.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var s struct {
			Rates struct {
				Now struct {
					Items          int64   `json:"items"`
					ItemsPerMinute float64 `json:"items_per_minute"`
					BytesPerSecond float64 `json:"bytes_per_second"`
				} `json:"now"`
				Queues []struct {
					Queue      string   `json:"queue"`
					Items      int64    `json:"items"`
					ETASeconds *float64 `json:"eta_seconds"`
				} `json:"queues"`
				HeldBack []struct {
					Kind  string `json:"kind"`
					Name  string `json:"name"`
					Items int64  `json:"items"`
				} `json:"held_back"`
				Downloaders []struct {
					Name  string `json:"name"`
					Items int64  `json:"items"`
				} `json:"downloaders"`
			} `json:"rates"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.body), &s), r.body)
		// The project is 2 minutes old: 6 items in 120 s.
		require.EqualValues(t, 6, s.Rates.Now.Items)
		require.InDelta(t, 3.0, s.Rates.Now.ItemsPerMinute, 1e-9)
		require.InDelta(t, 50.0, s.Rates.Now.BytesPerSecond, 1e-9)
		require.Equal(t, "todo", s.Rates.Queues[1].Queue)
		// The group's one token went to user:x: 7 plain and user:y are left.
		require.EqualValues(t, 8, s.Rates.Queues[1].Items)
		require.NotNil(t, s.Rates.Queues[1].ETASeconds)
		require.InDelta(t, 160.0, *s.Rates.Queues[1].ETASeconds, 1e-9, "8 items at 3 a minute")
		require.Len(t, s.Rates.HeldBack, 1)
		require.Equal(t, "limit_group", s.Rates.HeldBack[0].Kind)
		require.Equal(t, "users", s.Rates.HeldBack[0].Name)
		require.EqualValues(t, 1, s.Rates.HeldBack[0].Items)
		require.Len(t, s.Rates.Downloaders, 1)
		require.Equal(t, "alice", s.Rates.Downloaders[0].Name)
	})
}

// TestDownloaderContributions: /downloaders/<nick>.json sums a downloader's
// work across projects; an unknown nickname is 404, a malformed one 400,
// both changing nothing; the page is served static, and "downloaders"
// cannot be a project's name.
func TestDownloaderContributions(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		f.project("one", queues.SettingsPatch{Title: ptr("One")}, itemNames("a", 3)...)
		f.project("two", queues.SettingsPatch{}, itemNames("b", 3)...)
		f.finish("one", "alice", 3, 100)
		f.finish("two", "alice", 1, 5000)
		f.finish("two", "bob", 2, 1)

		r := f.get("/downloaders/alice.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		var c queues.Contributions
		require.NoError(t, json.Unmarshal([]byte(r.body), &c))
		require.Equal(t, "alice", c.Downloader)
		require.EqualValues(t, 4, c.Items)
		require.EqualValues(t, 5300, c.Bytes)
		require.Len(t, c.Projects, 2)
		require.Equal(t, "two", c.Projects[0].Project)
		require.Equal(t, "One", c.Projects[1].Title)
		require.EqualValues(t, 3, c.Projects[1].Recent.Items)

		r = f.get("/downloaders/nobody.json")
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		for _, bad := range []string{"/downloaders/%3Cb%3Ex%3C%2Fb%3E.json", "/downloaders/ab.json", "/downloaders/a%22b/"} {
			r = f.get(bad)
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", bad, r.body)
			require.NotContains(t, r.body, "<b>")
		}

		r = f.get("/downloaders/alice/")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
		require.Contains(t, r.body, "/static/downloader.js")
		require.NotContains(t, r.body, "alice", "the page is static; the script writes the name as text")
		r = f.get("/downloaders/alice")
		require.Equal(t, http.StatusMovedPermanently, r.status)
		require.Equal(t, "/downloaders/alice/", r.header.Get("Location"))

		_, err := f.engine.CreateProject(f.ctx, "downloaders", queues.SettingsPatch{})
		require.Equal(t, queues.CodeInvalid, queues.CodeOf(err))
		// Reads changed nothing.
		projects, err := f.engine.Projects(f.ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"one", "two"}, projects)
		require.True(t, strings.HasPrefix(c.GeneratedAt.Format(time.RFC3339), "2026-11-22"))
	})
}
