package btplugin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// TestHoardBittorrentBinaryOverGoPlugin builds cmd/hoard-bittorrent and runs
// it the way hoard serve does: a host launches it over go-plugin, the
// plugin binds its listeners and answers announces itself, and after a
// kill -9 the host starts a new process that serves again.
func TestHoardBittorrentBinaryOverGoPlugin(t *testing.T) {
	b := redistest.Require(t)[0]
	bin := filepath.Join(t.TempDir(), "hoard-bittorrent")
	out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/hoard-bittorrent").CombinedOutput()
	require.NoError(t, err, string(out))

	h, err := pluginhost.NewHost(pluginhost.Options{
		Plugins: []pluginhost.Spec{{Name: "bittorrent", Path: bin,
			Settings: json.RawMessage(`{"http":"127.0.0.1:0","udp4":"","udp6":""}`)}},
		RedisURL: b.URL, Redis: b.Client, Logger: quiet,
		HealthInterval: 200 * time.Millisecond, ExitPollInterval: 20 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	defer h.Stop()

	announce := func() (int, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		require.NoError(t, h.WaitRunning(ctx, "bittorrent"))
		st := h.Status()[0]
		require.NotEmpty(t, st.Description.Listeners)
		url := "http://" + st.Description.Listeners[0].Address +
			"/announce?info_hash=%01%02%03%04%05%06%07%08%09%0a%0b%0c%0d%0e%0f%10%11%12%13%14&peer_id=-GO0001-abcdefghijkl&port=6881&left=0&event=started"
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return st.PID, string(body)
	}
	pid, body := announce()
	require.Positive(t, pid, "an external process")
	require.True(t, strings.HasPrefix(body, "d") && strings.Contains(body, "8:completei1e"), body)

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		st := h.Status()[0]
		return st.PID != 0 && st.PID != pid && st.State == pluginhost.StateRunning
	}, 30*time.Second, 20*time.Millisecond, "the host restarts the plugin")
	newPID, body := announce()
	require.NotEqual(t, pid, newPID)
	require.Contains(t, body, "8:completei1e", "the swarm lives in Redis, so it survived the restart")
}
