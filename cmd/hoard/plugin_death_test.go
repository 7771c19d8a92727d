package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
)

// buildBinaries builds hoard and the BitTorrent plugin (once for the
// package).
func buildBinaries(t *testing.T) (hoard, plugin string) {
	t.Helper()
	return builtBinary(t, "."), builtBinary(t, "../hoard-bittorrent")
}

// pidFromFile waits (boundedly) for a plugin pid file naming a live
// process other than not.
func pidFromFile(t *testing.T, path string, not int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		content, err := os.ReadFile(path)
		if err == nil {
			if fields := strings.Fields(string(content)); len(fields) == 2 {
				pid, _ := strconv.Atoi(fields[0])
				if pid > 0 && pid != not && processAlive(pid) {
					return pid
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no live plugin in %s", path)
	return 0
}

func processAlive(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && !strings.Contains(string(status), "State:\tZ")
}

// TestKilledHoardTakesItsPluginAlong: kill -9 of `hoard serve` takes its
// plugin process with it (before, the plugin lived on under PID 1 holding
// the tracker's ports, and the restarted hoard's plugin failed to bind
// forever), and a restarted hoard serves the same tracker port.
func TestKilledHoardTakesItsPluginAlong(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("by design: parent-death signals are Linux only")
	}
	url := "redis://" + redistest.Parallel(t).Client.(*redis.Client).Options().Addr
	hoard, plugin := buildBinaries(t)
	dataDir := t.TempDir()
	trackerPort, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	listenPort, err := freeport.Get(freeport.TCP)
	require.NoError(t, err)
	tracker := fmt.Sprintf("127.0.0.1:%d", trackerPort)
	settings := fmt.Sprintf(`bittorrent={"mode":"open","http":%q,"udp4":"","udp6":""}`, tracker)
	serve := func() *exec.Cmd {
		cmd := exec.Command(hoard, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", listenPort),
			"--data-dir", dataDir, "--plugin", "bittorrent="+plugin, "--plugin-settings", settings)
		cmd.Env = append(os.Environ(), "HOARD_REDIS_URL="+url, "HOARD_ADMIN_TOKEN=death-token")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	pidFile := filepath.Join(dataDir, "plugins", "bittorrent.pid")

	first := serve()
	pluginPID := pidFromFile(t, pidFile, 0)
	require.Eventually(t, func() bool { return dials(tracker) }, 30*time.Second, 20*time.Millisecond, "the plugin serves its tracker port")

	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool { return !processAlive(pluginPID) }, 10*time.Second, time.Millisecond,
		"the plugin died with hoard")
	t.Logf("the plugin was gone %s after kill -9 of hoard", time.Since(killed).Round(100*time.Microsecond))

	serve()
	newPID := pidFromFile(t, pidFile, pluginPID)
	require.Eventually(t, func() bool { return dials(tracker) }, 30*time.Second, 20*time.Millisecond,
		"the restarted hoard's plugin serves the same port")
	require.True(t, processAlive(newPID))
}

func dials(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
