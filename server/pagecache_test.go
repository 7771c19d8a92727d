package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// countingEngine counts the reads stats.json and charts.json make.
type countingEngine struct {
	*queues.Engine
	stats, charts, project atomic.Int64
}

func (e *countingEngine) Stats(ctx context.Context, slug string) (queues.Stats, error) {
	e.stats.Add(1)
	return e.Engine.Stats(ctx, slug)
}

func (e *countingEngine) Charts(ctx context.Context, slug string) (queues.Charts, error) {
	e.charts.Add(1)
	return e.Engine.Charts(ctx, slug)
}

func (e *countingEngine) Project(ctx context.Context, slug string) (queues.Project, error) {
	e.project.Add(1)
	return e.Engine.Project(ctx, slug)
}

// pageRoutes serves stats.json and charts.json as WarriorAPI.Dispatch
// routes them.
func pageRoutes(t *testing.T, stats *server.StatsJSON, pages *server.Pages) string {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	router := gin.New()
	router.Use(func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 && !c.Writer.Written() {
			status := http.StatusInternalServerError
			if queues.CodeOf(c.Errors.Last().Err) == queues.CodeProjectNotFound {
				status = http.StatusNotFound
			}
			c.String(status, c.Errors.String())
		}
	})
	router.GET("/:slug/stats.json", func(c *gin.Context) { stats.Serve(c, c.Param("slug")) })
	router.GET("/:slug/charts.json", func(c *gin.Context) { pages.Serve(c, c.Param("slug"), "charts.json") })
	ts := httptest.NewServer(router)
	t.Cleanup(ts.Close)
	return ts.URL
}

// getConcurrently sends n GETs at once and returns their bodies.
func getConcurrently(t *testing.T, url string, n int) []string {
	t.Helper()
	bodies := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := http.Get(url)
			if err != nil {
				statuses[i] = -1
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			bodies[i], statuses[i] = string(body), resp.StatusCode
		})
	}
	wg.Wait()
	for i := range n {
		require.Equal(t, http.StatusOK, statuses[i], bodies[i])
		require.Equal(t, bodies[0], bodies[i], "every request got the same reply")
	}
	return bodies
}

// TestPagePollingCostsOneReadPerWindow: however many viewers poll a
// project's stats.json and charts.json at once, a frontend reads each from
// Redis once per cache window; a missing project is never cached.
func TestPagePollingCostsOneReadPerWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
		engine := &countingEngine{Engine: queues.NewEngine(b.Client, queues.Options{Clock: clock, Logger: quiet})}
		_, err := engine.CreateProject(t.Context(), "polled", queues.SettingsPatch{})
		require.NoError(t, err)
		url := pageRoutes(t, &server.StatsJSON{Engine: engine, Clock: clock}, &server.Pages{Engine: engine, Clock: clock})

		const viewers = 64
		bodies := getConcurrently(t, url+"/polled/stats.json", viewers)
		require.EqualValues(t, 1, engine.stats.Load(), "one Stats read for %d requests", viewers)
		var stats map[string]any
		require.NoError(t, json.Unmarshal([]byte(bodies[0]), &stats))
		require.Equal(t, float64(clock.Now().UnixMilli()), stats["generated_at"])
		getConcurrently(t, url+"/polled/charts.json", viewers)
		require.EqualValues(t, 1, engine.charts.Load(), "one Charts read for %d requests", viewers)
		projectReads := engine.project.Load() // Stats and Charts read the project once each

		// Still fresh just before the window ends; read again after it.
		clock.Advance(server.DefaultPageCacheFor - time.Millisecond)
		getConcurrently(t, url+"/polled/stats.json", viewers)
		getConcurrently(t, url+"/polled/charts.json", viewers)
		require.EqualValues(t, 1, engine.stats.Load())
		require.EqualValues(t, 1, engine.charts.Load())
		require.Equal(t, projectReads, engine.project.Load(), "no per-request existence check")
		clock.Advance(time.Millisecond)
		getConcurrently(t, url+"/polled/stats.json", viewers)
		getConcurrently(t, url+"/polled/charts.json", viewers)
		require.EqualValues(t, 2, engine.stats.Load())
		require.EqualValues(t, 2, engine.charts.Load())

		for i := range 2 {
			for _, path := range []string{"/missing/stats.json", "/missing/charts.json"} {
				resp, err := http.Get(url + path)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
			}
			require.EqualValues(t, 3+i, engine.stats.Load(), "errors are not kept")
			require.EqualValues(t, 3+i, engine.charts.Load(), "errors are not kept")
		}
	})
}

type fixedStats []queues.DownloaderStats

func (f fixedStats) Stats(context.Context, string) (queues.Stats, error) {
	return queues.Stats{Downloaders: f}, nil
}

// TestStatsJSONCapsDownloaders: stats.json lists the top downloaders by
// bytes and by items, ordered by bytes, and counts them all.
func TestStatsJSONCapsDownloaders(t *testing.T) {
	all := fixedStats{
		{Name: "bulky", Bytes: 900, Items: 1},
		{Name: "busy", Bytes: 1, Items: 900},
		{Name: "both", Bytes: 800, Items: 800},
		{Name: "middling", Bytes: 500, Items: 500},
		{Name: "small", Bytes: 2, Items: 2},
	}
	url := pageRoutes(t, &server.StatsJSON{Engine: all, MaxDownloaders: 2}, &server.Pages{})
	resp, err := http.Get(url + "/capped/stats.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var reply struct {
		Downloaders      []queues.DownloaderStats `json:"downloaders"`
		DownloadersTotal int                      `json:"downloaders_total"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reply))
	names := make([]string, len(reply.Downloaders))
	for i, d := range reply.Downloaders {
		names[i] = d.Name
	}
	require.Equal(t, []string{"bulky", "both", "busy"}, names, fmt.Sprint(reply.Downloaders))
	require.Equal(t, 5, reply.DownloadersTotal)
}
