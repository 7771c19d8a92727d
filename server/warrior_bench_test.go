package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// BenchmarkWarriorRoundTrip: one seesaw round trip (POST request, POST
// done with seesaw's stats dict) through the whole handler stack (gin,
// the metrics, recovery and error middleware, body decoding, the engine
// and its scripts on a real redis-server), without the network: what
// hoard's own code costs per round trip, and its allocations. The
// network's share is `hoard-bench warrior-path`'s (docs/warrior-path.md).
func BenchmarkWarriorRoundTrip(b *testing.B) {
	backend := redistest.Require(b)[0]
	ctx := context.Background()
	require.NoError(b, redistest.Flush(ctx, backend))
	engine := queues.NewEngine(backend.Client, queues.Options{Logger: quiet})
	srv, err := server.New(server.Config{Logger: quiet, ProjectsFile: filepath.Join(b.TempDir(), "projects.json")}, engine)
	require.NoError(b, err)
	handler := srv.Handler()
	_, err = engine.CreateProject(ctx, "bench", queues.SettingsPatch{})
	require.NoError(b, err)
	fillBenchQueue(ctx, b, engine, b.N)
	requestBody := []byte(`{"downloader": "bencher", "api_version": "2", "version": "20260101.01"}`)
	post := func(path string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "ArchiveTeam Warrior/0.10.3 Standalone")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	// The item's name is cut from the reply, not decoded, and the done
	// body is built by appending, so the benchmark's own side allocates
	// little beside what it measures.
	doneBody := make([]byte, 0, 256)
	b.ReportAllocs()
	cpuBefore := processCPU(b)
	b.ResetTimer()
	for range b.N {
		rec := post("/bench/request", requestBody)
		name, ok := bytes.CutPrefix(rec.Body.Bytes(), []byte(`{"item_name":"`))
		name, ok2 := bytes.CutSuffix(name, []byte(`"}`))
		if rec.Code != http.StatusOK || !ok || !ok2 || bytes.ContainsAny(name, `"\`) {
			b.Fatalf("request: %d %s", rec.Code, rec.Body)
		}
		doneBody = append(append(append(doneBody[:0], `{"downloader": "bencher", "version": "20260101.01", "item": "`...), name...),
			`", "bytes": {"data": 123456}, "id": {"pipeline_hash": "abc", "python_version": "3.9.2"}}`...)
		if rec := post("/bench/done", doneBody); rec.Code != http.StatusOK || rec.Body.String() != "OK\n" {
			b.Fatalf("done: %d %s", rec.Code, rec.Body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpuBefore).Microseconds())/float64(b.N), "cpu-us/op")
}

// processCPU is this process's user and system CPU time so far: the
// handlers' and go-redis's, not redis-server's.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWarriorRoundTripOverTCP: one seesaw round trip (request, then
// done) over one kept-alive loopback connection to a started server: the
// warrior listener ("warrior-listener") against net/http and gin alone
// ("net-http", Config.NetHTTPOnly). The client is a few lines of raw
// HTTP/1.1 that allocate nothing per call, so allocations and CPU beyond
// the other variant's are the server's (the client's CPU is in both).
func BenchmarkWarriorRoundTripOverTCP(b *testing.B) {
	for _, variant := range []struct {
		name        string
		netHTTPOnly bool
	}{{"warrior-listener", false}, {"net-http", true}} {
		b.Run(variant.name, func(b *testing.B) {
			backend := redistest.Require(b)[0]
			ctx := context.Background()
			require.NoError(b, redistest.Flush(ctx, backend))
			engine := queues.NewEngine(backend.Client, queues.Options{Logger: quiet})
			srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Logger: quiet, NetHTTPOnly: variant.netHTTPOnly,
				ProjectsFile: filepath.Join(b.TempDir(), "projects.json")}, engine)
			require.NoError(b, err)
			require.NoError(b, srv.Start(ctx))
			b.Cleanup(func() { _ = srv.Stop() })
			_, err = engine.CreateProject(ctx, "bench", queues.SettingsPatch{})
			require.NoError(b, err)
			fillBenchQueue(ctx, b, engine, b.N)
			conn, err := net.Dial("tcp", srv.Addr())
			require.NoError(b, err)
			defer conn.Close()
			client := &rawClient{conn: conn, in: make([]byte, 4096), out: make([]byte, 0, 1024)}
			requestBody := []byte(`{"downloader": "bencher", "api_version": "2", "version": "20260101.01"}`)
			doneBody := make([]byte, 0, 256)
			b.ReportAllocs()
			cpuBefore := processCPU(b)
			b.ResetTimer()
			for range b.N {
				status, body := client.post("/bench/request", requestBody)
				name, ok := bytes.CutPrefix(body, []byte(`{"item_name":"`))
				name, ok2 := bytes.CutSuffix(name, []byte(`"}`))
				if status != http.StatusOK || !ok || !ok2 {
					b.Fatalf("request: %d %s", status, body)
				}
				doneBody = append(append(append(doneBody[:0], `{"downloader": "bencher", "version": "20260101.01", "item": "`...), name...),
					`", "bytes": {"data": 123456}, "id": {"pipeline_hash": "abc", "python_version": "3.9.2"}}`...)
				if status, body := client.post("/bench/done", doneBody); status != http.StatusOK || string(body) != "OK\n" {
					b.Fatalf("done: %d %s", status, body)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpuBefore).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// rawClient posts on one kept-alive connection and reads answers with a
// Content-Length, reusing its buffers.
type rawClient struct {
	conn net.Conn
	in   []byte
	out  []byte
	n    int // bytes in in
	used int // of them, the answer read last
}

func (c *rawClient) post(path string, body []byte) (int, []byte) {
	c.n = copy(c.in, c.in[c.used:c.n])
	c.used = 0
	c.out = append(c.out[:0], "POST "...)
	c.out = append(c.out, path...)
	c.out = append(c.out, " HTTP/1.1\r\nHost: bench\r\nUser-Agent: ArchiveTeam Warrior/0.10.3 Standalone\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.out = strconv.AppendInt(c.out, int64(len(body)), 10)
	c.out = append(c.out, "\r\n\r\n"...)
	c.out = append(c.out, body...)
	if _, err := c.conn.Write(c.out); err != nil {
		return 0, nil
	}
	for {
		if end := bytes.Index(c.in[:c.n], []byte("\r\n\r\n")); end >= 0 {
			head := c.in[:end]
			status, _ := strconv.Atoi(string(head[9:12]))
			i := bytes.Index(head, []byte("Content-Length: "))
			if i < 0 {
				return status, nil
			}
			lenText, _, _ := bytes.Cut(head[i+len("Content-Length: "):], []byte("\r\n"))
			length, _ := strconv.Atoi(string(lenText))
			total := end + 4 + length
			for c.n < total {
				m, err := c.conn.Read(c.in[c.n:])
				if err != nil {
					return 0, nil
				}
				c.n += m
			}
			c.used = total // the answer stays until the next post
			return status, c.in[end+4 : total]
		}
		m, err := c.conn.Read(c.in[c.n:])
		if err != nil {
			return 0, nil
		}
		c.n += m
	}
}

// fillBenchQueue queues n items in project "bench", 10,000 per call.
func fillBenchQueue(ctx context.Context, b *testing.B, engine *queues.Engine, n int) {
	b.Helper()
	batch := make([]queues.QueueItem, 0, 10_000)
	for i := range n {
		batch = append(batch, queues.QueueItem{Name: fmt.Sprintf("bench/item/%09d", i)})
		if len(batch) == cap(batch) || i == n-1 {
			_, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, batch)
			require.NoError(b, err)
			batch = batch[:0]
		}
	}
}

// BenchmarkWarriorMultiRoundTripOverTCP: seesaw's multi=100 round trip
// (one request for 100 items, then one done naming them, NUL-joined) over
// one kept-alive loopback connection to the warrior listener: hoard's CPU
// per round trip of 100 items (cpu-us/op, this process's: the handlers,
// the engine and go-redis, plus the few lines of the raw client) and its
// allocations, without the load generator's or other warriors' CPU that
// `hoard-bench warrior-path`'s multi100 figure shares the cores with.
func BenchmarkWarriorMultiRoundTripOverTCP(b *testing.B) {
	const multi = 100
	backend := redistest.Require(b)[0]
	ctx := context.Background()
	require.NoError(b, redistest.Flush(ctx, backend))
	engine := queues.NewEngine(backend.Client, queues.Options{Logger: quiet})
	srv, err := server.New(server.Config{Listen: "127.0.0.1:0", Logger: quiet,
		ProjectsFile: filepath.Join(b.TempDir(), "projects.json")}, engine)
	require.NoError(b, err)
	require.NoError(b, srv.Start(ctx))
	b.Cleanup(func() { _ = srv.Stop() })
	maxMulti := multi
	_, err = engine.CreateProject(ctx, "bench", queues.SettingsPatch{MaxMulti: &maxMulti})
	require.NoError(b, err)
	fillBenchQueue(ctx, b, engine, b.N*multi)
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(b, err)
	defer conn.Close()
	client := &rawClient{conn: conn, in: make([]byte, 16384), out: make([]byte, 0, 8192)}
	requestBody := []byte(`{"downloader": "bencher", "api_version": "2", "version": "20260101.01"}`)
	doneBody := make([]byte, 0, 8192)
	b.ReportAllocs()
	cpuBefore := processCPU(b)
	b.ResetTimer()
	for range b.N {
		status, body := client.post("/bench/multi=100//request", requestBody)
		// The reply's JSON string goes into the done as it is: the
		// names NUL-joined, each NUL escaped as \u0000.
		names, ok := bytes.CutPrefix(body, []byte(`{"item_name":"`))
		names, ok2 := bytes.CutSuffix(names, []byte(`"}`))
		if status != http.StatusOK || !ok || !ok2 || bytes.Count(names, []byte(`\u0000`)) != multi-1 {
			b.Fatalf("request: %d %s", status, body)
		}
		doneBody = append(append(append(doneBody[:0], `{"downloader": "bencher", "version": "20260101.01", "item": "`...), names...),
			`", "bytes": {"data": 123456}, "id": {"pipeline_hash": "abc", "python_version": "3.9.2"}}`...)
		if status, body := client.post("/bench/done", doneBody); status != http.StatusOK || string(body) != "OK\n" {
			b.Fatalf("done: %d %s", status, body)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpuBefore).Microseconds())/float64(b.N), "cpu-us/op")
}
