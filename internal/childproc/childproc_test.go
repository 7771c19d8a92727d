package childproc

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChildOutlivesTheGoroutineThatAskedForIt: a child started from a
// goroutine that locked its own thread and then exited (so the runtime
// destroyed that thread) must still be running, because the fork happened
// on the forking thread.
func TestChildOutlivesTheGoroutineThatAskedForIt(t *testing.T) {
	if !Supported {
		t.Skip("by design: parent-death signals are Linux only")
	}
	cmd := exec.Command("sleep", "30")
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread dies with the goroutine
		started <- Start(cmd, syscall.SIGKILL)
	}()
	require.NoError(t, <-started)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Give the runtime a chance to retire the asking goroutine's thread.
	for range 20 {
		runtime.GC()
		runtime.Gosched()
	}
	require.NoError(t, syscall.Kill(cmd.Process.Pid, 0), "the child is alive")
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	require.NoError(t, err)
	require.NotContains(t, string(status), "State:\tZ", "and not a zombie")
}

// TestChildDiesWithItsParent runs a parent process (this test binary in
// helper mode) that starts a sleeping child through Start and is then
// killed with SIGKILL: the child must be gone too.
func TestChildDiesWithItsParent(t *testing.T) {
	if !Supported {
		t.Skip("by design: parent-death signals are Linux only")
	}
	if os.Getenv("CHILDPROC_HELPER") == "1" {
		child := exec.Command("sleep", "60")
		if err := Start(child, syscall.SIGKILL); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(child.Process.Pid) + "\n")
		select {}
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestChildDiesWithItsParent$")
	parent.Env = append(os.Environ(), "CHILDPROC_HELPER=1")
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	buf := make([]byte, 64)
	n, err := out.Read(buf)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, 0), "the child runs while its parent does")

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.False(t, alive(pid), "the child died with its parent")
}

// alive: the pid exists and is not a zombie (an orphan becomes a zombie of
// whatever reaps it, possibly nobody in a container).
func alive(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	return err == nil && !strings.Contains(string(status), "State:\tZ")
}
