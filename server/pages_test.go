package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func TestLeaderboardPagesAndJSON(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		title := "Live <Project>"
		f.project("live", queues.SettingsPatch{Title: &title}, "a", "b")
		require.Equal(t, http.StatusOK, f.post("/live/multi=2/request", `{"downloader":"tester1","api_version":"2"}`).status)
		require.Equal(t, http.StatusOK, f.post("/live/done", `{"downloader":"tester1","item":"a\u0000b","bytes":{"data":2048}}`).status)
		get := func(p string) reply {
			req, err := http.NewRequest(http.MethodGet, f.url+p, nil)
			require.NoError(t, err)
			return f.do(req)
		}

		r := get("/")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, `<a class="project" href="/live/">Live &lt;Project&gt;</a>`, "titles are escaped")
		require.Contains(t, r.body, "0 to do · 0 out · 2 done")

		r = get("/live/")
		require.Equal(t, http.StatusOK, r.status)
		require.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/html"))
		require.Contains(t, r.body, `id="log"`)
		require.Contains(t, r.body, `/static/app.js`)
		r = get("/static/app.js")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, "WebSocket")

		r = get("/live/recent.json")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		var recent []map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.body), &recent))
		require.Equal(t, []any{"a", "b"}, recent[0]["items"])

		r = get("/live/charts.json")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "public, max-age=2", r.header.Get("Cache-Control"))
		require.Equal(t, "*", r.header.Get("Access-Control-Allow-Origin"))
		var charts queues.Charts
		require.NoError(t, json.Unmarshal([]byte(r.body), &charts))
		require.EqualValues(t, 2, charts.ItemsDoneTotal)
		require.Len(t, charts.Minutes, 1440)
		require.Len(t, charts.Hours, 720)
		require.EqualValues(t, 2, charts.Minutes[1439].Items, "this minute")
		require.EqualValues(t, 2048, charts.Minutes[1439].Bytes)
		require.EqualValues(t, 2, charts.Hours[719].Items, "this hour")
		require.Len(t, charts.Downloaders, 1)
		require.Equal(t, "tester1", charts.Downloaders[0].Name)
		require.EqualValues(t, 2048, charts.Downloaders[0].Total)
		require.Len(t, charts.Downloaders[0].Bytes, 168)

		// History keys expire: bounded whatever the project's age.
		for _, key := range []string{queues.SeriesMinuteKey("live", f.clock.Now()), queues.SeriesHourKey("live", f.clock.Now()), queues.SeriesDownloaderKey("live", f.clock.Now())} {
			ttl, err := b.Client.TTL(f.ctx, key).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Hour, key)
		}

		require.Equal(t, http.StatusNotFound, get("/nosuch/").status)
		require.Equal(t, http.StatusNotFound, get("/nosuch/charts.json").status)
		require.Equal(t, http.StatusNotFound, get("/a{b}/").status)
		require.Equal(t, http.StatusMethodNotAllowed, f.post("/live/charts.json", `{}`).status)
	})
}
