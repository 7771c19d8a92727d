package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/http1"
	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// workAccess is a PluginAccess owning project "plug", open to the
// bearer "worker".
type workAccess struct{}

func (workAccess) WarriorAccess(project, bearer string) (string, bool, bool) {
	return "scoring", project == "plug", bearer == "worker"
}
func (workAccess) PrivateProject(string) bool { return false }

// conversation is raw requests sent on one connection; pipelined ones are
// written at once before any answer is read.
type conversation struct {
	name      string
	requests  []string
	pipelined bool
}

func rawPost(path, body string, headers ...string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: hoard.test\r\nUser-Agent: ArchiveTeam Warrior/0.10.3 Standalone\r\n" +
		"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n" + strings.Join(headers, "") +
		"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// warriorConversations cover what seesaw and grab scripts send to the
// warrior calls, their refusals, and what the warrior listener hands on.
func warriorConversations() []conversation {
	v2 := `{"downloader": "tester1", "api_version": "2", "version": "20240101.11"}`
	return []conversation{
		{name: "keep-alive round trips and refusals", requests: []string{
			rawPost("/open/request", v2),
			rawPost("/open/request", `{"downloader":"tester1"}`),
			rawPost("/open/multi=2//request", v2),
			rawPost("/open/done", `{"downloader": "tester1", "version": "20240101.11", "item": "a", "bytes": {"data": 1234}, "id": {"pipeline_hash": "abc"}}`),
			rawPost("/open/done", `{"downloader":"tester2","item":"b","bytes":{"data":1}}`),
			rawPost("/open/done", `{"downloader":"tester1","item":"b\u0000zz","bytes":{"data":1}}`),
			rawPost("/open/done", `{"downloader":"tester1","bytes":{"data":1}}`),
			rawPost("/open/done", `{"downloader":"tester1","item":"b","bytes":{"data":-1}}`),
			rawPost("/open/done", `{"downloader": "tester1"`),
			rawPost("/open/done", ``),
			rawPost("/open/fail", `{"downloader":"tester1","item":"c","reason":"HTTP 451"}`),
			rawPost("/open/fail", `{"downloader":"tester1","item":"nope","reason":"x"}`),
			rawPost("/nosuch/request", v2),
			rawPost("/empty/request", v2),
			rawPost("/slow/request", v2),
			rawPost("/slow/request", v2),
			rawPost("/versioned/request", `{"downloader":"tester1","api_version":"2","version":"20240101.9"}`),
			rawPost("/guarded/request", `{"downloader":"mallory","api_version":"2"}`),
			rawPost("/open/request", `{"downloader":"bad nick!"}`),
			rawPost("/plug/request", v2),
			rawPost("/plug/request", v2, "Authorization: Bearer worker\r\n"),
			// Handed on: the rest of the connection is net/http's.
			"GET /now HTTP/1.1\r\nHost: hoard.test\r\n\r\n",
			rawPost("/open/request", v2),
		}},
		{name: "pipelined", pipelined: true, requests: []string{
			rawPost("/open/request", v2), rawPost("/open/request", v2, "Connection: close\r\n"),
		}},
		{name: "connection close", requests: []string{rawPost("/open/request", v2, "Connection: close\r\n")}},
		{name: "HTTP/1.0", requests: []string{strings.Replace(rawPost("/open/request", v2), "HTTP/1.1", "HTTP/1.0", 1)}},
		{name: "Expect", requests: []string{rawPost("/open/request", v2, "Expect: 100-continue\r\n")}},
		{name: "body past the limit", requests: []string{rawPost("/open/request", `{"downloader":"tester1","pad":"`+strings.Repeat("x", 5000)+`"}`)}},
		{name: "bad multi", requests: []string{rawPost("/open/multi=0//request", v2)}},
		{name: "GET of a warrior path", requests: []string{"GET /open/request HTTP/1.1\r\nHost: hoard.test\r\n\r\n"}},
		{name: "upload, a page, 404", requests: []string{
			rawPost("/open/upload", `{"downloader":"tester1"}`),
			"GET /open/stats.json HTTP/1.1\r\nHost: hoard.test\r\n\r\n",
			rawPost("/open/nothing", `{}`),
		}},
		{name: "no Host", requests: []string{strings.Replace(rawPost("/open/request", v2), "Host: hoard.test\r\n", "", 1)}},
	}
}

// transcript runs the conversations against a server on a fresh backend
// and returns, per conversation, every byte the server sent (Date masked).
func transcript(t *testing.T, b redistest.Backend, netHTTPOnly bool) ([]string, *Server) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, redistest.Flush(ctx, b))
	clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	engine := queues.NewEngine(b.Client, queues.Options{Clock: clock, Logger: quietLog})
	srv, err := New(Config{Listen: "127.0.0.1:0", Logger: quietLog, WarriorBodyBytes: 4096,
		PluginAccess: workAccess{}, NetHTTPOnly: netHTTPOnly, ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() { _ = srv.Stop() })

	project := func(slug string, patch queues.SettingsPatch, items ...string) {
		_, err := engine.CreateProject(ctx, slug, patch)
		require.NoError(t, err)
		q := make([]queues.QueueItem, len(items))
		for i, it := range items {
			q[i] = queues.QueueItem{Name: it}
		}
		if len(q) > 0 {
			_, err = engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, q)
			require.NoError(t, err)
		}
	}
	items := make([]string, 30)
	for i := range items {
		items[i] = string(rune('a' + i%26))
		if i >= 26 {
			items[i] += "2"
		}
	}
	project("open", queues.SettingsPatch{UploadTargets: &[]string{"rsync://up/:downloader/"}}, items...)
	project("empty", queues.SettingsPatch{})
	rate := 1.0
	project("slow", queues.SettingsPatch{RatePerMinute: &rate}, "s1", "s2")
	minVersion := "20240101.10"
	project("versioned", queues.SettingsPatch{MinVersion: &minVersion}, "v1")
	project("guarded", queues.SettingsPatch{}, "g1")
	require.NoError(t, engine.Block(ctx, "guarded", "mallory", queues.BlockEntry{Reason: "scraping junk"}))
	project("plug", queues.SettingsPatch{}, "p1")

	date := regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)
	var out []string
	for _, conv := range warriorConversations() {
		nc, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		require.NoError(t, nc.SetDeadline(time.Now().Add(20*time.Second)))
		var got bytes.Buffer
		br := bufio.NewReader(io.TeeReader(nc, &got))
		if conv.pipelined {
			_, err := io.WriteString(nc, strings.Join(conv.requests, ""))
			require.NoError(t, err)
		}
		for _, raw := range conv.requests {
			if !conv.pipelined {
				_, err := io.WriteString(nc, raw)
				require.NoError(t, err)
			}
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
			method := http.MethodPost
			if err == nil {
				method = req.Method
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			require.NoError(t, err, "%s: %q", conv.name, raw)
			for resp.StatusCode < 200 { // net/http's 100 Continue: the answer follows
				resp, err = http.ReadResponse(br, &http.Request{Method: method})
				require.NoError(t, err, "%s: %q", conv.name, raw)
			}
			_, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			_ = resp.Body.Close()
			if resp.Close {
				break
			}
		}
		require.NoError(t, nc.Close())
		out = append(out, date.ReplaceAllString(got.String(), "Date: <date>\r"))
	}
	return out, srv
}

// TestWarriorListenerAnswersAsNetHTTP: every conversation gets the same
// bytes from the warrior listener as from net/http and gin alone (status,
// headers in order, bodies, Connection), the Date aside; the listener
// answered the warrior calls itself and handed the rest on.
func TestWarriorListenerAnswersAsNetHTTP(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		want, _ := transcript(t, b, true)
		got, srv := transcript(t, b, false)
		convs := warriorConversations()
		for i := range convs {
			require.Equal(t, want[i], got[i], convs[i].name)
		}
		require.Contains(t, got[0], "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\nRetry-After: 60\r\n")
		require.Contains(t, got[0], `{"code":"plugin_work"`)
		require.Contains(t, got[1], "Connection: close\r\n")
		// The first conversation's 21 calls before GET /now, the
		// pipelined two, the closing one, the missing Host's nothing.
		require.Equal(t, int64(21+2+1), srv.warriors.answered.Load())
		// GET /now, HTTP/1.0, Expect, the large body, bad multi, GET,
		// upload, no Host.
		require.Equal(t, int64(8), srv.warriors.handedOff.Load())
	})
}

// stubEngine answers every warrior call at once, without Redis, so the
// fuzz test below drives the connection loop alone.
type stubEngine struct{ WarriorEngine }

func (stubEngine) Claim(context.Context, queues.ClaimRequest) (queues.ClaimResult, error) {
	return queues.ClaimResult{Items: []queues.ClaimedItem{{Name: "item-1"}}}, nil
}
func (stubEngine) Done(context.Context, queues.DoneRequest) (queues.DoneResult, error) {
	return queues.DoneResult{}, nil
}
func (stubEngine) ReportFailure(context.Context, queues.FailRequest) (queues.FailResult, error) {
	return queues.FailResult{Items: 1, To: "failed"}, nil
}

// pieceConn is a net.Conn reading its input in pieces of at most piece
// bytes, then EOF, and keeping what is written.
type pieceConn struct {
	in     []byte
	piece  int
	writes [][]byte
}

func (c *pieceConn) Read(b []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.in[:min(len(c.in), c.piece)])
	c.in = c.in[n:]
	return n, nil
}
func (c *pieceConn) Write(b []byte) (int, error) {
	c.writes = append(c.writes, bytes.Clone(b))
	return len(b), nil
}
func (c *pieceConn) Close() error        { return nil }
func (c *pieceConn) LocalAddr() net.Addr { return &net.TCPAddr{} }
func (c *pieceConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}
}
func (c *pieceConn) SetDeadline(time.Time) error      { return nil }
func (c *pieceConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pieceConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzWarriorConn feeds bytes, in pieces the fuzzer chooses, through a
// warrior connection's loop: it ends without panics; each write is one
// well-formed response with its whole body; and a connection handed to
// net/http carries exactly the input not yet answered (what net/http
// then reads is a suffix of what was sent: nothing lost, nothing read
// twice), or the loop answered or dropped all of it.
func FuzzWarriorConn(f *testing.F) {
	for _, s := range http1.SampleHeads {
		f.Add([]byte(s), uint8(7))
	}
	v2 := `{"downloader": "tester1", "api_version": "2"}`
	f.Add([]byte(rawPost("/p/request", v2)+rawPost("/p/done", `{"downloader":"tester1","item":"item-1"}`)+"GET /now HTTP/1.1\r\nHost: h\r\n\r\n"), uint8(40))
	f.Add([]byte(rawPost("/p/fail", `{"downloader":"tester1","item":"x"}`)+rawPost("/p/multi=3//request", v2, "Connection: close\r\n")), uint8(255))
	f.Add([]byte(rawPost("/p/request", v2, "X-Forwarded-For: 1.2.3.4\r\n", "Authorization: Bearer worker\r\n")), uint8(3))
	metrics := NewMetrics(nil, quietLog)
	api := &WarriorAPI{Engine: stubEngine{}, MaxBodyBytes: 1 << 10, Access: workAccess{}}
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		l := newWarriorListener(api, metrics, ratelog.New(ratelog.Config{Logger: quietLog}), quietLog, nil)
		l.handoff = newHandoffListener(&net.TCPAddr{})
		handed := readHandedOff(l.handoff)
		nc := &pieceConn{in: data, piece: max(int(piece), 1)}
		c := l.conns.NewConn(nc)
		done := make(chan struct{})
		go func() { l.conns.ServeConn(c); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second): // far beyond any input's work
			t.Fatalf("the loop hangs on %q in pieces of %d", data, piece)
		}
		for _, w := range nc.writes {
			br := bufio.NewReader(bytes.NewReader(w))
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
			require.NoError(t, err, "%q", w)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, resp.ContentLength, int64(len(body)), "%q", w)
			require.Zero(t, br.Buffered(), "one write is one response: %q", w)
		}
		l.handoff.closeWith(net.ErrClosed)
		if rest := <-handed; rest != nil {
			require.True(t, bytes.HasSuffix(data, rest), "handed on %q of %q", rest, data)
			require.NotEmpty(t, rest)
		}
		require.Zero(t, l.conns.OpenConnections())
	})
}

// blockingEngine's claims wait for release: a call in flight.
type blockingEngine struct {
	stubEngine
	entered, release chan struct{}
}

func (e blockingEngine) Claim(ctx context.Context, req queues.ClaimRequest) (queues.ClaimResult, error) {
	e.entered <- struct{}{}
	<-e.release
	return e.stubEngine.Claim(ctx, req)
}

// TestWarriorListenerStopWaitsForCallsInFlight: stopping closes the
// listener and the idle connections at once, lets a call in flight finish
// (its answer says Connection: close), then returns; twice is safe.
func TestWarriorListenerStopWaitsForCallsInFlight(t *testing.T) {
	engine := blockingEngine{entered: make(chan struct{}), release: make(chan struct{})}
	api := &WarriorAPI{Engine: engine, MaxBodyBytes: 1 << 10}
	l := newWarriorListener(api, NewMetrics(nil, quietLog), ratelog.New(ratelog.Config{Logger: quietLog}), quietLog, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l.start(ln, newHandoffListener(ln.Addr()))

	idle, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, rawPost("/p/done", `{"downloader":"tester1","item":"x"}`))
	require.NoError(t, err)
	idleReader := bufio.NewReader(idle)
	resp, err := http.ReadResponse(idleReader, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, _ = io.ReadAll(resp.Body)

	busy, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer busy.Close()
	_, err = io.WriteString(busy, rawPost("/p/request", `{"downloader":"tester1","api_version":"2"}`))
	require.NoError(t, err)
	<-engine.entered

	l.close()
	l.close()
	_, err = net.Dial("tcp", ln.Addr().String())
	require.Error(t, err, "the listener is closed")
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = idleReader.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection is closed at once")

	waited := make(chan struct{})
	go func() { l.wait(context.Background()); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned with a call in flight")
	default:
	}
	close(engine.release)
	require.NoError(t, busy.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err = http.ReadResponse(bufio.NewReader(busy), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, resp.Close, "the answer during Stop closes its connection")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"item_name":"item-1"}`, string(body))
	<-waited
	l.wait(context.Background()) // again: returns at once
}

// TestWarriorHeadPastTheLimitGoesToNetHTTP: a call whose head is at most
// warriorMaxHead is answered here; a longer one is handed to net/http
// with every byte read, and nothing is answered here.
func TestWarriorHeadPastTheLimitGoesToNetHTTP(t *testing.T) {
	api := &WarriorAPI{Engine: stubEngine{}, MaxBodyBytes: 1 << 10, Access: workAccess{}}
	for _, tc := range []struct {
		pad       int
		handedOff bool
	}{{0, false}, {warriorMaxHead / 2, false}, {warriorMaxHead, true}} {
		l := newWarriorListener(api, NewMetrics(nil, quietLog), ratelog.New(ratelog.Config{Logger: quietLog}), quietLog, nil)
		l.handoff = newHandoffListener(&net.TCPAddr{})
		handed := readHandedOff(l.handoff)
		raw := rawPost("/p/done", `{"downloader":"tester1","item":"x"}`, "X-Pad: "+strings.Repeat("p", tc.pad)+"\r\n")
		nc := &pieceConn{in: []byte(raw), piece: 1000}
		l.conns.ServeConn(l.conns.NewConn(nc))
		l.handoff.closeWith(net.ErrClosed)
		rest := <-handed
		if tc.handedOff {
			require.Equal(t, raw, string(rest), "net/http reads the whole request")
			require.Empty(t, nc.writes)
			continue
		}
		require.Nil(t, rest)
		require.Len(t, nc.writes, 1)
		require.True(t, strings.HasPrefix(string(nc.writes[0]), "HTTP/1.1 200 OK\r\n"), "%q", nc.writes[0])
	}
}

// readHandedOff reads what the handoff listener's first connection
// carries: the bytes the warrior listener handed on to net/http, or nil
// when the listener closed with nothing handed.
func readHandedOff(h *handoffListener) <-chan []byte {
	handed := make(chan []byte, 1)
	go func() {
		nc, err := h.Accept()
		if err != nil {
			handed <- nil
			return
		}
		rest, _ := io.ReadAll(nc)
		handed <- rest
	}()
	return handed
}
