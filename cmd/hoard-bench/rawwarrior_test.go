package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/unittier"
	"github.com/hoardproject/hoard/queues"
)

// TestBothClientsAgreeAgainstARealHoard: the raw client and net/http's,
// each kept alive and with a new connection per call, one item and seven
// per request, drain the same queue of a real hoard (names with JSON's
// escapes, non-ASCII and astral characters included) and count the same
// round trips and items as the server counts done.
func TestBothClientsAgreeAgainstARealHoard(t *testing.T) {
	unittier.Skip(t, "it runs a redis-server and a hoard server")
	ctx := context.Background()
	env, err := startBenchEnv(ctx, benchOptions{})
	require.NoError(t, err)
	t.Cleanup(env.stop)
	const items = 150
	names := func(slug string) []queues.QueueItem {
		batch := make([]queues.QueueItem, items)
		for i := range batch {
			batch[i].Name = fmt.Sprintf("%s/%d \"quoted\" back\\slash é 😀 \t/", slug, i)
		}
		return batch
	}
	n := 0
	for _, client := range []string{clientRaw, clientNetHTTP} {
		for _, keepAlive := range []bool{true, false} {
			for _, multi := range []int{1, 7} {
				n++
				slug := fmt.Sprintf("agree%d", n)
				name := fmt.Sprintf("%s keep-alive %v multi %d", client, keepAlive, multi)
				maxMulti := queues.MaxMulti
				_, err := env.engine.CreateProject(ctx, slug, queues.SettingsPatch{MaxMulti: &maxMulti})
				require.NoError(t, err)
				_, err = env.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, names(slug))
				require.NoError(t, err)
				o := loadOptions{url: env.url, project: slug, warriors: 4, multi: multi, duration: time.Minute, keepAlive: keepAlive, client: client}
				var report loadReport
				if client == clientRaw {
					report, err = loadWarriorsRaw(ctx, o)
				} else {
					report, err = loadWarriors(ctx, o)
				}
				require.NoError(t, err, name)
				require.True(t, report.Drained, name)
				require.Equal(t, int64(items), report.Items, name)
				require.Equal(t, int64((items+multi-1)/multi), report.RoundTrips, name)
				require.Positive(t, report.P99Millis, name)
				require.LessOrEqual(t, report.P50Millis, report.P99Millis, name)
				counts, err := env.engine.Counts(ctx, slug)
				require.NoError(t, err)
				require.Equal(t, int64(items), counts.Done, name)
				require.Zero(t, counts.Out, name)
				require.Zero(t, counts.Todo, name)
			}
		}
	}
}

// TestRawClientReportsAServersRefusal: a reply the warrior does not
// expect ends the run with an error that shows it.
func TestRawClientReportsAServersRefusal(t *testing.T) {
	unittier.Skip(t, "it runs a redis-server and a hoard server")
	ctx := context.Background()
	env, err := startBenchEnv(ctx, benchOptions{})
	require.NoError(t, err)
	t.Cleanup(env.stop)
	newer := "99990101.01"
	_, err = env.engine.CreateProject(ctx, "newer", queues.SettingsPatch{MinVersion: &newer})
	require.NoError(t, err)
	_, err = env.engine.Enqueue(ctx, "newer", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "a"}})
	require.NoError(t, err)
	_, err = loadWarriorsRaw(ctx, loadOptions{url: env.url, project: "newer", warriors: 2, multi: 1, duration: time.Minute, keepAlive: true})
	require.ErrorContains(t, err, "request: HTTP 455")
	_, err = loadWarriorsRaw(ctx, loadOptions{url: "https://127.0.0.1:1", project: "p", warriors: 1, multi: 1, duration: time.Second})
	require.ErrorContains(t, err, "plain http://")
}

// TestClientFlagIsChecked: an unknown --client is refused before anything
// starts, by load and by warrior-path.
func TestClientFlagIsChecked(t *testing.T) {
	_, err := runBench(t, "load", "--url", "http://127.0.0.1:1", "--project", "p", "--client", "curl")
	require.EqualError(t, err, `--client "curl": raw or net/http`)
	_, err = runBench(t, "warrior-path", "--client", "curl")
	require.EqualError(t, err, `--client "curl": raw or net/http`)
}

// scriptedServer accepts connections and answers each request read with
// the next of answers (raw bytes), recording the requests; a connection
// is closed after an answer holding "Connection: close".
type scriptedServer struct {
	addr     string
	accepted chan int
	requests chan *http.Request
	bodies   chan string
}

func startScriptedServer(t *testing.T, answers ...string) *scriptedServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	s := &scriptedServer{addr: l.Addr().String(), accepted: make(chan int, 100),
		requests: make(chan *http.Request, 100), bodies: make(chan string, 100)}
	next := make(chan string, len(answers))
	for _, a := range answers {
		next <- a
	}
	close(next)
	go func() {
		for n := 1; ; n++ {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted <- n
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					s.requests <- req
					s.bodies <- string(body)
					answer, ok := <-next
					if !ok {
						return
					}
					if _, err := conn.Write([]byte(answer)); err != nil || strings.Contains(answer, "Connection: close") {
						return
					}
				}
			}()
		}
	}()
	return s
}

// TestRawWarriorSpeaksSeesawAndHonoursConnectionClose: the calls are
// seesaw's (paths, headers, bodies as Python writes them, the name's
// escapes), a server's Connection: close makes the next call dial, and
// bytes beyond an answer are an error.
func TestRawWarriorSpeaksSeesawAndHonoursConnectionClose(t *testing.T) {
	reply := `{"item_name":"a\u0000\u00e9\"","x":1}`
	claim := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(reply), reply)
	doneOK := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nOK\n"
	s := startScriptedServer(t, claim, doneOK, claim, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOKHTTP/1.1 200 OK\r\n")
	base, err := url.Parse("http://" + s.addr + "/prefix/")
	require.NoError(t, err)
	w := newRawWarrior(base, "proj", "warrior007", 3, true)
	defer w.closeConn()
	n, err := w.roundTrip(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, 2, n, "two NUL-joined names")
	req := <-s.requests
	require.Equal(t, "/prefix/proj/multi=3//request", req.URL.Path)
	require.Equal(t, s.addr, req.Host)
	require.Equal(t, "ArchiveTeam Warrior/0.10.3 Standalone hoard-bench", req.UserAgent())
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.Equal(t, "gzip", req.Header.Get("Accept-Encoding"))
	require.False(t, req.Close)
	require.Equal(t, `{"downloader": "warrior007", "api_version": "2", "version": "20260101.01"}`, <-s.bodies)
	req = <-s.requests
	require.Equal(t, "/prefix/proj/done", req.URL.Path)
	require.Equal(t, `{"downloader": "warrior007", "version": "20260101.01", "item": "a\u0000\u00e9\"", "bytes": {"data": 1000}, "id": {"pipeline_hash": "bench"}}`, <-s.bodies)
	require.Equal(t, 1, <-s.accepted)
	require.Nil(t, w.conn, "closed after the server's Connection: close")

	_, err = w.roundTrip(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, 2, <-s.accepted, "the next call dialled")
	// That done's answer came with bytes no request asked for: the next
	// call finds them and stops.
	_, err = w.roundTrip(context.Background(), time.Now())
	require.ErrorContains(t, err, "bytes after the last response")
	require.Nil(t, w.conn)
}

// TestRawWarriorWithoutKeepAliveSaysCloseAndDialsPerCall: seesaw's
// Connection: close, one connection per call.
func TestRawWarriorWithoutKeepAliveSaysCloseAndDialsPerCall(t *testing.T) {
	s := startScriptedServer(t,
		"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n"+`{"item_name":"b"}`,
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nOK\r\n0\r\n\r\n")
	base, err := url.Parse("http://" + s.addr)
	require.NoError(t, err)
	w := newRawWarrior(base, "proj", "warrior001", 1, false)
	n, err := w.roundTrip(context.Background(), time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	for _, path := range []string{"/proj/request", "/proj/done"} {
		req := <-s.requests
		require.Equal(t, path, req.URL.Path)
		require.True(t, req.Close, path)
	}
	require.Equal(t, 1, <-s.accepted)
	require.Equal(t, 2, <-s.accepted)
	require.Nil(t, w.conn)
}
