package pluginhost

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLeftoverPluginIsKilledOnlyWhenOrphanedAndOurs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("by design: reads /proc")
	}
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	sleep, err = filepath.EvalSymlinks(sleep)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	start := func() *exec.Cmd {
		cmd := exec.Command(sleep, "60")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	record := func(pid, host int) {
		require.NoError(t, os.WriteFile(pidFilePath(dir, "p"), []byte(fmt.Sprintf("%d %d\n", pid, host)), 0o600))
	}

	// Still the child of the host that recorded it: a live host's plugin.
	live := start()
	record(live.Process.Pid, os.Getpid())
	killed, err := killLeftover(dir, "p", sleep, quiet)
	require.NoError(t, err)
	require.Zero(t, killed)
	require.True(t, runsBinary(live.Process.Pid, sleep))

	// The pid now runs another binary (reused): left alone.
	record(live.Process.Pid, 1)
	killed, err = killLeftover(dir, "p", "/bin/not-the-plugin", quiet)
	require.NoError(t, err)
	require.Zero(t, killed)

	// Its recorded host is not its parent: the host died, it is a leftover.
	record(live.Process.Pid, 1)
	killed, err = killLeftover(dir, "p", sleep, quiet)
	require.NoError(t, err)
	require.Equal(t, live.Process.Pid, killed)
	_ = live.Wait()
	require.False(t, runsBinary(live.Process.Pid, sleep))

	// No file, or garbage: nothing to do.
	require.NoError(t, os.WriteFile(pidFilePath(dir, "p"), []byte("garbage"), 0o600))
	killed, err = killLeftover(dir, "p", sleep, quiet)
	require.NoError(t, err)
	require.Zero(t, killed)
	killed, err = killLeftover(dir, "absent", sleep, quiet)
	require.NoError(t, err)
	require.Zero(t, killed)
}
