package leaderboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
func frontend(t *testing.T, b redistest.Backend, engine *queues.Engine, cfg leaderboard.Config) (*leaderboard.Hub, string) {
	t.Helper()
	cfg.Logger = quiet
	hub := leaderboard.NewHub(cfg, b.Client, engine)
	require.NoError(t, hub.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, hub.Stop()); require.NoError(t, hub.Stop()) })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = hub.Serve(w, r, "live")
	}))
	t.Cleanup(ts.Close)
	return hub, "ws" + strings.TrimPrefix(ts.URL, "http")
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
		_, err := engineA.CreateProject(ctx, "live", queues.SettingsPatch{})
		require.NoError(t, err)
		_, err = engineA.Enqueue(ctx, "live", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "first"}, {Name: "second"}})
		require.NoError(t, err)
		_, err = engineA.Claim(ctx, queues.ClaimRequest{Project: "live", Downloader: "alice", Count: 1})
		require.NoError(t, err)
		_, err = engineA.Done(ctx, queues.DoneRequest{Project: "live", Downloader: "alice", Items: []string{"first"}})
		require.NoError(t, err)

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
func TestSlowViewerIsDroppedAndOthersKeepFlowing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		_, err := engine.CreateProject(ctx, "live", queues.SettingsPatch{})
		require.NoError(t, err)
		hub, url := frontend(t, b, engine, leaderboard.Config{Interval: 5 * time.Millisecond, SendBuffer: 4, WriteTimeout: 200 * time.Millisecond})

		slow, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer slow.Close()
		fast, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer fast.Close()
		require.Eventually(t, func() bool { return hub.Viewers() == 2 }, 5*time.Second, 10*time.Millisecond)

		var received sync.WaitGroup
		var sawAfter atomic.Bool
		received.Add(1)
		go func() {
			defer received.Done()
			for {
				_ = fast.SetReadDeadline(time.Now().Add(3 * time.Second))
				_, raw, err := fast.ReadMessage()
				if err != nil {
					return
				}
				if strings.Contains(string(raw), `"after"`) {
					sawAfter.Store(true)
				}
			}
		}()
		// Big hints, fast: the slow viewer's socket and buffer fill up.
		big := strings.Repeat("x", 64<<10)
		deadline := time.Now().Add(10 * time.Second)
		for hub.Viewers() == 2 && time.Now().Before(deadline) {
			payload := fmt.Sprintf(`{"project":"live","entry":{"items":["%s"],"by":"bench1","at":%d,"bytes":1}}`, big, time.Now().UnixMilli())
			require.NoError(t, b.Client.Publish(ctx, queues.EventsChannel, payload).Err())
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, 1, hub.Viewers(), "the slow viewer was dropped")
		// The fast viewer still gets updates.
		require.NoError(t, b.Client.Publish(ctx, queues.EventsChannel, `{"project":"live","entry":{"items":["after"],"by":"x","at":1,"bytes":1}}`).Err())
		require.Eventually(t, sawAfter.Load, 3*time.Second, 10*time.Millisecond, "the reading viewer kept getting updates")
		fast.Close()
		received.Wait()
	})
}
