package leaderboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

type staticSource struct{}

func (staticSource) Counts(context.Context, string) (queues.Counts, error) {
	return queues.Counts{}, nil
}
func (staticSource) Recent(context.Context, string, int) ([]json.RawMessage, error) {
	return []json.RawMessage{}, nil
}

// serveHub starts hub behind a test server whose errors are 503s.
func serveHub(t *testing.T, hub *Hub) string {
	t.Helper()
	require.NoError(t, hub.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, hub.Stop()) })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := hub.Serve(w, r, "live", testClient(r)); err != nil {
			status := http.StatusServiceUnavailable
			if errors.Is(err, ErrTooManyViewersFromAddress) {
				status = http.StatusTooManyRequests
			}
			http.Error(w, err.Error(), status)
		}
	}))
	t.Cleanup(ts.Close)
	return "ws" + strings.TrimPrefix(ts.URL, "http")
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestStopDuringUpgradeLeaksNoViewer: Stop runs while a viewer is being
// upgraded (from inside the origin check, the last step before the
// upgrade); the viewer is closed at once instead of outliving the hub.
func TestStopDuringUpgradeLeaksNoViewer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub := NewHub(Config{Logger: quietLogger}, b.Client, staticSource{})
		hub.up.CheckOrigin = func(*http.Request) bool {
			require.NoError(t, hub.Stop())
			return true
		}
		url := serveHub(t, hub)
		conn, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err, "the upgrade itself went through")
		defer conn.Close()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, _, err = conn.ReadMessage()
		require.True(t, websocket.IsCloseError(err, websocket.CloseGoingAway), "closed by the stopped hub, got %v", err)
		require.Zero(t, hub.Viewers())
	})
}

// TestMaxViewersHoldsDuringUpgrades: while one upgrade is in progress the
// only slot is taken, so a second viewer is refused rather than both
// passing the check.
func TestMaxViewersHoldsDuringUpgrades(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub := NewHub(Config{Logger: quietLogger, MaxViewers: 1}, b.Client, staticSource{})
		entered, release := make(chan struct{}), make(chan struct{})
		var held atomic.Bool
		hub.up.CheckOrigin = func(*http.Request) bool {
			if held.CompareAndSwap(false, true) { // hold the first upgrade only
				close(entered)
				<-release
			}
			return true
		}
		url := serveHub(t, hub)
		type dialed struct {
			conn *websocket.Conn
			err  error
		}
		done := make(chan dialed, 1)
		go func() {
			conn, _, err := websocket.DefaultDialer.Dial(url, nil)
			done <- dialed{conn, err}
		}()
		<-entered
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if conn != nil {
			conn.Close()
		}
		close(release)
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		d := <-done
		require.NoError(t, d.err)
		defer d.conn.Close()
		require.Equal(t, 1, hub.Viewers())
	})
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

// heardAt reports when the hub last heard from each of the room's
// viewers, by the clock.
func heardAt(hub *Hub) []time.Time {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	var out []time.Time
	for _, r := range hub.rooms {
		for v := range r.viewers {
			out = append(out, time.Unix(0, v.heard.Load()))
		}
	}
	return out
}

// TestIdleViewerIsDropped: by the injected clock, a viewer that sends
// nothing, not even a pong, is dropped once IdleTimeout passes, and its
// connection is closed; a viewer that answers the pings stays.
func TestIdleViewerIsDropped(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		clock := queues.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		hub := NewHub(Config{Logger: quietLogger, Clock: clock, Interval: 5 * time.Millisecond, Sweep: time.Hour}, b.Client, staticSource{})
		require.Equal(t, DefaultViewerIdleTimeout, hub.cfg.IdleTimeout)
		require.Equal(t, 30*time.Second, hub.cfg.PingEvery)
		url := serveHub(t, hub)

		silent, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer silent.Close()
		alive, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err)
		defer alive.Close()
		for _, conn := range []*websocket.Conn{silent, alive} {
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
			_, _, err := conn.ReadMessage() // the snapshot
			require.NoError(t, err)
		}
		// The live viewer reads on, answering pings as browsers do; the
		// silent one never reads again, so it never answers.
		pinged := make(chan struct{}, 10)
		alive.SetPingHandler(func(data string) error {
			err := alive.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(5*time.Second))
			pinged <- struct{}{}
			return err
		})
		aliveGone := make(chan error, 1)
		go func() {
			require.NoError(t, alive.SetReadDeadline(time.Time{}))
			for {
				if _, _, err := alive.ReadMessage(); err != nil {
					aliveGone <- err
					return
				}
			}
		}()
		require.Eventually(t, func() bool { return len(heardAt(hub)) == 2 }, 5*time.Second, time.Millisecond)
		start := clock.Now()

		// Two pings, 30 s apart: the live viewer's pongs are heard.
		for range 2 {
			clock.Advance(hub.cfg.PingEvery)
			select {
			case <-pinged:
			case <-time.After(5 * time.Second):
				t.Fatal("no ping reached the live viewer")
			}
			now := clock.Now()
			require.Eventually(t, func() bool {
				for _, at := range heardAt(hub) {
					if at.Equal(now) {
						return true
					}
				}
				return false
			}, 5*time.Second, time.Millisecond, "the pong was heard")
		}
		require.Equal(t, 2, hub.Viewers(), "60 s without a word is not yet idle")

		// 71 s after it last spoke, the silent viewer is dropped.
		clock.Advance(DefaultViewerIdleTimeout + time.Second - clock.Now().Sub(start))
		require.Eventually(t, func() bool { return hub.Viewers() == 1 }, 5*time.Second, time.Millisecond)
		require.NoError(t, silent.SetReadDeadline(time.Now().Add(5*time.Second)))
		silent.SetPingHandler(func(string) error { return nil }) // silent to the end
		for {
			// Pings queued before the drop come first, then the close.
			if _, _, err = silent.ReadMessage(); err != nil {
				break
			}
		}
		require.True(t, websocket.IsCloseError(err, websocket.CloseGoingAway), "the hub closed the idle viewer, got %v", err)
		select {
		case err := <-aliveGone:
			t.Fatalf("the live viewer was dropped: %v", err)
		default:
		}
		require.Len(t, heardAt(hub), 1)
	})
}
