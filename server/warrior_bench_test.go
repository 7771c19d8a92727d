package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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
	batch := make([]queues.QueueItem, 0, 10_000)
	for i := range b.N {
		batch = append(batch, queues.QueueItem{Name: fmt.Sprintf("bench/item/%09d", i)})
		if len(batch) == cap(batch) || i == b.N-1 {
			_, err := engine.Enqueue(ctx, "bench", queues.Target{Queue: queues.QueueTodo}, batch)
			require.NoError(b, err)
			batch = batch[:0]
		}
	}
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
