package leaderboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/queues"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// frontend is one hub serving one project's websocket, as a hoard
// frontend does.
func frontend(t *testing.T, b redistest.Backend, engine leaderboard.Source, cfg leaderboard.Config) (*leaderboard.Hub, string) {
	t.Helper()
	cfg.Logger = quiet
	hub := leaderboard.NewHub(cfg, b.Client, engine)
	require.NoError(t, hub.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, hub.Stop()); require.NoError(t, hub.Stop()) })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := hub.Serve(w, r, "live", testClient(r)); err != nil {
			status := http.StatusServiceUnavailable
			if errors.Is(err, leaderboard.ErrTooManyViewersFromAddress) {
				status = http.StatusTooManyRequests
			}
			http.Error(w, err.Error(), status)
		}
	}))
	t.Cleanup(ts.Close)
	return hub, "ws" + strings.TrimPrefix(ts.URL, "http")
}

// testClient is the address a test viewer claims in X-Test-Client, else
// its real one: tests play many clients from one loopback address.
func testClient(r *http.Request) string {
	if client := r.Header.Get("X-Test-Client"); client != "" {
		return client
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return host
}

type message struct {
	Type   string            `json:"type"`
	Counts queues.Counts     `json:"counts"`
	Log    []json.RawMessage `json:"log"`
}

func read(t *testing.T, conn *websocket.Conn, timeout time.Duration) message {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(timeout)))
	_, raw, err := conn.ReadMessage()
	require.NoError(t, err)
	var m message
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

func TestDoneOnOneFrontendReachesViewersOfAnother(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		engineA := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		engineB := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		// A frontend runs its engine's flusher (server.Start does): it
		// publishes the completions, batched.
		flushCtx, stopFlusher := context.WithCancel(ctx)
		flushed := make(chan struct{})
		go func() { defer close(flushed); engineA.RunCounterFlusher(flushCtx) }()
		defer func() { stopFlusher(); <-flushed }()
		_, err := engineA.CreateProject(ctx, "live", queues.SettingsPatch{})
		require.NoError(t, err)
		_, err = engineA.Enqueue(ctx, "live", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "first"}, {Name: "second"}})
		require.NoError(t, err)
		_, err = engineA.Claim(ctx, queues.ClaimRequest{Project: "live", Downloader: "alice", Count: 1})
		require.NoError(t, err)
		_, err = engineA.Done(ctx, queues.DoneRequest{Project: "live", Downloader: "alice", Items: []string{"first"}})
		require.NoError(t, err)
		// Its hint goes out before the viewer connects (a viewer that
		// connects within PublishInterval of a done sees it in its
		// snapshot and again live).
		engineA.PublishCompletions(ctx)

		_, url := frontend(t, b, engineB, leaderboard.Config{Interval: 20 * time.Millisecond})
		conn, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer conn.Close()
		// On connect: a snapshot from stored state, not from pub/sub.
		snap := read(t, conn, 5*time.Second)
		require.Equal(t, "snapshot", snap.Type)
		require.EqualValues(t, 1, snap.Counts.Done)
		require.Len(t, snap.Log, 1)
		require.Contains(t, string(snap.Log[0]), `"first"`)

		_, err = engineA.Claim(ctx, queues.ClaimRequest{Project: "live", Downloader: "bobby", Count: 1})
		require.NoError(t, err)
		start := time.Now()
		_, err = engineA.Done(ctx, queues.DoneRequest{Project: "live", Downloader: "bobby", Items: []string{"second"}, Bytes: map[string]int64{"data": 7}})
		require.NoError(t, err)
		for {
			m := read(t, conn, 2*time.Second)
			if len(m.Log) > 0 {
				require.Equal(t, "update", m.Type)
				require.Contains(t, string(m.Log[0]), `"second"`)
				require.EqualValues(t, 2, m.Counts.Done)
				break
			}
		}
		require.Less(t, time.Since(start), time.Second)
	})
}

// TestSlowViewerIsDroppedAndOthersKeepFlowing: a viewer that never reads
// fills its buffers and is dropped; a reading viewer is not held up.
//
// The hints go out in lockstep with the reading viewer: the next is published
// only once it has received the last, so however slowly a loaded machine runs
// its goroutines it never has more than one update waiting, and only the
// viewer that never reads can fill its send buffer. (Publishing as fast as
// possible made the reading viewer's own buffer overflow whenever it was not
// scheduled for a few intervals, and dropped it too.) The write timeout is
// the default for the same reason: the slow viewer is dropped by its full
// buffer, not by a clock a busy scheduler can miss.
func TestSlowViewerIsDroppedAndOthersKeepFlowing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		_, err := engine.CreateProject(ctx, "live", queues.SettingsPatch{})
		require.NoError(t, err)
		hub, url := frontend(t, b, engine, leaderboard.Config{Interval: 5 * time.Millisecond, SendBuffer: 4})

		slow, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer slow.Close()
		fast, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer fast.Close()
		require.Eventually(t, func() bool { return hub.Viewers() == 2 }, 30*time.Second, 10*time.Millisecond)

		// latest is the highest hint number the reading viewer has got.
		var latest atomic.Int64
		hint := regexp.MustCompile(`"hint-(\d+)"`)
		var received sync.WaitGroup
		var sawAfter atomic.Bool
		received.Add(1)
		go func() {
			defer received.Done()
			for {
				_, raw, err := fast.ReadMessage()
				if err != nil {
					return
				}
				for _, m := range hint.FindAllSubmatch(raw, -1) {
					n, _ := strconv.ParseInt(string(m[1]), 10, 64)
					if n > latest.Load() {
						latest.Store(n)
					}
				}
				if strings.Contains(string(raw), `"after"`) {
					sawAfter.Store(true)
				}
			}
		}()
		// Big hints: the slow viewer's socket and then its buffer fill up.
		// Loopback socket buffers top out at a few MB, so a few hundred
		// 64 KB hints are more than enough; the bound only stops a broken
		// hub from looping forever.
		big := strings.Repeat("x", 64<<10)
		const maxHints = 2000
		sent := int64(0)
		for hub.Viewers() == 2 && sent < maxHints {
			sent++
			payload := fmt.Sprintf(`{"project":"live","entry":{"items":["hint-%d","%s"],"by":"bench1","at":1,"bytes":1}}`, sent, big)
			require.NoError(t, b.Client.Publish(ctx, queues.EventsChannel, payload).Err())
			require.Eventually(t, func() bool { return latest.Load() >= sent || hub.Viewers() != 2 }, 30*time.Second, time.Millisecond,
				"the reading viewer never got hint %d", sent)
		}
		require.Equal(t, 1, hub.Viewers(), "the slow viewer was dropped (after %d hints)", sent)
		// The fast viewer still gets updates.
		require.NoError(t, b.Client.Publish(ctx, queues.EventsChannel, `{"project":"live","entry":{"items":["after"],"by":"x","at":1,"bytes":1}}`).Err())
		require.Eventually(t, sawAfter.Load, 30*time.Second, 10*time.Millisecond, "the reading viewer kept getting updates")
		fast.Close()
		received.Wait()
	})
}

// fakeSource answers with fixed counts; its Counts can be made to fail and
// its Recent to wait, to put the hub into the states that matter.
type fakeSource struct {
	failCounts   atomic.Bool
	countsFailed atomic.Int64
	// gate, when set, makes the next Recent call send on called and wait
	// for gate to close.
	mu     sync.Mutex
	gate   chan struct{}
	called chan struct{}
}

func (f *fakeSource) Counts(context.Context, string) (queues.Counts, error) {
	if f.failCounts.Load() {
		f.countsFailed.Add(1)
		return queues.Counts{}, fmt.Errorf("redis is away")
	}
	return queues.Counts{Done: 7}, nil
}

func (f *fakeSource) Recent(ctx context.Context, _ string, _ int) ([]json.RawMessage, error) {
	f.mu.Lock()
	gate, called := f.gate, f.called
	f.gate = nil
	f.mu.Unlock()
	if gate != nil {
		called <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return []json.RawMessage{json.RawMessage(`{"items":["old"],"by":"x","at":1,"bytes":1}`)}, nil
}

func (f *fakeSource) holdNextRecent() (called chan struct{}, release chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate, f.called = make(chan struct{}), make(chan struct{}, 1)
	return f.called, f.gate
}

func publish(t *testing.T, b redistest.Backend, item string) {
	t.Helper()
	payload := fmt.Sprintf(`{"project":"live","entry":{"items":[%q],"by":"x","at":%d,"bytes":1}}`, item, time.Now().UnixMilli())
	require.NoError(t, b.Client.Publish(context.Background(), queues.EventsChannel, payload).Err())
}

// readUntil reads messages until one's log mentions item.
func readUntil(t *testing.T, conn *websocket.Conn, item string) message {
	t.Helper()
	for {
		m := read(t, conn, 5*time.Second)
		for _, e := range m.Log {
			if strings.Contains(string(e), `"`+item+`"`) {
				return m
			}
		}
	}
}

// TestSnapshotComesBeforeUpdates: updates broadcast while a new viewer's
// snapshot is being read reach it after the snapshot, not before, merged
// into one, so more of them than its buffer holds do not drop it.
func TestSnapshotComesBeforeUpdates(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		source := &fakeSource{}
		hub, url := frontend(t, b, source, leaderboard.Config{Interval: 5 * time.Millisecond, Sweep: time.Hour, SendBuffer: 2})
		first, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer first.Close()
		require.Equal(t, "snapshot", read(t, first, 5*time.Second).Type)

		called, release := source.holdNextRecent()
		joining, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer joining.Close()
		<-called // the joining viewer is registered and its snapshot is being read
		const during = 5
		for i := range during {
			publish(t, b, fmt.Sprintf("during%d", i))
			// The first viewer got it: it has been broadcast to the room.
			require.Equal(t, "update", readUntil(t, first, fmt.Sprintf("during%d", i)).Type)
		}
		close(release)

		m := read(t, joining, 5*time.Second)
		require.Equal(t, "snapshot", m.Type, "the snapshot is the first message")
		require.EqualValues(t, 7, m.Counts.Done)
		m = read(t, joining, 5*time.Second)
		require.Equal(t, "update", m.Type)
		require.Len(t, m.Log, during, "the held updates follow the snapshot as one")
		for i, e := range m.Log {
			require.Contains(t, string(e), fmt.Sprintf(`"during%d"`, i))
		}
		require.Equal(t, 2, hub.Viewers())
	})
}

// TestCountsFailureKeepsPendingEntries: when counts cannot be read, the
// coalesced entries wait for the next interval instead of being lost.
func TestCountsFailureKeepsPendingEntries(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		source := &fakeSource{}
		_, url := frontend(t, b, source, leaderboard.Config{Interval: 5 * time.Millisecond, Sweep: time.Hour})
		conn, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer conn.Close()
		require.Equal(t, "snapshot", read(t, conn, 5*time.Second).Type)

		source.failCounts.Store(true)
		publish(t, b, "kept")
		require.Eventually(t, func() bool { return source.countsFailed.Load() > 0 }, 5*time.Second, time.Millisecond)
		source.failCounts.Store(false)
		m := readUntil(t, conn, "kept")
		require.Equal(t, "update", m.Type)
		require.EqualValues(t, 7, m.Counts.Done)
	})
}

// TestServeAfterStopIsRefused: a stopped hub upgrades nobody.
func TestServeAfterStopIsRefused(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub, url := frontend(t, b, &fakeSource{}, leaderboard.Config{})
		require.NoError(t, hub.Stop())
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if conn != nil {
			conn.Close()
		}
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Zero(t, hub.Viewers())
	})
}

// TestOriginIsComparedWithoutCase: scheme and host are case-insensitive;
// another host is refused.
func TestOriginIsComparedWithoutCase(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub, url := frontend(t, b, &fakeSource{}, leaderboard.Config{})
		host := strings.TrimPrefix(url, "ws://")
		for _, origin := range []string{"http://" + host, "HTTP://" + host, "Https://" + strings.ToUpper(host)} {
			conn, _, err := websocket.DefaultDialer.Dial(url, http.Header{"Origin": {origin}})
			require.NoError(t, err, origin)
			require.Equal(t, "snapshot", read(t, conn, 5*time.Second).Type, origin)
			conn.Close()
		}
		for _, origin := range []string{"http://evil.example", "null", "ftp://" + host, "http://" + host + ".evil.example"} {
			conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Origin": {origin}})
			if conn != nil {
				conn.Close()
			}
			require.ErrorIs(t, err, websocket.ErrBadHandshake, origin)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, origin)
		}
		require.Eventually(t, func() bool { return hub.Viewers() == 0 }, 5*time.Second, 10*time.Millisecond)
	})
}
