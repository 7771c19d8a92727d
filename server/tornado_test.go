package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// requireTornado returns Debian's python3 when it has Tornado; otherwise the
// test fails in CI (which installs python3-tornado) and skips elsewhere.
func requireTornado(t *testing.T) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import tornado.httpclient").Run(); err != nil {
		reason := "Debian's python3-tornado is not installed (apt-get install python3-tornado): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	return python
}

// TestTornadoWarriorClient drives the warrior calls through Tornado's HTTP
// client, the one seesaw uses, with seesaw's bodies and success rules.
func TestTornadoWarriorClient(t *testing.T) {
	python := requireTornado(t)
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{})
		targets := []string{"http://upload.example.org/:downloader/"}
		minVersion := "20240101.01"
		f.project("tornado", queues.SettingsPatch{UploadTargets: &targets, MinVersion: &minVersion,
			Extra: &map[string]json.RawMessage{"tracker_flag": json.RawMessage(`"x"`)}},
			"user:first", "user:ü-second", "user:third", "user:fourth")

		out, err := exec.Command(python, "testdata/tornado_warrior.py", f.url+"/tornado", f.url+"/tornado/multi=3/", "tornadotester").CombinedOutput()
		require.NoError(t, err, string(out))
		steps := map[string]map[string]any{}
		scanner := bufio.NewScanner(bytes.NewReader(out))
		for scanner.Scan() {
			var step map[string]any
			require.NoError(t, json.Unmarshal(scanner.Bytes(), &step), scanner.Text())
			steps[step["step"].(string)] = step
			if step["step"] != "old_version" {
				require.Equal(t, 200.0, step["code"], scanner.Text())
			}
			require.Equal(t, step["requested_url"], step["effective_url"], "no redirect: %s", scanner.Text())
		}
		require.Equal(t, map[string]any{"item_name": "user:first", "tracker_flag": "x"}, steps["request"]["item"])
		require.Equal(t, true, steps["done"]["ok"])
		require.Equal(t, "http://upload.example.org/tornadotester/", steps["upload"]["target"])
		require.Equal(t, []any{"user:ü-second", "user:third", "user:fourth"}, steps["multi_request"]["items"])
		require.Equal(t, true, steps["multi_done"]["ok"])
		require.Equal(t, 455.0, steps["old_version"]["code"])

		counts, err := f.engine.Counts(f.ctx, "tornado")
		require.NoError(t, err)
		require.Equal(t, queues.Counts{Out: 1, Done: 3}, counts, "the aborted multi item stays out")
		stats, err := f.engine.Stats(f.ctx, "tornado")
		require.NoError(t, err)
		require.Equal(t, []queues.DownloaderStats{{Name: "tornadotester", Bytes: 1234 + 99, Items: 3, Version: "20240101.01"}}, stats.Downloaders)
	})
}
