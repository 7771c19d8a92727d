package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/queues"
)

// The live-viewer benchmark of issue 5: N websocket viewers watch one
// project on a hoard serve child process (so its memory is its own) while
// warriors complete items. It reports update latency (completion to
// arrival at a viewer) and the server's memory per viewer. Loopback only;
// bounded viewers, rate and time; it stops by itself.

type viewerBenchOptions struct {
	hoard    string
	viewers  int
	rate     int
	duration time.Duration
}

func benchViewersCommand() *cobra.Command {
	var o viewerBenchOptions
	cmd := &cobra.Command{
		Use:   "viewers",
		Short: "Update latency and memory per viewer with N live websocket viewers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchViewers(cmd.Context(), o)
		},
	}
	// hoard-bench has no serve command of its own: the child is a built
	// hoard, as warrior-path's.
	cmd.Flags().StringVar(&o.hoard, "hoard", "bin/hoard", "the hoard binary whose serve is measured (make build builds bin/hoard)")
	cmd.Flags().IntVar(&o.viewers, "viewers", 5000, "concurrent websocket viewers (at most 15000)")
	cmd.Flags().IntVar(&o.rate, "rate", 100, "completions per second while measuring")
	cmd.Flags().DurationVar(&o.duration, "duration", 10*time.Second, "how long to measure")
	return cmd
}

func benchViewers(ctx context.Context, o viewerBenchOptions) error {
	if o.viewers < 1 || o.viewers > 15000 {
		return errors.New("--viewers must be between 1 and 15000")
	}
	if _, err := os.Stat(o.hoard); err != nil {
		return fmt.Errorf("hoard binary: %w (make build builds bin/hoard)", err)
	}
	dir, err := os.MkdirTemp("", "hoard-bench-viewers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	port, err := freeport.Get(freeport.TCP)
	if err != nil {
		return err
	}
	rs := localredis.New(localredis.Config{DataDir: dir, Port: port, Logger: quiet})
	if err := rs.Start(ctx); err != nil {
		return err
	}
	defer rs.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Address(), PoolSize: 64})
	defer rdb.Close()
	engine := queues.NewEngine(rdb, queues.Options{Logger: quiet})
	if _, err := engine.CreateProject(ctx, "viewers", queues.SettingsPatch{}); err != nil {
		return err
	}
	supply := o.rate*int(o.duration.Seconds()+5) + 1000
	batch := make([]queues.QueueItem, 0, 10000)
	for i := 0; i < supply; i++ {
		batch = append(batch, queues.QueueItem{Name: fmt.Sprintf("viewers/item/%08d", i)})
		if len(batch) == cap(batch) || i == supply-1 {
			if _, err := engine.Enqueue(ctx, "viewers", queues.Target{Queue: queues.QueueTodo}, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}

	// hoard serve as a child, so its memory is measured alone.
	httpPort, err := freeport.Get(freeport.TCP)
	if err != nil {
		return err
	}
	child := exec.Command(o.hoard, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(httpPort),
		"--redis-url", "redis://"+rs.Address()+"/0", "--projects-file", "/nonexistent",
		"--data-dir", filepath.Join(dir, "hoard"),
		// Every bench viewer comes from 127.0.0.1.
		"--max-viewers-per-address", strconv.Itoa(o.viewers))
	child.Env = append(os.Environ(), "HOARD_ADMIN_TOKEN=bench-"+strconv.Itoa(os.Getpid()))
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	// Its log goes to a file, shown when it does not come up: a refused
	// flag or an unreachable Redis is said there, not here.
	serveLog, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return err
	}
	defer serveLog.Close()
	child.Stdout, child.Stderr = serveLog, serveLog
	if err := child.Start(); err != nil {
		return err
	}
	defer func() {
		_ = child.Process.Signal(syscall.SIGTERM)
		_, _ = child.Process.Wait()
	}()
	base := "127.0.0.1:" + strconv.Itoa(httpPort)
	if err := waitHealthy(ctx, "http://"+base); err != nil {
		logged, _ := os.ReadFile(serveLog.Name())
		return fmt.Errorf("%w; its log:\n%s", err, logged)
	}
	time.Sleep(500 * time.Millisecond)
	rssBefore := rssKiB(child.Process.Pid)

	fmt.Printf("\nlive viewers: %d websocket viewers of one project on a hoard serve child (pid %d), %d completions/s for %s\n",
		o.viewers, child.Process.Pid, o.rate, o.duration)
	var mu sync.Mutex
	var latencies []float64
	var updates atomic.Int64
	measuring := atomic.Bool{}
	dialer := &websocket.Dialer{HandshakeTimeout: 20 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 256}
	conns := make([]*websocket.Conn, 0, o.viewers)
	var readers sync.WaitGroup
	dialStart := time.Now()
	for i := 0; i < o.viewers; i++ {
		conn, _, err := dialer.DialContext(ctx, "ws://"+base+"/viewers/ws", nil)
		if err != nil {
			return fmt.Errorf("viewer %d: %w", i, err)
		}
		conns = append(conns, conn)
		readers.Add(1)
		go func() {
			defer readers.Done()
			var msg struct {
				Type string `json:"type"`
				Log  []struct {
					At int64 `json:"at"`
				} `json:"log"`
			}
			for {
				_, raw, err := conn.ReadMessage()
				if err != nil {
					return
				}
				arrived := time.Now().UnixMilli()
				if !measuring.Load() || json.Unmarshal(raw, &msg) != nil || msg.Type != "update" || len(msg.Log) == 0 {
					continue
				}
				updates.Add(1)
				// Every completion in a coalesced update: its own wait.
				mu.Lock()
				for _, e := range msg.Log {
					latencies = append(latencies, float64(arrived-e.At))
				}
				mu.Unlock()
			}
		}()
	}
	fmt.Printf("  %d viewers connected in %.1fs\n", len(conns), time.Since(dialStart).Seconds())
	time.Sleep(2 * time.Second)
	rssAfter := rssKiB(child.Process.Pid)

	// Warriors complete items at a steady rate.
	measuring.Store(true)
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	interval := time.Second / time.Duration(o.rate)
	ticker := time.NewTicker(interval)
	var done atomic.Int64
	for runCtx.Err() == nil {
		select {
		case <-runCtx.Done():
		case <-ticker.C:
			res, err := engine.Claim(ctx, queues.ClaimRequest{Project: "viewers", Downloader: "warrior1", Count: 1})
			if err != nil {
				cancel()
				ticker.Stop()
				return err
			}
			if _, err := engine.Done(ctx, queues.DoneRequest{Project: "viewers", Downloader: "warrior1",
				Items: []string{res.Items[0].Name}, Bytes: map[string]int64{"data": 1000}}); err != nil {
				cancel()
				ticker.Stop()
				return err
			}
			done.Add(1)
		}
	}
	cancel()
	ticker.Stop()
	time.Sleep(time.Second) // let the last updates arrive
	measuring.Store(false)
	for _, c := range conns {
		_ = c.Close()
	}
	readers.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(latencies) == 0 {
		return errors.New("no viewer received an update")
	}
	sort.Float64s(latencies)
	q := func(p float64) float64 { return latencies[int(p*float64(len(latencies)-1))] }
	fmt.Printf("  %d completions; %d updates delivered (%.1f per viewer per second)\n",
		done.Load(), updates.Load(), float64(updates.Load())/float64(o.viewers)/o.duration.Seconds())
	fmt.Printf("  update latency, completion to viewer: p50 %.0f ms, p99 %.0f ms, max %.0f ms\n", q(0.50), q(0.99), latencies[len(latencies)-1])
	fmt.Printf("  hoard serve RSS: %d KiB idle, %d KiB with %d viewers: %.1f KiB per viewer\n",
		rssBefore, rssAfter, o.viewers, float64(rssAfter-rssBefore)/float64(o.viewers))
	return nil
}

// rssKiB reads a process's resident set size from /proc.
func rssKiB(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
