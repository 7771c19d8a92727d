package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestPluginEventsSurviveKilledFrontendsAndPlugins: two real `hoard serve`
// frontends on one Redis, each running the example plugin as its own
// process, which counts every OnItemDone in Redis. Items are completed
// while one frontend is killed with SIGKILL (and restarted) and then the
// other's plugin process is: every completion reaches the plugin, the log
// ends fully acknowledged, and an event is handled twice only when its
// frontend or plugin died between the hook and the acknowledgement.
func TestPluginEventsSurviveKilledFrontendsAndPlugins(t *testing.T) {
	client := redistest.Parallel(t).Client.(*redis.Client)
	ctx := context.Background()
	hoard, plugin := builtBinary(t, "."), builtBinary(t, "../../plugins/internal/exampleplugin/cmd/hoard-example")
	url := "redis://" + client.Options().Addr
	require.NoError(t, client.Del(ctx, exampleRecordKey).Err())

	type frontend struct {
		cmd     *exec.Cmd
		dataDir string
		port    int
	}
	start := func(f *frontend) {
		f.cmd = exec.Command(hoard, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", f.port),
			"--data-dir", f.dataDir, "--projects-file", "/nonexistent",
			"--plugin", "example="+plugin, "--plugin-settings", `example={"tick_period":"24h","record":true}`,
			"--plugin-event-retry", "1s")
		f.cmd.Env = append(os.Environ(), "HOARD_REDIS_URL="+url, "HOARD_ADMIN_TOKEN=events-token")
		require.NoError(t, f.cmd.Start())
		cmd := f.cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	var fronts [2]*frontend
	for i := range fronts {
		port, err := freeport.Get(freeport.TCP)
		require.NoError(t, err)
		fronts[i] = &frontend{dataDir: t.TempDir(), port: port}
		start(fronts[i])
	}

	engine := queues.NewEngine(client, queues.Options{Logger: slog.New(slog.DiscardHandler)})
	require.Eventually(t, func() bool {
		p, err := engine.Project(ctx, "example")
		return err == nil && p.EventLog > 0
	}, 60*time.Second, 20*time.Millisecond, "a frontend's host created the plugin's project with its event log")
	groups := func() int {
		g, _ := client.XInfoGroups(ctx, queues.EventsKey("example")).Result()
		return len(g)
	}
	require.Eventually(t, func() bool { return groups() == 1 }, 60*time.Second, 20*time.Millisecond)

	const total = 300
	completed := 0
	// finished are the items the warrior's dones completed (a claim may
	// also hand out the plugin's own heartbeat item).
	finished := map[string]bool{}
	// Names unique to this run: the project outlives a test run.
	prefix := fmt.Sprintf("echo:ev-%d-", time.Now().UnixNano())
	complete := func(n int) {
		items := make([]queues.QueueItem, n)
		names := make([]string, n)
		for i := range items {
			names[i] = fmt.Sprintf("%s%04d", prefix, completed+i)
			items[i] = queues.QueueItem{Name: names[i]}
		}
		_, err := engine.Enqueue(ctx, "example", queues.Target{Queue: queues.QueueTodo}, items)
		require.NoError(t, err)
		got, err := engine.Claim(ctx, queues.ClaimRequest{Project: "example", Downloader: "warrior", Count: n})
		require.NoError(t, err)
		claimed := make([]string, len(got.Items))
		for i, it := range got.Items {
			claimed[i] = it.Name
		}
		_, err = engine.Done(ctx, queues.DoneRequest{Project: "example", Downloader: "warrior", Items: claimed})
		require.NoError(t, err)
		for _, name := range claimed {
			finished[name] = true
		}
		completed += n
	}
	for range 10 {
		complete(10)
	}
	// kill -9 the first frontend (its plugin dies with it), go on, restart it.
	require.NoError(t, fronts[0].cmd.Process.Signal(syscall.SIGKILL))
	_ = fronts[0].cmd.Wait()
	for range 10 {
		complete(10)
	}
	start(fronts[0])
	// kill -9 the second frontend's plugin: its host restarts it.
	pidFile := filepath.Join(fronts[1].dataDir, "plugins", "example.pid")
	pluginPID := pidFromFile(t, pidFile, 0)
	require.NoError(t, syscall.Kill(pluginPID, syscall.SIGKILL))
	for completed < total {
		complete(10)
	}
	pidFromFile(t, pidFile, pluginPID) // restarted

	var handled map[string]string
	require.Eventually(t, func() bool {
		var err error
		handled, err = client.HGetAll(ctx, exampleRecordKey).Result()
		if err != nil {
			return false
		}
		for name := range finished {
			if handled[name] == "" {
				return false
			}
		}
		pending, err := client.XPending(ctx, queues.EventsKey("example"), "plugin:example").Result()
		return err == nil && pending.Count == 0
	}, 90*time.Second, 50*time.Millisecond, "every completion reaches the plugin and is acknowledged")

	require.GreaterOrEqual(t, len(finished), total)
	twice := 0
	for name := range finished {
		n, err := strconv.Atoi(handled[name])
		require.NoError(t, err, name)
		require.GreaterOrEqual(t, n, 1)
		twice += n - 1
	}
	// Only entries a dead reader held (read, maybe handled, never
	// acknowledged) can come twice: at most one read batch per kill.
	t.Logf("%d completions, %d handled twice across 2 kills", len(finished), twice)
	require.LessOrEqual(t, twice, 2*10*10, "duplicates only from the entries the killed readers held")
}

// exampleRecordKey is exampleplugin.RecordKey (an internal package of
// plugins/, so not importable here).
const exampleRecordKey = "hoard:example-record"
