package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// serveInProcess runs `hoard serve ARGS` until the test ends and returns
// its base URL once /readyz answers 200.
func serveInProcess(t *testing.T, args ...string) string {
	t.Helper()
	port, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := rootCommand()
		cmd.SetArgs(append([]string{"serve", "--listen", addr}, args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		done <- cmd.ExecuteContext(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			require.NoError(t, err, "hoard serve ended")
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "hoard serve gets ready")
	return base
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

// hoard config defaults > f; hoard config check f; hoard serve --config f:
// the printed defaults are a valid file that serves. The flags and the
// variable given beat the file's keys (the file says listen 127.0.0.1:8080
// and redis_url "").
func TestConfigDefaultsCheckServeRoundTrip(t *testing.T) {
	defaults, err := executeArgs("config", "defaults")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "hoard.toml")
	require.NoError(t, os.WriteFile(file, []byte(defaults), 0o600))
	out, err := executeArgs("config", "check", file)
	require.NoError(t, err)
	require.Contains(t, out, "ok")

	// Serving needs a real Redis: the unit tier stops here.
	b := redistest.Require(t)[0]
	require.NoError(t, redistest.Flush(t.Context(), b))
	t.Setenv("HOARD_REDIS_URL", b.URL)
	base := serveInProcess(t, "--config", file, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--projects-file", filepath.Join(t.TempDir(), "none.json"), "--admin-token", "roundtrip-token")
	status, body := get(t, base+"/metrics", "roundtrip-token")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "hoard_build_info{")

	// Every plugin key is printed at its default: the BitTorrent
	// plugin's sections, uncommented, are a file that checks and runs
	// the plugin (its listeners moved to free ports; the rest as
	// printed), so no printed key is unknown to the plugin itself.
	withPlugin := uncommentPlugin(t, defaults, "bittorrent")
	for _, key := range []string{"mode", "interval", "announce_rate", "max_peers_per_torrent", "[plugin.bittorrent.settings.scoring]",
		"[plugin.bittorrent.settings.reaper]", "[plugin.bittorrent.settings.outbox]", "[plugin.bittorrent.settings.metrics]",
		"[plugin.bittorrent.settings.orphans]", "reward_factor", "max_keys_per_tick"} {
		require.Contains(t, withPlugin, "\n"+key, "the defaults print %s", key)
	}
	withPlugin = strings.NewReplacer(`"127.0.0.1:6969"`, `"127.0.0.1:0"`, `"[::1]:6969"`, `"[::1]:0"`).Replace(withPlugin)
	file = filepath.Join(t.TempDir(), "with-plugin.toml")
	require.NoError(t, os.WriteFile(file, []byte(withPlugin), 0o600))
	out, err = executeArgs("config", "check", file)
	require.NoError(t, err)
	require.Contains(t, out, "ok")
	base = serveInProcess(t, "--config", file, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--projects-file", filepath.Join(t.TempDir(), "none.json"), "--admin-token", "roundtrip-token")
	status, body = get(t, base+"/readyz", "")
	require.Equal(t, http.StatusOK, status, "every configured plugin runs: %s", body)
	require.Contains(t, body, `"bittorrent":"running"`)
}

// uncommentPlugin removes the "# " before the lines of a plugin's printed
// sections, as the defaults' comment tells an operator to.
func uncommentPlugin(t *testing.T, defaults, name string) string {
	t.Helper()
	start := strings.Index(defaults, "\n# [plugin."+name+"]\n")
	require.GreaterOrEqual(t, start, 0, "the defaults have a [plugin.%s] section", name)
	lines := strings.Split(defaults[start+1:], "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "# [plugin.") && !strings.HasPrefix(l, "# [plugin."+name) {
			break
		}
		switch {
		case strings.HasPrefix(l, "# "):
			lines[i] = strings.TrimPrefix(l, "# ")
		case l == "#":
			lines[i] = ""
		}
	}
	return defaults[:start+1] + strings.Join(lines, "\n")
}

// Every key of the table is in the defaults, each with its flag and
// variable named.
func TestConfigDefaultsNameEveryKey(t *testing.T) {
	out, err := executeArgs("config", "defaults")
	require.NoError(t, err)
	for _, s := range serveSettings {
		if s.fromSections {
			require.Contains(t, out, "--"+s.flag+", variable "+s.env, s.flag)
			continue
		}
		require.Contains(t, out, "flag --"+s.flag+", variable "+s.env, s.flag)
		if s.secret {
			require.Contains(t, out, "\n# "+s.fileKey()+"_file = ", s.flag)
		} else if !s.fromSections {
			require.Contains(t, out, "\n"+s.fileKey(), s.flag)
		}
	}
}

// A broken file: every error names its line, unknown keys included, and
// nothing else is reported as wrong.
func TestConfigCheckNamesTheLineOfEachError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join([]string{
		`listen = "127.0.0.1:9000"`,            // 1 fine
		`log_levle = "debug"`,                  // 2 unknown, near log_level
		`admin_token = "typed-in"`,             // 3 a secret typed in
		`viewer_idle_timeout = "soon"`,         // 4 not a duration
		`max_viewers = "many"`,                 // 5 wrong type
		`[plugin.bittorrent]`,                  // 6
		`colour = "blue"`,                      // 7 unknown in a plugin section
		`[plugin.bittorrent.settings]`,         // 8
		`mode = "private"`,                     // 9 fine
		`udp_secret = "typed-in"`,              // 10 a plugin secret typed in
		`[plugin.bittorrent.settings.outbox]`,  // 11
		`webhook_secret_env = "HOARD_NO_SUCH"`, // 12 names an unset variable
		`max_atempts = 3`,                      // 13 unknown to the plugin, near max_attempts
		`[plugin.bittorrent.settings.limits]`,  // 14
		`passkey_miss_window = "10m"`,          // 15 fine: the schema says it is no secret
		`addresses = "many"`,                   // 16 wrong type for the plugin
	}, "\n")), 0o600))
	_, err := executeArgs("config", "check", file)
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		file + ":2: log_levle: unknown key; did you mean log_level?",
		file + ":3: admin_token: a secret is never typed into the file",
		file + ":4: viewer_idle_timeout: ",
		file + ":5: max_viewers: want a whole number",
		file + ":7: plugin.bittorrent.colour: unknown key",
		file + ":10: plugin.bittorrent.settings.udp_secret: a secret is never typed into the file",
		file + ":12: plugin.bittorrent.settings.outbox.webhook_secret_env: variable HOARD_NO_SUCH is not set",
		file + ":13: plugin.bittorrent.settings.outbox.max_atempts: unknown key; did you mean max_attempts?",
		file + ":16: plugin.bittorrent.settings.limits.addresses: want a number, not a string",
	}
	require.Len(t, lines, len(want), err.Error())
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		require.True(t, found, "want a line starting %q in:\n%s", w, err.Error())
	}
	require.NotContains(t, err.Error(), "typed-in", "a secret is never echoed")

	// A syntax error names its line and column.
	require.NoError(t, os.WriteFile(file, []byte("listen = \"a\"\n\nlog_level = \"x\n"), 0o600))
	_, err = executeArgs("config", "check", file)
	require.ErrorContains(t, err, file+":3:")
}

// Flag > variable > file > default, setting by setting; secrets come from
// the file or variable the file names.
func TestSettingsPrecedence(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("from-a-file\n"), 0o600))
	file := filepath.Join(dir, "hoard.toml")
	require.NoError(t, os.WriteFile(file, []byte(`listen = "127.0.0.1:1111"
log_level = "warn"
log_format = "json"
admin_token_file = "`+tokenFile+`"
metrics_token_env = "PRECEDENCE_METRICS"
[plugin.bittorrent]
[plugin.bittorrent.settings]
mode = "private"
`), 0o600))
	t.Setenv("PRECEDENCE_METRICS", "metrics-from-variable")
	t.Setenv("HOARD_LOG_LEVEL", "error")
	t.Setenv("HOARD_LOG_FORMAT", "")
	t.Setenv("HOARD_LISTEN", "")
	t.Setenv("HOARD_ADMIN_TOKEN", "")
	t.Setenv("HOARD_METRICS_TOKEN", "")
	t.Setenv("HOARD_PLUGINS", "")
	t.Setenv("HOARD_PLUGIN_SETTINGS", "")
	t.Setenv("HOARD_DATA_DIR", "")

	var o serveOptions
	fs := serveFlagSet(&o)
	require.NoError(t, fs.Parse([]string{"--listen", "127.0.0.1:2222"}))
	cfg, err := loadConfigFile(file)
	require.NoError(t, err)
	require.NoError(t, applySettings(fs, cfg))
	require.Equal(t, "127.0.0.1:2222", o.listen, "flag beats file")
	require.Equal(t, "error", o.logLevel, "variable beats file")
	require.Equal(t, "json", o.logFormat, "file beats default")
	require.Equal(t, "./data", o.dataDir, "default")
	require.Equal(t, "from-a-file", o.adminToken)
	require.Equal(t, "metrics-from-variable", o.metricsToken)
	require.Equal(t, []string{"bittorrent"}, o.plugins.plugins)
	require.Equal(t, []string{`bittorrent={"mode":"private"}`}, o.plugins.settings)

	// HOARD_PLUGIN_SETTINGS is read (it was silently ignored).
	t.Setenv("HOARD_PLUGIN_SETTINGS", `bittorrent={"mode":"open"}`)
	o = serveOptions{}
	fs = serveFlagSet(&o)
	require.NoError(t, applySettings(fs, cfg))
	require.Equal(t, []string{`bittorrent={"mode":"open"}`}, o.plugins.settings)

	// A bad variable names itself.
	t.Setenv("HOARD_MAX_VIEWERS", "lots")
	o = serveOptions{}
	fs = serveFlagSet(&o)
	require.ErrorContains(t, applySettings(fs, nil), "$HOARD_MAX_VIEWERS")
}

// A SIGHUP while warriors are being served changes a plugin's setting
// (its announce interval, seen by a BitTorrent client) and fails no
// warrior request.
func TestSighupReconfiguresAPluginUnderWarriorLoad(t *testing.T) {
	b := redistest.Require(t)[0]
	seedWarriorProject(t, b, "hup")

	trackerPort, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "hoard.toml")
	writeConfig := func(interval string) {
		require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, `log_level = "error"
[plugin.bittorrent]
[plugin.bittorrent.settings]
mode = "open"
http = "127.0.0.1:%d"
udp4 = ""
udp6 = ""
interval = %q
`, trackerPort, interval), 0o600))
	}
	writeConfig("30m")
	t.Setenv("HOARD_REDIS_URL", b.URL)
	base := serveInProcess(t, "--config", file, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--projects-file", filepath.Join(t.TempDir(), "none.json"))

	announce := func() string {
		q := url.Values{}
		q.Set("info_hash", strings.Repeat("\x01", 20))
		q.Set("peer_id", "-TE0001-hupsighup000")
		q.Set("port", "6881")
		q.Set("left", "0")
		q.Set("compact", "1")
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/announce?%s", trackerPort, q.Encode()))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	require.Contains(t, announce(), "8:intervali1800e")

	// Warriors ask for items all through the reload.
	load := startWarriorLoad(t, base, "hup")
	writeConfig("20m")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(announce(), "8:intervali1200e") },
		20*time.Second, 20*time.Millisecond, "the plugin announces the new interval")
	load.stopAfterMore(t)
}

// seedWarriorProject empties the Redis and queues 20000 items in a new
// project, enough for the warriors of a reload test.
func seedWarriorProject(t *testing.T, b redistest.Backend, project string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, redistest.Flush(ctx, b))
	engine := queues.NewEngine(b.Client, queues.Options{})
	_, err := engine.CreateProject(ctx, project, queues.SettingsPatch{})
	require.NoError(t, err)
	items := make([]queues.QueueItem, 20000)
	for i := range items {
		items[i] = queues.QueueItem{Name: fmt.Sprintf("item-%d", i)}
	}
	_, err = engine.Enqueue(ctx, project, queues.Target{Queue: queues.QueueTodo}, items)
	require.NoError(t, err)
}

// warriorLoad is four warriors asking a project for items in a loop.
type warriorLoad struct {
	stop           context.CancelFunc
	wg             sync.WaitGroup
	served, failed atomic.Int64
	firstFailure   atomic.Value
}

// startWarriorLoad starts the warriors and returns once they have been
// served 50 times.
func startWarriorLoad(t *testing.T, base, project string) *warriorLoad {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	l := &warriorLoad{stop: stop}
	for w := range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				body := fmt.Sprintf(`{"downloader":"warrior%d","api_version":"2","version":"20240101.01"}`, w)
				resp, err := http.Post(base+"/"+project+"/request", "application/json", bytes.NewBufferString(body))
				if err != nil {
					l.failed.Add(1)
					l.firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					l.failed.Add(1)
					l.firstFailure.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, raw))
					continue
				}
				l.served.Add(1)
			}
		}()
	}
	t.Cleanup(func() { stop(); l.wg.Wait() })
	require.Eventually(t, func() bool { return l.served.Load() > 50 }, 10*time.Second, 5*time.Millisecond,
		"%d failed, the first: %v", l.failed.Load(), l.firstFailure.Load())
	return l
}

// stopAfterMore waits for 50 more requests served, stops the warriors
// and checks that none failed.
func (l *warriorLoad) stopAfterMore(t *testing.T) {
	t.Helper()
	before := l.served.Load()
	require.Eventually(t, func() bool { return l.served.Load() > before+50 }, 10*time.Second, 5*time.Millisecond,
		"warriors are still served after the reload")
	l.stop()
	l.wg.Wait()
	require.Zero(t, l.failed.Load(), "first failure: %v", l.firstFailure.Load())
	t.Logf("%d warrior requests served across the reload, none failed", l.served.Load())
}

// A SIGHUP applies the live viewers' limits while warriors are served:
// a second viewer from one address is refused under a cap of one and
// let in once the file says two, though public_url (which needs a
// restart) changed in the same reload; no warrior request fails.
func TestSighupChangesViewerLimitsUnderWarriorLoad(t *testing.T) {
	b := redistest.Require(t)[0]
	ctx := t.Context()
	seedWarriorProject(t, b, "hupview")

	file := filepath.Join(t.TempDir(), "hoard.toml")
	writeConfig := func(perAddress int, publicURL string) {
		require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, "log_level = \"error\"\nmax_viewers_per_address = %d\npublic_url = %q\n",
			perAddress, publicURL), 0o600))
	}
	writeConfig(1, "")
	t.Setenv("HOARD_REDIS_URL", b.URL)
	base := serveInProcess(t, "--config", file, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--projects-file", filepath.Join(t.TempDir(), "none.json"))
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/hupview/ws"
	dial := func() int {
		conn, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL, nil)
		if err != nil {
			require.ErrorIs(t, err, websocket.ErrBadHandshake)
			return resp.StatusCode
		}
		t.Cleanup(func() { conn.Close() })
		return resp.StatusCode
	}
	require.Equal(t, http.StatusSwitchingProtocols, dial())
	require.Equal(t, http.StatusTooManyRequests, dial(), "one viewer per address")

	load := startWarriorLoad(t, base, "hupview")
	writeConfig(2, "https://example.org")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return dial() == http.StatusSwitchingProtocols }, 20*time.Second, 20*time.Millisecond,
		"the reloaded cap lets a second viewer in")
	require.Equal(t, http.StatusTooManyRequests, dial(), "and not a third")
	load.stopAfterMore(t)
}
